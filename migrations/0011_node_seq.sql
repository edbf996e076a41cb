-- The seq an event had on the gateway of its node, for events a central gateway took
-- in from another gateway (a Kafka `[[source]]`); NULL for events this gateway
-- captured itself, whose `seq` is their own. With `node` and `id` it says exactly
-- which event of which node's record a row is, whatever order the central gateway
-- received them in. A nullable column without a default: instant on any store.
--
-- The hash chain covers it for rows where it is not NULL, and then every other
-- column too (25 values, a count no other row has); other rows hash exactly as
-- before (migrations/README.md, version 11).
ALTER TABLE events ADD COLUMN node_seq INTEGER;
