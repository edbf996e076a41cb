//! Metric series looked up once per forwarder, when its route and worker are built,
//! instead of on every event or batch: a labelled `counter!` builds its label
//! strings and hashes its key at each call, and the router does that under the
//! exchange lock. Names and labels are those `docs/observability.md` lists.
//!
//! A series still appears on `/metrics` at its first use, as it did when every call
//! looked it up: the handle is registered then, not when it is built (a registered
//! counter is exported as 0 and a registered histogram as empty). Gauges keep only
//! their key and are looked up at each `set`: the recorder drops a gauge not set for
//! a second, and a handle kept past that would write to a series no longer exported.

use std::sync::OnceLock;

use metrics::{Counter, Histogram, Key, Label, Level, Metadata};

use crate::deadletter::Reason;

/// What the recorder is told about where a series comes from (the macros pass the
/// same; the Prometheus recorder ignores it).
static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

fn key(name: &'static str, forwarder: &str, reason: Option<&'static str>) -> Key {
    let mut labels = vec![Label::new("forwarder", forwarder.to_owned())];
    if let Some(reason) = reason {
        labels.push(Label::new("reason", reason));
    }
    Key::from_parts(name, labels)
}

/// A counter registered at its first increment.
pub(crate) struct LazyCounter {
    key: Key,
    handle: OnceLock<Counter>,
}

impl LazyCounter {
    /// `name{forwarder="..."}`.
    pub(crate) fn new(name: &'static str, forwarder: &str) -> Self {
        Self::from_key(key(name, forwarder, None))
    }

    /// `name{forwarder="...",reason="..."}`.
    pub(crate) fn with_reason(name: &'static str, forwarder: &str, reason: &'static str) -> Self {
        Self::from_key(key(name, forwarder, Some(reason)))
    }

    fn from_key(key: Key) -> Self {
        Self {
            key,
            handle: OnceLock::new(),
        }
    }

    pub(crate) fn increment(&self, value: u64) {
        self.handle
            .get_or_init(|| metrics::with_recorder(|r| r.register_counter(&self.key, &METADATA)))
            .increment(value);
    }
}

/// A histogram registered at its first sample.
pub(crate) struct LazyHistogram {
    key: Key,
    handle: OnceLock<Histogram>,
}

impl LazyHistogram {
    /// `name{forwarder="..."}`.
    pub(crate) fn new(name: &'static str, forwarder: &str) -> Self {
        Self {
            key: key(name, forwarder, None),
            handle: OnceLock::new(),
        }
    }

    pub(crate) fn record(&self, value: f64) {
        self.handle
            .get_or_init(|| metrics::with_recorder(|r| r.register_histogram(&self.key, &METADATA)))
            .record(value);
    }
}

/// A gauge's key, built once; the gauge itself is looked up at each `set` (see the
/// top of this file).
pub(crate) struct GaugeKey(Key);

impl GaugeKey {
    /// `name{forwarder="..."}`.
    pub(crate) fn new(name: &'static str, forwarder: &str) -> Self {
        Self(key(name, forwarder, None))
    }

    pub(crate) fn set(&self, value: f64) {
        metrics::with_recorder(|r| r.register_gauge(&self.0, &METADATA)).set(value);
    }
}

/// One counter per dead-letter reason, labelled `reason`.
pub(crate) struct ByReason([LazyCounter; 4]);

impl ByReason {
    pub(crate) fn new(name: &'static str, forwarder: &str) -> Self {
        let counter = |reason: Reason| LazyCounter::with_reason(name, forwarder, reason.as_str());
        Self([
            counter(Reason::Permanent),
            counter(Reason::RetriesExhausted),
            counter(Reason::Panicked),
            counter(Reason::Crashed),
        ])
    }

    pub(crate) fn get(&self, reason: Reason) -> &LazyCounter {
        let index = match reason {
            Reason::Permanent => 0,
            Reason::RetriesExhausted => 1,
            Reason::Panicked => 2,
            Reason::Crashed => 3,
        };
        &self.0[index]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reason_gets_its_own_series() {
        let by_reason = ByReason::new("eventgate_test_total", "log");
        for reason in [
            Reason::Permanent,
            Reason::RetriesExhausted,
            Reason::Panicked,
            Reason::Crashed,
        ] {
            let labels: Vec<_> = by_reason.get(reason).key.labels().cloned().collect();
            assert_eq!(
                labels,
                [
                    Label::new("forwarder", "log"),
                    Label::new("reason", reason.as_str())
                ]
            );
        }
    }
}
