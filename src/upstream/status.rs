//! Each upstream's connection state, shared with whoever asks whether the gateway is
//! ready (every upstream subscribed) and why not.

use std::fmt;
use std::time::{Duration, SystemTime};

use tokio::sync::watch;

use super::managers::ManagerReport;

/// Every upstream's current state; cheap to clone.
#[derive(Clone, Default)]
pub(crate) struct UpstreamWatch {
    pub(super) statuses: Vec<watch::Receiver<UpstreamStatus>>,
}

impl UpstreamWatch {
    pub(crate) fn statuses(&self) -> Vec<UpstreamStatus> {
        self.statuses.iter().map(|rx| rx.borrow().clone()).collect()
    }

    /// Ready when every upstream is subscribed; otherwise what is not, one line each.
    #[cfg(test)]
    pub(crate) fn readiness(&self) -> Result<(), Vec<String>> {
        let problems: Vec<String> = self
            .statuses()
            .into_iter()
            .filter(|status| !status.is_connected())
            .map(|status| status.to_string())
            .collect();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems)
        }
    }
}

/// Where an upstream's subscription stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum UpstreamState {
    /// Not subscribed since `since`; `attempts` connection attempts failed so far.
    Connecting {
        since: SystemTime,
        attempts: u64,
        last_error: Option<String>,
    },
    /// Subscribed since `since`.
    Connected { since: SystemTime },
    /// The gateway is shutting down.
    Stopped,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct UpstreamStatus {
    pub name: String,
    pub address: String,
    pub state: UpstreamState,
    /// How asking the managers above containerd (the CRI, dockerd) went at the last
    /// reconcile; empty before one, or when none is configured or found.
    pub managers: Vec<ManagerReport>,
}

impl UpstreamStatus {
    pub(crate) fn is_connected(&self) -> bool {
        matches!(self.state, UpstreamState::Connected { .. })
    }
}

/// Reads like "upstream containerd (/run/containerd/containerd.sock): not connected
/// for 12s after 5 attempts; last error: ...".
impl fmt::Display for UpstreamStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "upstream {} ({}): ", self.name, self.address)?;
        let ago = |t: SystemTime| {
            let elapsed = t.elapsed().unwrap_or(Duration::ZERO);
            // Whole milliseconds keep the text readable.
            humantime::format_duration(Duration::from_millis(elapsed.as_millis() as u64))
        };
        match &self.state {
            UpstreamState::Connected { since } => write!(f, "connected for {}", ago(*since)),
            UpstreamState::Connecting {
                since,
                attempts,
                last_error,
            } => {
                write!(
                    f,
                    "not connected for {} after {attempts} attempt(s)",
                    ago(*since)
                )?;
                match last_error {
                    Some(error) => write!(f, "; last error: {error}"),
                    None => Ok(()),
                }
            }
            UpstreamState::Stopped => write!(f, "stopped"),
        }?;
        for manager in &self.managers {
            write!(f, "; {manager}")?;
        }
        Ok(())
    }
}
