-- The node each event was captured on (the gateway's `node`, the host name by
-- default; or the node a later source says a taken-in event came from), so a store
-- that holds a fleet's events says where each happened. NULL for rows stored before
-- this version and for events spooled before nodes were kept. A nullable column
-- without a default only changes the schema, not the rows: instant on any store.
--
-- The hash chain covers it for rows where it is not NULL, and then the workload
-- columns too (NULL or not), so that every count of hashed values keeps one
-- meaning; other rows hash exactly as before (migrations/README.md, version 10).
ALTER TABLE events ADD COLUMN node TEXT;
-- One node's rows in gateway order (`eventgate query --node`, `node==web-1`) and
-- `stats --by node` from the index alone. Partial like events_pod: rows without a
-- node (every row stored before this version) are not in it, so building it on an
-- existing store writes nothing.
CREATE INDEX events_node ON events (node) WHERE node IS NOT NULL;
