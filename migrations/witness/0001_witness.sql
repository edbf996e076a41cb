-- A witness's state (`eventgate witness serve`, <data_dir>/witness.db): per log
-- origin, the latest checkpoint it cosigned; and the signed checkpoints it refused as
-- inconsistent with that one, kept as evidence of a log showing two histories.
--
-- heads: one row per origin, replaced (compare-and-set on size and root, in one
-- IMMEDIATE transaction) each time a checkpoint is cosigned. size is the tree size,
-- root the 32-byte root hash, note the whole signed checkpoint as the log sent it,
-- cosigned_at the time in the cosignature (Unix seconds).
CREATE TABLE heads (
    origin      TEXT    PRIMARY KEY,
    size        INTEGER NOT NULL CHECK (size >= 0),
    root        BLOB    NOT NULL CHECK (length(root) = 32),
    note        TEXT    NOT NULL,
    cosigned_at INTEGER NOT NULL
);

-- forks: a checkpoint correctly signed by the log's key and refused because it
-- contradicts the recorded head (another root for the recorded size, or a
-- consistency proof that does not verify from it). recorded_size and recorded_root
-- are the head it contradicted, old the size the log sent, reason the refusal.
-- At most 100 are kept per origin (the first ones): whoever holds the log's key
-- could otherwise fill the disk.
CREATE TABLE forks (
    id            INTEGER PRIMARY KEY,
    origin        TEXT    NOT NULL,
    size          INTEGER NOT NULL,
    root          BLOB    NOT NULL,
    note          TEXT    NOT NULL,
    old           INTEGER NOT NULL,
    recorded_size INTEGER NOT NULL,
    recorded_root BLOB    NOT NULL,
    reason        TEXT    NOT NULL,
    received_at   INTEGER NOT NULL
);
CREATE INDEX forks_origin ON forks (origin);
