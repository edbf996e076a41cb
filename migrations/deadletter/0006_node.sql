-- The node each event was captured on, as in the audit store's column of the same
-- name (migrations/0010_node.sql): a redelivered dead letter reaches its forwarder
-- with it, so JSON lines, Kafka headers and the audit store still say where the event
-- happened (redelivery does not pass through the exchange, which would otherwise
-- give it this gateway's node, possibly not the one it was captured on). NULL for
-- events of unknown node and for entries recorded before this version.
ALTER TABLE dead_letters ADD COLUMN node TEXT;
