-- Two more reasons a forwarder gives up on an event: 'panicked' (the forwarder's code
-- panicked on it, alone in its batch) and 'crashed' (the gateway process died twice
-- while the event was being delivered, the second time alone). SQLite cannot change
-- a CHECK constraint in place, so the table is rebuilt with the same rows and ids.
CREATE TABLE dead_letters_new (
    id                 INTEGER PRIMARY KEY,
    forwarder          TEXT    NOT NULL,
    event_id           TEXT    NOT NULL,
    seq                INTEGER NOT NULL,
    source             TEXT    NOT NULL,
    envelope           BLOB    NOT NULL,
    received_at        TEXT    NOT NULL,
    error              TEXT    NOT NULL,
    reason             TEXT    NOT NULL CHECK (reason IN ('permanent', 'retries_exhausted', 'panicked', 'crashed')),
    attempts           INTEGER NOT NULL CHECK (attempts >= 0),
    first_attempt_at   TEXT    NOT NULL,
    last_attempt_at    TEXT    NOT NULL,
    dead_at            TEXT    NOT NULL,
    retry_requested_at TEXT,
    state              TEXT    NOT NULL DEFAULT 'dead' CHECK (state IN ('dead', 'requested', 'queued')),
    UNIQUE (forwarder, event_id)
);
INSERT INTO dead_letters_new SELECT * FROM dead_letters;
DROP TABLE dead_letters;
ALTER TABLE dead_letters_new RENAME TO dead_letters;
CREATE INDEX dead_letters_forwarder_state ON dead_letters (forwarder, state);
