-- Rows in seq order, for subscribers that resume from a seq (`eventgate events
-- --after`, the resumable Subscribe): the first rows after a seq, and the oldest
-- seq kept, are found from the index instead of a scan of the table. With a spool
-- (every `serve`), seq continues across restarts, so it orders rows as row_id does.
CREATE INDEX events_seq ON events (seq);
