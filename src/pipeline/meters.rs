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

    #[cfg(test)]
    pub(crate) fn key(&self) -> &Key {
        &self.key
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
