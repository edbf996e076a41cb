//! The metrics the Kafka forwarder records.

use metrics::Unit::Count;

use crate::metric::Metric;

pub(crate) const METRICS: &[Metric] = &[
    Metric::counter(
        "eventgate_kafka_messages_total",
        Count,
        "Kafka messages acknowledged by the broker.",
    ),
    Metric::counter(
        "eventgate_kafka_message_errors_total",
        Count,
        "Kafka messages whose delivery failed.",
    ),
    Metric::counter(
        "eventgate_kafka_producer_restarts_total",
        Count,
        "Kafka producers recreated after a fatal error.",
    ),
    Metric::counter(
        "eventgate_kafka_queue_full_total",
        Count,
        "Times librdkafka's producer queue was full and the forwarder waited.",
    ),
    Metric::counter(
        "eventgate_kafka_topics_created_total",
        Count,
        "Kafka topics created by the forwarder.",
    ),
];
