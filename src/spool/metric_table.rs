//! The metrics the spool records: its size, writes, syncs and what it found damaged,
//! missing or dropped.

use metrics::Unit::{Bytes, Count, Seconds};

use crate::metric::Metric;

pub(crate) const METRICS: &[Metric] = &[
    Metric::counter(
        "eventgate_spool_fsyncs_total",
        Count,
        "fdatasync calls on spool segments.",
    ),
    Metric::counter(
        "eventgate_spool_corrupt_records_total",
        Count,
        "Damaged spool records found and moved aside at start.",
    ),
    Metric::counter(
        "eventgate_spool_dropped_records_total",
        Count,
        "Records deleted from a full spool (full = drop_oldest) before this forwarder delivered them.",
    ),
    Metric::counter(
        "eventgate_spool_full_timeouts_total",
        Count,
        "Publishers refused after waiting block_timeout for room in the spool.",
    ),
    Metric::counter(
        "eventgate_spool_read_gaps_total",
        Count,
        "Gaps found while reading the spool back.",
    ),
    Metric::gauge(
        "eventgate_spool_bytes",
        Bytes,
        "Bytes of spool segments on disk.",
    ),
    Metric::gauge("eventgate_spool_segments", Count, "Spool segment files."),
    Metric::histogram(
        "eventgate_spool_fsync_seconds",
        Seconds,
        "Duration of one spool fdatasync.",
    ),
    Metric::histogram(
        "eventgate_spool_group_records",
        Count,
        "Records written to the spool per write (group commit).",
    ),
];
