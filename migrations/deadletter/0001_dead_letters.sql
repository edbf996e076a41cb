-- The dead-letter store: events a forwarder gave up on, one row per (forwarder, event).
--
-- An event that dies again for the same forwarder updates its row (attempts add up,
-- last_attempt_at and dead_at move), so the UNIQUE pair below is the identity.
-- envelope holds the containerd Envelope exactly as accepted (protobuf bytes), so a
-- redelivery sends what the forwarder would have received the first time.
--
-- state: 'dead' (waiting for an operator), 'requested' (`eventgate dlq retry` asked
-- for redelivery), 'queued' (a gateway is redelivering it; back to 'requested' at the
-- next start if that gateway stopped before finishing).
--
-- Times are RFC 3339 text in UTC with nine fraction digits, as in the audit store.
CREATE TABLE dead_letters (
    id                 INTEGER PRIMARY KEY,
    forwarder          TEXT    NOT NULL,
    event_id           TEXT    NOT NULL,
    seq                INTEGER NOT NULL,
    source             TEXT    NOT NULL,
    envelope           BLOB    NOT NULL,
    received_at        TEXT    NOT NULL,
    error              TEXT    NOT NULL,
    reason             TEXT    NOT NULL CHECK (reason IN ('permanent', 'retries_exhausted')),
    attempts           INTEGER NOT NULL CHECK (attempts >= 0),
    first_attempt_at   TEXT    NOT NULL,
    last_attempt_at    TEXT    NOT NULL,
    dead_at            TEXT    NOT NULL,
    retry_requested_at TEXT,
    state              TEXT    NOT NULL DEFAULT 'dead' CHECK (state IN ('dead', 'requested', 'queued')),
    UNIQUE (forwarder, event_id)
);

-- A worker looks for its forwarder's requested entries every poll interval.
CREATE INDEX dead_letters_forwarder_state ON dead_letters (forwarder, state);
