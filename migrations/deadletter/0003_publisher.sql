-- Who published each event, as in the audit store's columns of the same names
-- (migrations/0005_publisher.sql): a redelivered dead letter reaches its forwarder
-- with the publisher it was accepted with. All NULL: no publisher (or an entry
-- recorded before this version).
ALTER TABLE dead_letters ADD COLUMN publisher_uid INTEGER;
ALTER TABLE dead_letters ADD COLUMN publisher_gid INTEGER;
ALTER TABLE dead_letters ADD COLUMN publisher_pid INTEGER;
ALTER TABLE dead_letters ADD COLUMN publisher_subject TEXT;
