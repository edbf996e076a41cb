-- How each taken-in event entered its node's gateway (`upstream:containerd`,
-- `publish`, `forward`, `eventgate`), from the Kafka record's `source` header: with
-- it a node's rows here hash exactly as the node's own audit store hashed them, so
-- `eventgate audit verify --store postgres://... --node NAME` checks this copy
-- against the node's signed checkpoints. NULL for rows written before this version
-- and for events whose producer did not say.
--
-- Adding a nullable column without a default changes no stored row: instant on a
-- table of any size, partitions included.
ALTER TABLE events ADD COLUMN node_source text;
