//! The forwarding pipeline: every accepted event is offered to each forwarder's
//! route filter; a match goes into that forwarder's bounded queue, and the
//! forwarder's own worker batches it and delivers it through a retry stack.
//!
//! ```text
//! exchange ── Router::route (under the exchange lock, never waits)
//!               ├─ filter ─► Queue ─► worker: batch ─► Retry ─► Timeout ─► Forwarder::send
//!               └─ filter ─► Queue ─► worker: ...
//! ```
//!
//! Isolation: each forwarder has its own queue, worker and retry state, so a slow or
//! failing forwarder only fills its own queue. What happens when that queue is full
//! is the forwarder's `overflow` policy; only `block` pushes back on publishers.
//!
//! Order: the router pushes in sequence order, a worker delivers one batch at a time
//! and retries a failed batch before taking the next, so each forwarder receives
//! events in gateway order.
//!
//! Acknowledgement: after a batch is delivered, or given up on and recorded in the
//! dead-letter store ([`deadletter`]), the worker publishes the highest sequence
//! number it is done with ([`ForwarderHandle::acked`]); the durable spool keeps its
//! per-forwarder cursors from this.

mod attempts;
pub mod backlog;
pub mod deadletter;
pub mod health;
pub mod queue;
pub mod retry;
mod route;
pub mod settings;
mod worker;

use std::sync::Arc;
use std::time::Duration;

use prost::Message;
use thiserror::Error;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::config::ForwarderSpec;
use crate::event::Event;
use crate::filter::Filter;
use crate::forward::{BuildError, Context, Forwarder, Kinds};
pub use backlog::{Backlog, MemoryBacklog};
pub use deadletter::DeadLetters;
pub use health::{Failing, Health, HealthSnapshot};
use queue::{Pushed, Queue};
use route::RouteState;
pub use worker::Report;

#[derive(Debug, Error)]
pub enum PipelineError {
    #[error("forwarder {name:?}")]
    Build {
        name: String,
        #[source]
        source: BuildError,
    },
    #[error("forwarder {name:?}: invalid filters")]
    Filter {
        name: String,
        #[source]
        source: crate::filter::ParseError,
    },
}

/// A publisher waited `block_timeout` for room in a `block` queue.
#[derive(Debug, Error)]
#[error(
    "forwarder {forwarder:?} is not keeping up: its queue is full ({events} events / {bytes}) and stayed full for {waited:?}; the event was not accepted, retry later"
)]
pub struct QueueFull {
    pub forwarder: String,
    pub events: usize,
    pub bytes: settings::ByteSize,
    pub waited: Duration,
}

/// One forwarder's place in the router.
struct Route {
    name: Arc<str>,
    filter: Filter,
    queue: Arc<Queue>,
    state: Arc<RouteState>,
    drops: worker::DropLog,
    health: Arc<Health>,
}

/// Hands accepted events to the forwarders' queues. Cheap to clone.
#[derive(Clone, Default)]
pub struct Router {
    routes: Arc<[Route]>,
}

impl Router {
    /// Waits until every `block` queue this event is routed to has room. Called
    /// before the event takes its place in the order, outside any lock.
    pub async fn admit(&self, event: &Event) -> Result<(), QueueFull> {
        for route in self.routes.iter() {
            let settings = route.queue.settings();
            if !route.queue.blocks() || !route.filter.matches(event) {
                continue;
            }
            let deadline = Instant::now() + settings.block_timeout;
            if !route.queue.wait_for_room(deadline).await {
                metrics::counter!("eventgate_forwarder_blocked_timeouts_total", "forwarder" => route.name.to_string())
                    .increment(1);
                return Err(QueueFull {
                    forwarder: route.name.to_string(),
                    events: settings.events,
                    bytes: settings.bytes,
                    waited: settings.block_timeout,
                });
            }
        }
        Ok(())
    }

    /// Offers an event to every forwarder. Never waits: runs under the exchange lock
    /// so that every queue receives events in sequence order.
    pub fn route(&self, event: &Arc<Event>) {
        if self.routes.is_empty() {
            return;
        }
        let size = event.envelope.encoded_len();
        for route in self.routes.iter() {
            let matches = route.filter.matches(&**event);
            match route.state.route(event, matches, &route.queue, size) {
                Pushed::Queued => {}
                Pushed::Spilled => {
                    route.health.spilling();
                    metrics::counter!("eventgate_forwarder_spilled_total", "forwarder" => route.name.to_string())
                        .increment(1);
                }
                Pushed::Dropped(n) => {
                    let policy = route.queue.settings().overflow.label();
                    metrics::counter!("eventgate_forwarder_dropped_total", "forwarder" => route.name.to_string(), "reason" => policy)
                        .increment(n as u64);
                    route.health.dropped(n as u64);
                    route.drops.record(&route.name, policy, n, event.seq);
                }
                Pushed::Closed => {
                    route.health.dropped(1);
                    metrics::counter!("eventgate_forwarder_dropped_total", "forwarder" => route.name.to_string(), "reason" => "closed")
                        .increment(1);
                }
            }
        }
    }
}

/// A running forwarder, as seen from outside. Cheap to clone.
#[derive(Clone)]
pub struct ForwarderHandle {
    pub name: Arc<str>,
    queue: Arc<Queue>,
    acked: watch::Receiver<u64>,
    health: Arc<Health>,
}

impl ForwarderHandle {
    /// The highest sequence number this forwarder has delivered (0: none yet).
    pub fn acked(&self) -> u64 {
        *self.acked.borrow()
    }

    /// Waits until the forwarder has delivered everything up to `seq`.
    pub async fn wait_acked(&self, seq: u64) {
        let mut acked = self.acked.clone();
        let _ = acked.wait_for(|acked| *acked >= seq).await;
    }

    /// (events, bytes) waiting in the queue.
    pub fn depth(&self) -> (usize, usize) {
        self.queue.depth()
    }

    /// The queue's limits (events, bytes).
    pub fn capacity(&self) -> (usize, u64) {
        let settings = self.queue.settings();
        (settings.events, settings.bytes.get() as u64)
    }

    /// Whether it is failing, spilling or stopped, and its running totals.
    pub fn health(&self) -> HealthSnapshot {
        self.health.snapshot(self.queue.front_received_at())
    }
}

/// All forwarders with their workers.
pub struct Pipeline {
    router: Router,
    handles: Vec<ForwarderHandle>,
    workers: JoinSet<Report>,
    closing: tokio_util::sync::CancellationToken,
    stop: tokio_util::sync::CancellationToken,
}

/// The durable record the forwarders fall back on, and the first sequence number
/// this process will route (events before it are read from the backlog).
#[derive(Clone)]
pub struct BacklogStart {
    pub backlog: Arc<dyn Backlog>,
    pub start_seq: u64,
}

impl Pipeline {
    /// A pipeline with no forwarders (the exchange alone).
    pub fn empty() -> Self {
        Self {
            router: Router::default(),
            handles: Vec::new(),
            workers: JoinSet::new(),
            closing: tokio_util::sync::CancellationToken::new(),
            stop: tokio_util::sync::CancellationToken::new(),
        }
    }

    /// Builds every configured forwarder (in order; the first failure stops the
    /// start) and starts its worker. Batches given up on go to `dead_letters`, whose
    /// requested entries the workers redeliver; without it they are only logged.
    pub async fn start(
        specs: &[ForwarderSpec],
        kinds: &Kinds,
        data_dir: &std::path::Path,
        dead_letters: Option<DeadLetters>,
        backlog: Option<BacklogStart>,
    ) -> Result<Self, PipelineError> {
        let mut built = Vec::with_capacity(specs.len());
        for spec in specs {
            let build_error = |source| PipelineError::Build {
                name: spec.name.clone(),
                source,
            };
            let kind = kinds.get(&spec.kind).map_err(build_error)?;
            kind.check(&spec.options).map_err(build_error)?;
            let context = Context {
                name: spec.name.clone(),
                data_dir: data_dir.to_path_buf(),
            };
            let forwarder = kind
                .build(&context, &spec.options)
                .await
                .map_err(build_error)?;
            let filter = spec.filter().map_err(|source| PipelineError::Filter {
                name: spec.name.clone(),
                source,
            })?;
            let mut batch = spec.batch.clone();
            if batch.events == 0 {
                batch.events = kind.default_batch_events();
            }
            built.push((spec, filter, forwarder, batch));
        }
        let parts = built
            .into_iter()
            .map(|(spec, filter, forwarder, batch)| Parts {
                name: spec.name.clone(),
                filter,
                forwarder,
                queue: spec.queue.clone(),
                batch,
                retry: spec.retry.clone(),
                dead_letters: dead_letters.clone(),
            });
        Ok(Self::from_forwarders_with(parts, backlog))
    }

    /// Starts workers for already-built forwarders, with no backlog.
    pub fn from_forwarders(parts: impl IntoIterator<Item = Parts>) -> Self {
        Self::from_forwarders_with(parts, None)
    }

    /// Starts workers for already-built forwarders. With a backlog, each forwarder
    /// first reads what it had not processed before `start_seq` (from its cursor),
    /// and `spill` queues fall back on it when full.
    pub fn from_forwarders_with(
        parts: impl IntoIterator<Item = Parts>,
        backlog: Option<BacklogStart>,
    ) -> Self {
        let closing = tokio_util::sync::CancellationToken::new();
        let stop = tokio_util::sync::CancellationToken::new();
        let mut routes = Vec::new();
        let mut handles = Vec::new();
        let mut workers = JoinSet::new();
        for part in parts {
            let name: Arc<str> = part.name.into();
            let queue = Arc::new(Queue::with_backlog(part.queue, backlog.is_some()));
            let state = Arc::new(match &backlog {
                Some(b) => RouteState::new(b.start_seq, Some(b.backlog.cursor(&name))),
                None => RouteState::new(1, None),
            });
            let (acked_tx, acked_rx) = watch::channel(0);
            let health = Arc::new(Health::default());
            if state.spilled_from().is_some() {
                // A backlog left by the previous run is read from the spool first.
                health.spilling();
            }
            // Series that exist from the start, so rates over them work at once.
            metrics::counter!("eventgate_events_forwarded_total", "forwarder" => name.to_string())
                .increment(0);
            metrics::counter!("eventgate_forwarder_retries_total", "forwarder" => name.to_string())
                .increment(0);
            let dead_letters =
                deadletter::Hook::new(Arc::clone(&name), part.dead_letters, part.batch.events);
            workers.spawn(
                worker::Worker {
                    name: Arc::clone(&name),
                    queue: Arc::clone(&queue),
                    state: Arc::clone(&state),
                    filter: part.filter.clone(),
                    backlog: backlog.as_ref().map(|b| Arc::clone(&b.backlog)),
                    stack: retry::stack_reporting(
                        Arc::clone(&part.forwarder),
                        &name,
                        &part.retry,
                        Arc::clone(&health),
                    ),
                    forwarder: part.forwarder,
                    batch: part.batch,
                    acked: acked_tx,
                    closing: closing.clone(),
                    stop: stop.clone(),
                    dead_letters,
                    health: Arc::clone(&health),
                }
                .run(),
            );
            routes.push(Route {
                name: Arc::clone(&name),
                filter: part.filter,
                queue: Arc::clone(&queue),
                state,
                drops: worker::DropLog::default(),
                health: Arc::clone(&health),
            });
            handles.push(ForwarderHandle {
                name,
                queue,
                acked: acked_rx,
                health,
            });
        }
        Self {
            router: Router {
                routes: routes.into(),
            },
            handles,
            workers,
            closing,
            stop,
        }
    }

    pub fn router(&self) -> Router {
        self.router.clone()
    }

    pub fn forwarders(&self) -> &[ForwarderHandle] {
        &self.handles
    }

    pub fn forwarder(&self, name: &str) -> Option<&ForwarderHandle> {
        self.handles.iter().find(|h| &*h.name == name)
    }

    /// Closes every queue and lets the workers deliver what is queued, for at most
    /// `deadline`; then abandons the rest. Returns one report per forwarder saying
    /// what was delivered and what was not.
    pub async fn shutdown(mut self, deadline: Duration) -> Vec<Report> {
        self.closing.cancel();
        for route in self.router.routes.iter() {
            route.queue.close();
        }
        let stop = self.stop.clone();
        let timer = tokio::spawn(async move {
            tokio::time::sleep(deadline).await;
            stop.cancel();
        });
        let mut reports = Vec::new();
        while let Some(result) = self.workers.join_next().await {
            match result {
                Ok(report) => reports.push(report),
                Err(error) => tracing::error!(%error, "a forwarder worker died"),
            }
        }
        timer.abort();
        reports.sort_by(|a, b| a.forwarder.cmp(&b.forwarder));
        reports
    }
}

/// What [`Pipeline::from_forwarders`] needs for one forwarder.
pub struct Parts {
    pub name: String,
    pub filter: Filter,
    pub forwarder: Arc<dyn Forwarder>,
    pub queue: settings::QueueSettings,
    pub batch: settings::BatchSettings,
    pub retry: settings::RetrySettings,
    /// Where batches given up on are recorded; `None`: only logged.
    pub dead_letters: Option<DeadLetters>,
}

#[cfg(test)]
mod backlog_tests;
#[cfg(test)]
mod deadletter_tests;
#[cfg(test)]
mod tests;
