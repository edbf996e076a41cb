//! The metrics the forwarders' pipeline records: deliveries, retries, drops,
//! panics, checkpoints, dead letters, queues and batches, per forwarder.

use metrics::Unit::{Bytes, Count, Seconds};

use crate::metric::Metric;

pub(crate) const METRICS: &[Metric] = &[
    Metric::counter(
        "eventgate_events_forwarded_total",
        Count,
        "Events a forwarder delivered (acknowledged by its sink).",
    ),
    Metric::counter(
        "eventgate_forwarder_retries_total",
        Count,
        "Failed delivery attempts that were retried, per forwarder.",
    ),
    Metric::counter(
        "eventgate_forwarder_dropped_total",
        Count,
        "Events a forwarder never delivered, by reason (its overflow policy, closed, spool_full, shutdown).",
    ),
    Metric::counter(
        "eventgate_forwarder_failed_total",
        Count,
        "Events a forwarder gave up on after its errors, by reason (permanent, retries_exhausted).",
    ),
    Metric::counter(
        "eventgate_forwarder_panics_total",
        Count,
        "Panics in a forwarder's code while delivering, per forwarder (each narrows the batch towards the event that causes it).",
    ),
    Metric::counter(
        "eventgate_forwarder_split_batches_total",
        Count,
        "Batches a forwarder refused permanently, delivered again in halves to find the events it refuses.",
    ),
    Metric::counter(
        "eventgate_forwarder_restarts_total",
        Count,
        "Forwarder workers restarted after a panic outside a delivery.",
    ),
    Metric::counter(
        "eventgate_forwarder_checkpoint_failures_total",
        Count,
        "Checkpoints that could not make a forwarder's output durable; what they covered is sent again from the spool.",
    ),
    Metric::counter(
        "eventgate_forwarder_poison_events_total",
        Count,
        "Events set aside as dead letters because the forwarder panicked on them (panicked) or the process died on them twice (crashed).",
    ),
    Metric::counter(
        "eventgate_forwarder_spilled_total",
        Count,
        "Events routed to a forwarder whose queue was full, delivered from the spool instead.",
    ),
    Metric::counter(
        "eventgate_forwarder_blocked_timeouts_total",
        Count,
        "Publishers refused after waiting block_timeout for room in a forwarder's queue.",
    ),
    Metric::counter(
        "eventgate_dead_letters_total",
        Count,
        "Events recorded in the dead-letter store, by forwarder and reason.",
    ),
    Metric::counter(
        "eventgate_dead_letter_redelivered_total",
        Count,
        "Dead letters redelivered successfully, per forwarder.",
    ),
    Metric::counter(
        "eventgate_dead_letter_write_failures_total",
        Count,
        "Failed writes to the dead-letter store.",
    ),
    Metric::gauge(
        "eventgate_forwarder_queue_events",
        Count,
        "Events in a forwarder's in-memory queue.",
    ),
    Metric::gauge(
        "eventgate_forwarder_queue_bytes",
        Bytes,
        "Encoded bytes in a forwarder's in-memory queue.",
    ),
    Metric::histogram(
        "eventgate_forwarder_batch_events",
        Count,
        "Events per batch handed to a forwarder.",
    ),
    Metric::histogram(
        "eventgate_forwarder_batch_bytes",
        Bytes,
        "Encoded bytes per batch handed to a forwarder.",
    ),
    Metric::histogram(
        "eventgate_forwarder_delivery_seconds",
        Seconds,
        "From receipt of a batch's oldest event until the sink acknowledged the batch.",
    ),
    Metric::histogram(
        "eventgate_forwarder_checkpoint_seconds",
        Seconds,
        "Duration of one checkpoint: making a forwarder's output durable before its cursor moves.",
    ),
];
