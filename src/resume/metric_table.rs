//! The metrics the resumers record (`metrics.rs` looks their counters up).

use metrics::Unit::Count;

use crate::metric::Metric;

pub(crate) const METRICS: &[Metric] = &[
    Metric::counter(
        "eventgate_resume_replayed_total",
        Count,
        "Stored events sent to resumed subscriptions (eventgate.services.events.v1 Subscribe), by where they were read: spool or store.",
    ),
    Metric::counter(
        "eventgate_resume_switched_total",
        Count,
        "Resumed subscriptions that caught up and joined the live stream at their boundary seq.",
    ),
    Metric::counter(
        "eventgate_resume_cut_off_total",
        Count,
        "Resumed subscriptions cut off with RESOURCE_EXHAUSTED (live events overflowed exchange.subscriber_queue while they caught up or read); the status names the seq to resume after.",
    ),
    Metric::counter(
        "eventgate_resume_refused_total",
        Count,
        "Resumed subscriptions refused at their start, by reason: out_of_range (older than anything kept), future_position (a seq not given out yet), invalid_argument.",
    ),
    Metric::counter(
        "eventgate_resume_missing_total",
        Count,
        "Seqs a resumed subscription passed that neither the spool nor the audit store held (dropped under spool.full = \"drop_oldest\", or dead-lettered by the sqlite forwarder).",
    ),
];
