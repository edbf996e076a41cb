//! The metrics the SQLite forwarder records.

use metrics::Unit::{Count, Seconds};

use crate::metric::Metric;

pub(crate) const METRICS: &[Metric] = &[
    Metric::counter(
        "eventgate_sqlite_rows_total",
        Count,
        "Rows the SQLite forwarder handled, by outcome (inserted, duplicate).",
    ),
    Metric::counter(
        "eventgate_sqlite_errors_total",
        Count,
        "SQLite forwarder errors, by class.",
    ),
    Metric::counter(
        "eventgate_sqlite_pruned_rows_total",
        Count,
        "Rows the SQLite forwarder's retention deleted.",
    ),
    Metric::counter(
        "eventgate_sqlite_prune_errors_total",
        Count,
        "Retention rounds of the SQLite forwarder that failed (tried again at the next interval).",
    ),
    Metric::histogram(
        "eventgate_sqlite_transaction_seconds",
        Seconds,
        "Duration of one SQLite forwarder transaction (one batch).",
    ),
];
