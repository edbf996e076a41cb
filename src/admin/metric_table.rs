//! The metrics the admin endpoint records: refused reloads, and the gauges
//! `metrics::refresh` computes at each scrape from what the other modules keep.

use metrics::Unit::{Bytes, Count, Seconds};

use crate::metric::Metric;

pub(crate) const METRICS: &[Metric] = &[
    Metric::counter(
        "eventgate_ui_live_dropped_total",
        Count,
        "Live /ui pages (/ui/api/live streams) disconnected because they did not keep up: 256 messages were waiting to be sent to the page, or its exchange subscription was cut off.",
    ),
    Metric::counter(
        "eventgate_reload_refused_total",
        Count,
        "POST /reload requests refused, by reason: disabled (no admin.reload_token_file) or unauthorized (missing or wrong token).",
    ),
    Metric::gauge(
        "eventgate_ready",
        Count,
        "1 when /readyz answers 200 (every upstream connected, every forwarder able to deliver, the spool below its high-water mark, free disk space above spool.min_free, no spool write failure), else 0.",
    ),
    Metric::gauge(
        "eventgate_resumers",
        Count,
        "Resumed subscriptions open (reading history or live).",
    ),
    Metric::gauge(
        "eventgate_subscribers_unmatched_events",
        Count,
        "Events waiting to be matched against subscribers' filters, summed over subscribers.",
    ),
    Metric::gauge(
        "eventgate_forwarder_backlog_events",
        Count,
        "Events in the spool at or after a forwarder's cursor (not yet finished by it).",
    ),
    Metric::gauge(
        "eventgate_forwarder_oldest_unacked_age_seconds",
        Seconds,
        "Age of the oldest event a forwarder has not finished with (0 when caught up).",
    ),
    Metric::gauge(
        "eventgate_forwarder_ready",
        Count,
        "1 when the forwarder counts as able to deliver (see /readyz), else 0.",
    ),
    Metric::gauge(
        "eventgate_spool_max_bytes",
        Bytes,
        "The spool's limit (spool.max_bytes).",
    ),
    Metric::gauge(
        "eventgate_spool_disk_free_bytes",
        Bytes,
        "Free space on the spool's file system (for unprivileged writers), as last looked at (after writes at most every 10 ms, at least every 250 ms).",
    ),
    Metric::gauge(
        "eventgate_spool_disk_min_free_bytes",
        Bytes,
        "The reserve kept free on the spool's file system (spool.min_free, in bytes).",
    ),
    Metric::gauge(
        "eventgate_spool_disk_reserve_reached",
        Count,
        "1 while free space is below spool.min_free and events are refused (until it is back above the reserve plus a tenth), else 0.",
    ),
];
