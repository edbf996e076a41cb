//! `[admin]`: where the admin HTTP endpoint listens, and the readiness rule that
//! needs a setting.

use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The default address: loopback, Prometheus's customary exporter port range.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9464";

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdminSettings {
    /// `HOST:PORT` to serve /metrics, /healthz, /readyz and /status on; `""` turns
    /// the endpoint (and metrics recording) off.
    pub listen: String,
    /// Serve on a non-loopback address. Off by default: /metrics and /status name
    /// forwarders, upstream addresses and error texts, and there is no TLS or auth.
    pub allow_remote: bool,
    /// A forwarder that has been delivering from the spool (behind its live queue)
    /// for longer than this is reported not ready.
    #[serde(with = "crate::config::duration_text")]
    pub max_spill: Duration,
    /// A forwarder whose current batch has been failing (retrying) for longer than
    /// this is reported not ready; shorter blips only show in `?verbose`. `0s`: from
    /// the first failed attempt.
    #[serde(with = "crate::config::duration_text")]
    pub max_failing: Duration,
}

impl Default for AdminSettings {
    fn default() -> Self {
        Self {
            listen: DEFAULT_LISTEN.into(),
            allow_remote: false,
            max_spill: Duration::from_secs(60),
            max_failing: Duration::from_secs(10),
        }
    }
}

impl AdminSettings {
    /// The readiness rules these settings set.
    pub fn readiness(&self) -> super::readiness::Rules {
        super::readiness::Rules {
            max_spill: self.max_spill,
            max_failing: self.max_failing,
        }
    }

    /// The address to listen on, `None` when turned off. Errors name the key.
    pub fn addr(&self) -> Result<Option<SocketAddr>, (&'static str, String)> {
        let text = self.listen.trim();
        if text.is_empty() {
            return Ok(None);
        }
        let addr: SocketAddr = text.parse().map_err(|_| {
            (
                "admin.listen",
                format!(
                    "{text:?} is not an address like \"127.0.0.1:9464\" or \"[::1]:9464\" (\"\" turns the admin endpoint off)"
                ),
            )
        })?;
        if !addr.ip().is_loopback() && !self.allow_remote {
            return Err((
                "admin.listen",
                format!(
                    "{addr} is not a loopback address; /metrics and /status reveal forwarders, upstream addresses and errors, and the endpoint has no TLS or authentication. Set `admin.allow_remote = true` to serve it there anyway"
                ),
            ));
        }
        Ok(Some(addr))
    }

    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        self.addr()?;
        if self.max_spill.is_zero() {
            return Err((
                "admin.max_spill",
                "must be more than 0s (how long a forwarder may deliver from the spool before it counts as not ready)".into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(listen: &str, allow_remote: bool) -> AdminSettings {
        AdminSettings {
            listen: listen.into(),
            allow_remote,
            ..AdminSettings::default()
        }
    }

    #[test]
    fn loopback_by_default_empty_turns_it_off() {
        assert_eq!(
            AdminSettings::default().addr().unwrap(),
            Some(DEFAULT_LISTEN.parse().unwrap())
        );
        assert_eq!(with("", false).addr().unwrap(), None);
        assert!(with("[::1]:0", false).addr().unwrap().is_some());
    }

    #[test]
    fn remote_addresses_need_allow_remote() {
        let (key, problem) = with("0.0.0.0:9464", false).addr().unwrap_err();
        assert_eq!(key, "admin.listen");
        assert!(problem.contains("allow_remote"), "{problem}");
        assert!(with("0.0.0.0:9464", true).addr().unwrap().is_some());
    }

    #[test]
    fn a_bad_address_is_named() {
        let (key, problem) = with("localhost", false).addr().unwrap_err();
        assert_eq!(key, "admin.listen");
        assert!(problem.contains("\"localhost\""), "{problem}");
    }
}
