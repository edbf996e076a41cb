-- Which store this is, fixed when the store was made (or when it was first opened
-- by a version that keeps it): every signed checkpoint of the chain head names it, so
-- a checkpoint of one store can never be taken for another's, and a store replaced by
-- a fresh one (same path, same node) does not verify against the old one's
-- checkpoints. 32 lowercase hex digits from SQLite's randomness source.
CREATE TABLE audit_store (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    store_id   TEXT NOT NULL,
    created_at TEXT NOT NULL
);

INSERT INTO audit_store (id, store_id, created_at)
SELECT 1, lower(hex(randomblob(16))), strftime('%Y-%m-%dT%H:%M:%fZ', 'now');
