//! The metrics the file forwarder records.

use metrics::Unit::{Bytes, Count, Seconds};

use crate::metric::Metric;

pub(crate) const METRICS: &[Metric] = &[
    Metric::counter(
        "eventgate_file_errors_total",
        Count,
        "File forwarder I/O errors, by operation.",
    ),
    Metric::counter(
        "eventgate_file_housekeeping_errors_total",
        Count,
        "Failures compressing or pruning rotated files.",
    ),
    Metric::counter(
        "eventgate_file_raw_payloads_total",
        Count,
        "Events written with an undecodable payload kept as base64.",
    ),
    Metric::counter("eventgate_file_rotations_total", Count, "File rotations."),
    Metric::counter(
        "eventgate_file_duplicates_skipped_total",
        Count,
        "Events of a batch sent again that the file forwarder had already written, skipped.",
    ),
    Metric::counter(
        "eventgate_file_written_bytes_total",
        Bytes,
        "Bytes the file forwarder wrote.",
    ),
    Metric::histogram(
        "eventgate_file_fsync_seconds",
        Seconds,
        "Duration of one file forwarder fsync.",
    ),
    Metric::histogram(
        "eventgate_file_compress_seconds",
        Seconds,
        "Time to gzip one rotated file.",
    ),
];
