-- Whether each event was received live or reconstructed by a reconcile, as in the
-- audit store's columns of the same names (migrations/0006_origin.sql): a redelivered
-- dead letter reaches its forwarder still marked. Entries recorded before this
-- version are live.
ALTER TABLE dead_letters ADD COLUMN origin TEXT NOT NULL DEFAULT 'live';
ALTER TABLE dead_letters ADD COLUMN origin_clock TEXT;
