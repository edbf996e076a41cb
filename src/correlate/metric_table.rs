//! The metrics a forwarder's correlate stage records.

use metrics::Unit::Count;

use crate::metric::Metric;

pub(crate) const METRICS: &[Metric] = &[
    Metric::counter(
        "eventgate_correlate_held_total",
        Count,
        "Events a forwarder's correlate stage held back, by reason (duplicate, similar, rate_limited); each is counted in an aggregate sent in their place.",
    ),
    Metric::counter(
        "eventgate_correlate_aggregates_total",
        Count,
        "Aggregates (eventgate.events.v1.Correlated) a forwarder's correlate stage sent.",
    ),
    Metric::counter(
        "eventgate_correlate_state_resets_total",
        Count,
        "Times a correlate stage found no saved state as of the position it resumed from and started afresh (what it held back then is not in any aggregate).",
    ),
    Metric::gauge(
        "eventgate_correlate_held_events",
        Count,
        "Events a forwarder's correlate stage holds back that no aggregate has been sent for yet.",
    ),
    Metric::gauge(
        "eventgate_correlate_objects",
        Count,
        "Objects and topics a forwarder's correlate stage tracks (at most correlate.max_objects).",
    ),
];
