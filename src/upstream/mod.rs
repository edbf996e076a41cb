//! Upstreams: subscriptions to containerd sockets (or other eventgates) whose events
//! enter the exchange like published ones, so they reach subscribers and forwarders.
//!
//! Each upstream is one task that reconnects forever with backoff, cut short when a
//! unix socket upstream's socket is created again (see `watch`). Where its record
//! may be incomplete is written into the record itself: a disconnected marker when a
//! subscription breaks (or the gateway stops) and a connected marker when it is back,
//! both in namespace `eventgate` (see [`crate::markers`]). After every connection, and every
//! `reconcile_interval`, the task compares the daemon's state with what was recorded
//! and records the differences (see `reconciler` and [`crate::reconcile`]).
//!
//! A subscription's events are appended in the stream's order as they arrive and made
//! durable in groups, a bounded number waiting for the disk at once (see `stream` and
//! `inflight`); what depends on durability (the snapshot) follows in the same order.

mod backoff;
mod enrich;
mod inflight;
mod managers;
#[cfg(test)]
pub(crate) use managers::{ManagerReport, Outcome as ManagerOutcome};
pub(crate) mod metric_table;
mod reconciler;
mod repeats;
pub(crate) mod roster;
mod settings;
mod status;
mod stream;
mod task;
mod transport;
mod watch;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::watch as state;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

#[cfg(feature = "bench")]
pub(crate) use reconciler::SETTLE;
pub use settings::{ManagerSetting, UpstreamSpec};
pub(crate) use status::{UpstreamState, UpstreamStatus, UpstreamWatch};

use crate::exchange::Exchange;

/// The running upstream tasks of one gateway.
pub(crate) struct Upstreams {
    statuses: Vec<state::Receiver<UpstreamStatus>>,
    cancel: CancellationToken,
    tasks: JoinSet<()>,
}

impl Upstreams {
    pub(crate) fn none() -> Self {
        Self {
            statuses: Vec::new(),
            cancel: CancellationToken::new(),
            tasks: JoinSet::new(),
        }
    }

    /// Starts one task per spec. Specs are validated by the config beforehand; an
    /// unreachable upstream is not an error here, it is retried in the background.
    pub(crate) fn start(
        specs: &[UpstreamSpec],
        exchange: &Exchange,
        data_dir: &std::path::Path,
        spool: Option<crate::spool::Spool>,
    ) -> Self {
        let mut upstreams = Self::none();
        let started = SystemTime::now();
        for spec in specs {
            let name = spec.effective_name();
            let (status, receiver) = state::channel(UpstreamStatus {
                name: name.clone(),
                address: spec.address.clone(),
                state: UpstreamState::Connecting {
                    since: started,
                    attempts: 0,
                    last_error: None,
                },
                managers: Vec::new(),
            });
            let task = task::Task {
                spec: spec.clone(),
                name: Arc::from(name.as_str()),
                exchange: exchange.clone(),
                status,
                cancel: upstreams.cancel.child_token(),
                started,
                data_dir: data_dir.to_owned(),
                spool: spool.clone(),
            };
            upstreams.tasks.spawn(task.run());
            upstreams.statuses.push(receiver);
        }
        upstreams
    }

    #[cfg(test)]
    pub(crate) fn statuses(&self) -> Vec<UpstreamStatus> {
        self.watch().statuses()
    }

    /// Ready when every upstream is subscribed; otherwise what is not, one line each.
    #[cfg(test)]
    pub(crate) fn readiness(&self) -> Result<(), Vec<String>> {
        self.watch().readiness()
    }

    /// A cheap, clonable view of every upstream's state, for the admin endpoint.
    pub(crate) fn watch(&self) -> UpstreamWatch {
        UpstreamWatch {
            statuses: self.statuses.clone(),
        }
    }

    /// Waits until the named upstream's state satisfies `check`, or `timeout` passes.
    #[cfg(test)]
    pub(crate) async fn wait_for(
        &self,
        name: &str,
        timeout: Duration,
        check: impl Fn(&UpstreamState) -> bool,
    ) -> Option<UpstreamStatus> {
        let mut rx = self
            .statuses
            .iter()
            .find(|rx| rx.borrow().name == name)?
            .clone();
        let waited = tokio::time::timeout(timeout, rx.wait_for(|s| check(&s.state))).await;
        match waited {
            Ok(Ok(status)) => Some(status.clone()),
            _ => None,
        }
    }

    /// Ends every subscription, recording a disconnected marker for each that was up.
    /// Must run before the exchange closes, or the markers have nowhere to go.
    pub(crate) async fn stop(&mut self, timeout: Duration) {
        self.cancel.cancel();
        let join = async { while self.tasks.join_next().await.is_some() {} };
        if tokio::time::timeout(timeout, join).await.is_err() {
            tracing::warn!(?timeout, "upstreams did not stop in time; aborting them");
            self.tasks.abort_all();
        }
    }
}

#[cfg(test)]
mod tests;
