//! The metrics the `[[source]]` consumers record.

use metrics::Unit::Count;

use crate::metric::Metric;

pub(crate) const METRICS: &[Metric] = &[
    Metric::counter(
        "eventgate_source_events_total",
        Count,
        "Events a [[source]] appended to the exchange (their offsets are stored for commit once they are durable).",
    ),
    Metric::counter(
        "eventgate_source_skipped_total",
        Count,
        "Kafka messages a [[source]] could not take in and skipped after logging where they are, by reason (protobuf, json, field, header, payload: not an event; or the exchange's refusal: invalid_namespace, invalid_topic, invalid_timestamp; or too_large for the spool).",
    ),
    Metric::counter(
        "eventgate_source_restarts_total",
        Count,
        "Times a [[source]]'s consumer ended while the gateway ran (a panic, a failed write) and was started again.",
    ),
    Metric::counter(
        "eventgate_source_errors_total",
        Count,
        "Errors the Kafka consumer of a [[source]] reported (brokers unreachable, offset commits that failed); librdkafka retries them.",
    ),
    Metric::gauge(
        "eventgate_source_assigned_partitions",
        Count,
        "Partitions a [[source]]'s consumer holds in its group, as its last assignment or revocation left them.",
    ),
    Metric::gauge(
        "eventgate_source_starved",
        Count,
        "1 while a [[source]] is starved: it has held no partition for longer than its group's session timeout while its group's messages wait unread with the committed offsets standing still (it is then not ready); else 0.",
    ),
    Metric::gauge(
        "eventgate_source_inflight_events",
        Count,
        "Events a [[source]] appended and that are not yet durable, with their offsets not yet stored for commit (at most 4096).",
    ),
];
