-- A Merkle tree (RFC 6962) over the chained rows, in row order: the leaf of a row
-- is SHA-256(0x00 || the row's hashed column bytes, as the chain hashes them
-- after prev_hash). Signed tree heads (C2SP tlog-checkpoint) name its size and
-- root; inclusion and consistency proofs are read from its stored hashes.
--
-- first_row_id: the row of leaf 0 (the chain's first row, or for a store whose
-- oldest rows retention had deleted before this version, the first row left);
-- size: the leaves so far, so leaf i is row first_row_id + i. eventgate fills
-- the tree of rows stored before this version when it first opens the store.
CREATE TABLE audit_tree (
    id           INTEGER PRIMARY KEY CHECK (id = 1),
    first_row_id INTEGER NOT NULL,
    size         INTEGER NOT NULL DEFAULT 0
);

INSERT INTO audit_tree (id, first_row_id, size)
SELECT 1, max(c.first_row_id, c.pruned_row_id + 1), 0 FROM audit_chain c WHERE c.id = 1;

-- The stored hashes (Go sumdb/tlog's StoredHashIndex numbering: every leaf hash
-- and every complete subtree's, about two per leaf, never changed once written),
-- 126 to a row: hash number i is bytes 32*(i % 126) .. +32 of chunk i / 126. 126
-- hashes (4032 bytes) is the most one row holds inside a 4096-byte page, so the
-- tree takes about 65 bytes per leaf on disk.
CREATE TABLE audit_tree_hashes (
    chunk  INTEGER PRIMARY KEY,
    hashes BLOB NOT NULL
);

-- The record (the bytes its leaf hashes) of the last row retention deleted, kept
-- so that `audit verify` can show, with an inclusion proof against a signed tree
-- head, when that row was received, and so whether the retention policy the
-- checkpoints state allowed deleting it. NULL until retention deletes a row.
ALTER TABLE audit_chain ADD COLUMN pruned_record BLOB;
