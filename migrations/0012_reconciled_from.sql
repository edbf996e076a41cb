-- Whose record a reconciled event was reconstructed from, and the reason its
-- container's manager gave for the state the event leaves it in.
--
-- reconciled_from, for reconciled rows only: 'containerd' (containerd's own lists),
-- 'cri' (the Kubernetes CRI's record, which keeps containers containerd deleted) or
-- 'docker' (dockerd's); NULL for live rows and for reconciled rows stored before this
-- version, which were all containerd's. reason: the manager's reason, such as the
-- CRI's 'OOMKilled', 'Error' or 'Completed', or 'OOMKilled' from dockerd; set only on
-- events a reconcile reconstructed from that record, NULL otherwise. Nullable columns
-- without a default only change the schema, not the rows: instant on any store.
--
-- The hash chain covers them for rows where either is not NULL, and then every other
-- column too (27 values, a count no other row has); other rows hash exactly as before
-- (migrations/README.md, schema version 12).
ALTER TABLE events ADD COLUMN reconciled_from TEXT;
ALTER TABLE events ADD COLUMN reason TEXT;
