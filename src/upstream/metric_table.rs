//! The metrics the upstream tasks record: subscriptions, events taken in, the
//! records enriching them, and reconciles.

use metrics::Unit::{Count, Seconds};

use crate::metric::Metric;

pub(crate) const METRICS: &[Metric] = &[
    Metric::counter(
        "eventgate_upstream_connects_total",
        Count,
        "Subscriptions to an upstream established (first connect and reconnects).",
    ),
    Metric::counter(
        "eventgate_upstream_disconnects_total",
        Count,
        "Subscriptions to an upstream that ended.",
    ),
    Metric::counter(
        "eventgate_upstream_connect_failures_total",
        Count,
        "Failed attempts to subscribe to an upstream.",
    ),
    Metric::counter(
        "eventgate_upstream_socket_wakeups_total",
        Count,
        "Backoff waits cut short because an upstream's unix socket was created again.",
    ),
    Metric::counter(
        "eventgate_reconciles_total",
        Count,
        "Reconciles of an upstream's state with the record, by trigger (connected, interval).",
    ),
    Metric::counter(
        "eventgate_reconcile_events_total",
        Count,
        "Events a reconcile recorded (origin reconciled), by upstream and topic.",
    ),
    Metric::counter(
        "eventgate_upstream_repeats_total",
        Count,
        "Live events recorded with origin repeat: published before a reconcile's lists, they repeat a change it told.",
    ),
    Metric::counter(
        "eventgate_reconcile_failures_total",
        Count,
        "Reconciles that failed, by stage: list (the daemon's state could not be read), save (the snapshot could not be written), or cri / docker (that manager could not be asked; containerd's lists were used alone).",
    ),
    Metric::counter(
        "eventgate_upstream_events_total",
        Count,
        "Events received from an upstream.",
    ),
    Metric::counter(
        "eventgate_upstream_enrich_total",
        Count,
        "Container records looked up for upstream events, by result: remembered, fetched (the daemon's record was read), absent (the daemon had no such container), event (a /containers/update carried it), listed (a reconcile's lists), error (the call failed; the events are recorded without them).",
    ),
    Metric::counter(
        "eventgate_upstream_events_rejected_total",
        Count,
        "Upstream events skipped because the exchange refused them, by reason.",
    ),
    Metric::gauge(
        "eventgate_upstream_connected",
        Count,
        "1 while subscribed to the upstream, else 0.",
    ),
    Metric::gauge(
        "eventgate_upstream_inflight_events",
        Count,
        "Events of the upstream appended to the spool and not yet durable (at most 4096, or 16 MiB of them; at the bound the stream is held).",
    ),
    Metric::histogram(
        "eventgate_reconcile_list_seconds",
        Seconds,
        "Time to list an upstream daemon's namespaces, containers, tasks and images.",
    ),
];
