//! The metrics the PostgreSQL forwarder records.

use metrics::Unit::{Count, Seconds};

use crate::metric::Metric;

pub(crate) const METRICS: &[Metric] = &[
    Metric::counter(
        "eventgate_postgres_rows_total",
        Count,
        "Rows the PostgreSQL forwarder handled, by outcome (inserted; duplicate: stored before; fenced: read from a Kafka partition another gateway has claimed since, left to it).",
    ),
    Metric::counter(
        "eventgate_postgres_batches_total",
        Count,
        "PostgreSQL forwarder batches committed with rows, by path (direct: one COPY into events; staged: a batch holding, or following one that held, events stored before, written through the staging table with ON CONFLICT DO NOTHING).",
    ),
    Metric::counter(
        "eventgate_postgres_errors_total",
        Count,
        "PostgreSQL forwarder batches that failed and were rolled back, by class (retryable, permanent).",
    ),
    Metric::counter(
        "eventgate_postgres_pruned_rows_total",
        Count,
        "Rows in the partitions the PostgreSQL forwarder's retention dropped.",
    ),
    Metric::counter(
        "eventgate_postgres_pruned_partitions_total",
        Count,
        "Partitions the PostgreSQL forwarder's retention dropped.",
    ),
    Metric::counter(
        "eventgate_postgres_prune_errors_total",
        Count,
        "Retention rounds of the PostgreSQL forwarder that failed (tried again at the next interval).",
    ),
    Metric::histogram(
        "eventgate_postgres_transaction_seconds",
        Seconds,
        "Duration of one PostgreSQL forwarder transaction (one batch), connecting included.",
    ),
];
