-- A PostgreSQL audit store: one row per event, written by one or more gateways'
-- `postgres` forwarders (a fleet's central gateways), read by `query`, `stats`,
-- `timeline` and `/ui`.
--
-- The columns carry the same values as the SQLite audit store's `events` table
-- (migrations/README.md), typed for PostgreSQL, plus `received` (the partition key),
-- `time` (the envelope timestamp as a timestamptz, for range scans) and
-- `written_by` (which gateway wrote the row).
--
-- Partitioned by `received`: when the event's own gateway accepted it, by that
-- gateway's clock, never by a timestamp a client chose. One partition per day
-- (or per month, `partition = "month"`), made by the writer before the rows that
-- need it; retention drops whole partitions.
--
-- The key is (id, received): the event id is unique (a UUIDv7, or a v8 derived
-- from what made it), and its received time is part of the event, so a batch
-- written again, or an event read again from Kafka, adds nothing.

CREATE TABLE events (
    row_id            bigserial   NOT NULL,
    received          timestamptz NOT NULL,
    id                uuid        NOT NULL,
    seq               bigint      NOT NULL,
    timestamp         text,
    time              timestamptz,
    received_at       text        NOT NULL,
    namespace         text        NOT NULL,
    topic             text        NOT NULL,
    type_url          text,
    payload           bytea,
    event             jsonb,
    source            text,
    publisher_uid     bigint,
    publisher_gid     bigint,
    publisher_pid     bigint,
    publisher_subject text,
    origin            text        NOT NULL,
    origin_clock      text,
    pod_name          text,
    pod_namespace     text,
    pod_uid           text,
    container_name    text,
    container_kind    text,
    image             text,
    labels            jsonb,
    node              text,
    node_seq          bigint,
    reconciled_from   text,
    reason            text,
    written_by        text        NOT NULL,
    PRIMARY KEY (id, received)
) PARTITION BY RANGE (received);

-- Reading in write order (query's default order, `events --since`).
CREATE INDEX events_row_id ON events (row_id);
-- Time ranges (`--since`/`--until`, stats, the UI's histogram).
CREATE INDEX events_time ON events (time);
-- The pod timeline: one pod's events in time order.
CREATE INDEX events_pod ON events (pod_namespace, pod_name, time) WHERE pod_name IS NOT NULL;
-- One topic or namespace over time (the most common filters).
CREATE INDEX events_topic_time ON events (topic, time);
CREATE INDEX events_namespace_time ON events (namespace, time);
-- One node's events in its own order (audit of the central copy, gaps by node).
CREATE INDEX events_node ON events (node, node_seq) WHERE node IS NOT NULL;

-- Where each Kafka partition's events are stored up to, written in the same
-- transaction as the rows (the transactional consumer): a gateway that is assigned
-- a partition claims it (epoch + 1) and starts reading at next_offset; a batch
-- commits only if its events were read under the partition's current epoch, so a
-- gateway that lost the partition (a rebalance, a pause, a zombie) writes nothing.
CREATE TABLE kafka_offsets (
    consumer_group text        NOT NULL,
    topic          text        NOT NULL,
    partition      integer     NOT NULL,
    -- The first offset not stored yet; NULL until a batch of the partition is.
    next_offset    bigint,
    epoch          bigint      NOT NULL,
    owner          text        NOT NULL,
    claimed_at     timestamptz NOT NULL,
    updated_at     timestamptz,
    PRIMARY KEY (consumer_group, topic, partition)
);
