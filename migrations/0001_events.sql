-- The audit log: one row per accepted envelope.
--
-- row_id is the key (insertion order, which is gateway order). seq is not unique: it
-- restarts at 1 when the gateway restarts. id (the event's UUIDv7) is unique, so a
-- re-delivered batch inserts nothing twice.
--
-- Times are RFC 3339 text in UTC with exactly nine fraction digits
-- ("2024-05-01T10:00:00.123456789Z"): they sort and compare as text, read as is, and
-- SQLite's date functions accept them (unixepoch(timestamp), datetime(timestamp)).
CREATE TABLE events (
    row_id      INTEGER PRIMARY KEY,
    seq         INTEGER NOT NULL,
    id          TEXT    NOT NULL UNIQUE,
    timestamp   TEXT,
    received_at TEXT    NOT NULL,
    namespace   TEXT    NOT NULL,
    topic       TEXT    NOT NULL,
    type_url    TEXT,
    payload     BLOB,
    event       TEXT
);

CREATE INDEX events_timestamp ON events (timestamp);
CREATE INDEX events_topic_timestamp ON events (topic, timestamp);
CREATE INDEX events_namespace_timestamp ON events (namespace, timestamp);
