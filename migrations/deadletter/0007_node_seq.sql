-- The seq an event had on its node's gateway, for events a central gateway took in
-- from Kafka (as the audit store's column of the same name,
-- migrations/0011_node_seq.sql): a redelivered dead letter reaches its forwarder with
-- it. NULL for this gateway's own events and entries recorded before this version.
ALTER TABLE dead_letters ADD COLUMN node_seq INTEGER;
