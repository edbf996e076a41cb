-- Tamper evidence: every row stored from this version on carries a SHA-256 hash
-- chained to the hash of the chained row before it (src/store/chain.rs defines the
-- exact bytes hashed). `eventgate audit verify` recomputes the chain.
--
-- prev_hash is the hash the row was chained to (32 zero bytes for the first chained
-- row); keeping it tells a modified row (its own hash no longer matches) apart from
-- deleted or inserted rows (its link no longer matches its neighbour's hash).
ALTER TABLE events ADD COLUMN prev_hash BLOB;
ALTER TABLE events ADD COLUMN hash BLOB;

-- One row (id = 1): where the chain starts, where it ends, and the retention
-- checkpoint. The writer updates it in the same transaction as the rows it inserts
-- or prunes.
CREATE TABLE audit_chain (
    id               INTEGER PRIMARY KEY CHECK (id = 1),
    -- Rows below this row_id were stored before the chain existed (schema 1 or 2)
    -- and carry no hash; they are counted by verify, not verified.
    first_row_id     INTEGER NOT NULL,
    -- The last row the writer chained. Rows are inserted with row_id = head_row_id + 1,
    -- so row_ids keep increasing even after pruning emptied the table (SQLite would
    -- otherwise reuse them). head_hash NULL: nothing chained yet (prev = zeros).
    head_row_id      INTEGER NOT NULL,
    head_seq         INTEGER,
    head_hash        BLOB,
    -- Retention checkpoint: every row with row_id <= pruned_row_id was deleted by
    -- retention; pruned_hash is the hash of the last of them (NULL if it predated the
    -- chain), which the first remaining chained row links to.
    pruned_row_id    INTEGER NOT NULL DEFAULT 0,
    pruned_seq       INTEGER,
    pruned_timestamp TEXT,
    pruned_hash      BLOB,
    -- Rows deleted by retention so far, and when it last ran.
    pruned_rows      INTEGER NOT NULL DEFAULT 0,
    pruned_at        TEXT
);

INSERT INTO audit_chain (id, first_row_id, head_row_id)
SELECT 1, coalesce(max(row_id), 0) + 1, coalesce(max(row_id), 0) FROM events;
