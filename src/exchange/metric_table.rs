//! The metrics the exchange records: what it takes in, refuses and fans out, and the
//! subscribers it cuts off.

use metrics::Unit::{Count, Seconds};

use crate::metric::Metric;

pub(crate) const METRICS: &[Metric] = &[
    Metric::counter(
        "eventgate_events_received_total",
        Count,
        "Events taken into the gateway's order (sequenced, spooled, routed), by source.",
    ),
    Metric::counter(
        "eventgate_events_accepted_total",
        Count,
        "Events acknowledged to their publisher (durable in the spool), by source.",
    ),
    Metric::counter(
        "eventgate_events_rejected_total",
        Count,
        "Publish/Forward calls and upstream events refused, by reason.",
    ),
    Metric::counter(
        "eventgate_subscribers_cut_off_total",
        Count,
        "Subscribers cut off with RESOURCE_EXHAUSTED for falling too far behind.",
    ),
    Metric::counter(
        "eventgate_subscribers_filter_cut_off_total",
        Count,
        "Subscribers cut off with RESOURCE_EXHAUSTED because their filters could not keep up with the events.",
    ),
    Metric::counter(
        "eventgate_subscribe_rejected_total",
        Count,
        "Subscribe calls refused, by reason.",
    ),
    Metric::counter(
        "eventgate_limit_rejections_total",
        Count,
        "Calls refused by an exchange.limits setting, by limit.",
    ),
    Metric::gauge("eventgate_subscribers", Count, "Subscribers connected."),
    Metric::histogram(
        "eventgate_filter_matching_rest_seconds",
        Seconds,
        "One rest of the filter matching thread, held to exchange.limits.filter_cpu_percent.",
    ),
];
