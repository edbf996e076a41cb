-- How an event entered its node's gateway (`upstream:containerd`, `publish`, ...),
-- for events a central gateway took in from Kafka that said so (the `source`
-- header): a redelivered dead letter reaches its forwarder with it, so its central
-- copy still hashes as the node's audit store hashed it. NULL for this gateway's
-- own events and entries recorded before this version.
ALTER TABLE dead_letters ADD COLUMN node_source TEXT;
