-- Whether each event was received live or reconstructed by a reconcile (after a gap,
-- eventgate compares the daemon's state with what it recorded and records each
-- difference as the standard containerd event for it).
--
-- origin: 'live' (as received; every row stored before this version) or
-- 'reconciled'. origin_clock, for reconciled rows only: where the envelope's
-- timestamp came from, 'daemon' (containerd's own record of the change, such as a
-- task's exited_at) or 'reconcile' (eventgate's clock when it found the difference,
-- because the daemon did not say); NULL for live rows. Adding columns with a constant
-- default only rewrites the schema, not the rows: instant on any store.
--
-- The hash chain covers both for rows that are not live; live rows hash exactly as
-- before (migrations/README.md, schema version 6).
ALTER TABLE events ADD COLUMN origin TEXT NOT NULL DEFAULT 'live';
ALTER TABLE events ADD COLUMN origin_clock TEXT;

-- Reconciled rows are few, so `eventgate query 'origin==reconciled'` reads them from
-- this partial index instead of walking the table. It holds only reconciled rows:
-- inserting a live one does not touch it, and building it on an existing store reads
-- the table once and writes nothing (no row is reconciled yet).
CREATE INDEX events_reconciled ON events (timestamp) WHERE origin = 'reconciled';
