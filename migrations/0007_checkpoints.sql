-- Where the store is durable up to, per forwarder. Rows are committed with
-- `synchronous = NORMAL` (in WAL mode a power loss may undo the last commits), and
-- at each of the pipeline's checkpoints the forwarder records the spool position
-- it has stored everything before in a commit made with `synchronous = FULL`,
-- which syncs the write-ahead log and with it every commit before. Only then does
-- the spool cursor move past those events; after a power loss the spool sends
-- again what the store may have lost, and re-inserts of stored ids are no-ops.
--
-- forwarder: the [[forwarder]] name; next_seq: the spool position; at: when
-- (RFC 3339, UTC).
CREATE TABLE checkpoints (
    forwarder TEXT PRIMARY KEY,
    next_seq INTEGER NOT NULL,
    at TEXT NOT NULL
);
