//! `correlate = { ... }` in a `[[forwarder]]` table: the stage that spares a
//! notification sink the repeats of an event storm. Absent: off (every event goes
//! through). Kubernetes' event correlator's parameters are the defaults.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// `correlate = { aggregate_after = 10, window = "10m", duplicate_window = "10m",
/// burst = 25, refill = "5m", flush = "1m", max_objects = 4096 }`
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct CorrelateSettings {
    /// Similar events (same namespace, object and topic) sent before the rest of
    /// the window's are aggregated (Kubernetes: 10).
    pub aggregate_after: u32,
    /// A key's window lasts while its events come less than this far apart
    /// (Kubernetes: 10 minutes).
    #[serde(with = "crate::units::duration_text")]
    pub window: Duration,
    /// An event identical to the last one sent for its key (same type and payload
    /// bytes) within this long is held back as a duplicate; 0s turns it off.
    #[serde(with = "crate::units::duration_text")]
    pub duplicate_window: Duration,
    /// Events of one object (any topic) sent at most in a burst (Kubernetes: 25)...
    pub burst: u32,
    /// ...then one more per this long (Kubernetes: one per 5 minutes).
    #[serde(with = "crate::units::duration_text")]
    pub refill: Duration,
    /// How long after the first event it holds back an aggregate is sent: at most
    /// one per object and topic per this long.
    #[serde(with = "crate::units::duration_text")]
    pub flush: Duration,
    /// Objects and topics tracked at once; the least recently seen is forgotten
    /// beyond (its aggregate sent first) (Kubernetes: 4096).
    pub max_objects: usize,
}

impl Default for CorrelateSettings {
    fn default() -> Self {
        Self {
            aggregate_after: 10,
            window: Duration::from_secs(600),
            duplicate_window: Duration::from_secs(600),
            burst: 25,
            refill: Duration::from_secs(300),
            flush: Duration::from_secs(60),
            max_objects: 4096,
        }
    }
}

impl CorrelateSettings {
    pub(crate) fn validate(&self) -> Result<(), String> {
        let bad = |key: &str, problem: &str| Err(format!("`correlate.{key}` {problem}"));
        if self.window.is_zero() {
            return bad("window", "must be more than 0s");
        }
        if self.burst == 0 {
            return bad(
                "burst",
                "must be at least 1 (every event would be held back)",
            );
        }
        if self.refill.is_zero() {
            return bad("refill", "must be more than 0s");
        }
        if self.flush.is_zero() {
            return bad("flush", "must be more than 0s");
        }
        if self.max_objects == 0 {
            return bad("max_objects", "must be at least 1");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    fn config(correlate: &str) -> Result<Config, String> {
        Config::parse(
            &format!(
                "[[forwarder]]\nname = \"alerts\"\nkind = \"file\"\npath = \"a.jsonl\"\ncorrelate = {correlate}\n"
            ),
            "(test)",
        )
        .map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_are_kubernetes_and_bad_values_are_named() {
        let parsed = config("{}").unwrap();
        let settings = parsed.forwarders[0].correlate.clone().unwrap();
        assert_eq!(settings, super::CorrelateSettings::default());
        assert_eq!((settings.aggregate_after, settings.burst), (10, 25));
        assert_eq!(settings.refill.as_secs(), 300);
        assert!(config("{ flush = \"5s\", max_objects = 10 }").is_ok());
        for (bad, named) in [
            ("{ burst = 0 }", "`correlate.burst`"),
            ("{ window = \"0s\" }", "`correlate.window`"),
            ("{ refill = \"0s\" }", "`correlate.refill`"),
            ("{ flush = \"0s\" }", "`correlate.flush`"),
            ("{ max_objects = 0 }", "`correlate.max_objects`"),
            ("{ bursts = 3 }", "bursts"),
            ("{ window = \"soon\" }", "correlate"),
        ] {
            let error = config(bad).unwrap_err();
            assert!(
                error.contains(named) && error.contains("alerts"),
                "{bad}: {error}"
            );
        }
        let without = Config::parse(
            "[[forwarder]]\nname = \"log\"\nkind = \"file\"\npath = \"a.jsonl\"\n",
            "(test)",
        )
        .unwrap();
        assert!(without.forwarders[0].correlate.is_none(), "off by default");
    }
}
