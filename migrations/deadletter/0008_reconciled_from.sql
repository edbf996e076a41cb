-- Whose record a reconciled event was reconstructed from, 'containerd', 'cri' or
-- 'docker' (as the audit store's column of the same name,
-- migrations/0012_reconciled_from.sql): a redelivered dead letter reaches its
-- forwarder still saying so. NULL for live events and for entries recorded before
-- this version, whose reconciled events were all containerd's. The manager's reason
-- needs no column: it travels in the `workload` blob (Workload field 8).
ALTER TABLE dead_letters ADD COLUMN reconciled_from TEXT;
