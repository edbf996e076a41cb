//! The forwarding pipeline: every accepted event is offered to each forwarder's
//! route filter; a match goes into that forwarder's bounded queue, and the
//! forwarder's own worker batches it and delivers it through a retry stack.
//!
//! ```text
//! exchange ── Router::route (under the exchange lock, never waits)
//!               ├─ filter ─► Queue ─► worker: intake (batch) ─► delivery (Retry ─►
//!               │                       Timeout ─► Forwarder::send) ─► cursor
//!               └─ filter ─► Queue ─► worker: ...
//! ```
//!
//! A worker (`worker`) is a loop over three parts, each owning its state: `intake`
//! (the queue, or the backlog while spilled, made into batches), `delivery`
//! (isolation, the retry stack, dead letters) and `cursor` (acknowledgement,
//! checkpoints, the spool cursor). The router shares nothing with the delivery side.
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
//! dead-letter store (`deadletter`), the worker publishes the highest sequence
//! number it is done with ([`ForwarderHandle::acked`]); the durable spool keeps its
//! per-forwarder cursors from this.

mod attempts;
pub(crate) mod backlog;
mod common;
mod cursor;
pub(crate) mod deadletter;
mod delivery;
pub(crate) mod health;
mod inflight;
mod intake;
pub(crate) mod meters;
pub(crate) mod metric_table;
pub(crate) mod queue;
pub(crate) mod retry;
mod route;
mod router;
pub(crate) mod settings;
mod spec;
pub(crate) mod swap;
mod worker;

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use thiserror::Error;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::filter::Filter;
use crate::forward::{BuildError, Context, Forwarder, Kinds};
pub(crate) use backlog::Backlog;
use cursor::Cursor;
pub(crate) use deadletter::DeadLetters;
use delivery::Delivery;
pub use delivery::Report;
pub(crate) use health::{Health, HealthSnapshot};
use intake::Intake;
use queue::Queue;
use route::RouteState;
use router::Route;
pub(crate) use router::Router;
pub use spec::ForwarderSpec;
pub(crate) use spec::check_name;
use worker::Worker;

#[derive(Debug, Error)]
pub enum PipelineError {
    #[error("forwarder {name:?}")]
    Build {
        name: String,
        #[source]
        source: BuildError,
    },
    #[error("forwarder {name:?}")]
    Swap {
        name: String,
        #[source]
        source: swap::SwapError,
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
    pub bytes: crate::units::ByteSize,
    pub waited: Duration,
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
    pub fn wait_acked(&self, seq: u64) -> impl std::future::Future<Output = ()> + 'static {
        let mut acked = self.acked.clone();
        async move {
            let _ = acked.wait_for(|acked| *acked >= seq).await;
        }
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

/// All forwarders with their workers. Forwarders can be added, removed and replaced
/// while events flow (`swap`).
pub struct Pipeline {
    router: Router,
    entries: Forwarders,
    /// Parents of every worker's own tokens: shutdown cancels them all.
    closing: CancellationToken,
    stop: CancellationToken,
    backlog: Option<BacklogStart>,
}

/// The forwarders a pipeline runs right now; cheap to clone, and follows additions
/// and removals (the admin endpoint lists from it).
#[derive(Clone, Default)]
pub struct Forwarders(Arc<Mutex<Vec<Entry>>>);

impl Forwarders {
    fn lock(&self) -> MutexGuard<'_, Vec<Entry>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Every forwarder, in configuration order.
    pub fn list(&self) -> Vec<ForwarderHandle> {
        self.lock().iter().map(|e| e.handle.clone()).collect()
    }
}

/// One forwarder: its outside view and, unless it is being replaced, its worker.
struct Entry {
    handle: ForwarderHandle,
    worker: Option<WorkerTask>,
}

struct WorkerTask {
    queue: Arc<Queue>,
    closing: CancellationToken,
    stop: CancellationToken,
    task: JoinHandle<Report>,
}

impl WorkerTask {
    /// Closes the queue and lets the worker deliver what is queued for at most
    /// `deadline`; the rest stays in the backlog from the forwarder's cursor.
    async fn finish(self, name: &str, deadline: Duration) -> Option<Report> {
        self.queue.close();
        self.closing.cancel();
        let stop = self.stop.clone();
        let timer = tokio::spawn(async move {
            tokio::time::sleep(deadline).await;
            stop.cancel();
        });
        let report = match self.task.await {
            Ok(report) => Some(report),
            Err(error) => {
                tracing::error!(forwarder = name, %error, "a forwarder worker died");
                None
            }
        };
        timer.abort();
        report
    }
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
        Self::from_forwarders(std::iter::empty())
    }

    /// Builds one configured forwarder: its kind's options, its filters, its batch
    /// size. Nothing runs yet.
    pub async fn build(
        spec: &ForwarderSpec,
        kinds: &Kinds,
        data_dir: &std::path::Path,
        dead_letters: Option<DeadLetters>,
    ) -> Result<Parts, PipelineError> {
        let build_error = |source| PipelineError::Build {
            name: spec.name.clone(),
            source,
        };
        let kind = kinds.get(&spec.kind).map_err(build_error)?;
        kind.check(&spec.options).map_err(build_error)?;
        let filter = spec.filter().map_err(|source| PipelineError::Filter {
            name: spec.name.clone(),
            source,
        })?;
        let context = Context {
            name: spec.name.clone(),
            data_dir: data_dir.to_path_buf(),
        };
        let mut forwarder = kind
            .build(&context, &spec.options)
            .await
            .map_err(build_error)?;
        if let Some(correlate) = &spec.correlate {
            forwarder = crate::correlate::Correlated::wrap(
                &spec.name,
                forwarder,
                correlate.clone(),
                data_dir,
            );
        }
        let mut batch = spec.batch.clone();
        if batch.events == 0 {
            batch.events = kind.default_batch_events();
        }
        Ok(Parts {
            name: spec.name.clone(),
            filter,
            forwarder,
            queue: spec.queue.clone(),
            batch,
            retry: spec.retry.clone(),
            checkpoint: spec.checkpoint.clone(),
            dead_letters,
        })
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
            built.push(Self::build(spec, kinds, data_dir, dead_letters.clone()).await?);
        }
        Ok(Self::from_forwarders_with(built, backlog))
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
        let start_seq = backlog.as_ref().map_or(1, |b| b.start_seq);
        let pipeline = Self {
            router: Router::new(Vec::new(), start_seq),
            entries: Forwarders::default(),
            closing: CancellationToken::new(),
            stop: CancellationToken::new(),
            backlog,
        };
        let mut routes = Vec::new();
        for part in parts {
            let name: Arc<str> = part.name.as_str().into();
            let state = Arc::new(match &pipeline.backlog {
                Some(b) => RouteState::new(b.start_seq, Some(b.backlog.cursor(&name))),
                None => RouteState::new(1, None),
            });
            let (route, entry) = pipeline.launch(part, state, Arc::new(Health::default()), 0);
            routes.push(route);
            pipeline.entries.lock().push(entry);
        }
        pipeline.router.lock().list = routes.into();
        pipeline
    }

    /// Starts one forwarder's worker on `state` (with a fresh queue); returns its
    /// route, for the caller to install, and its entry.
    fn launch(
        &self,
        part: Parts,
        state: Arc<RouteState>,
        health: Arc<Health>,
        acked: u64,
    ) -> (Arc<Route>, Entry) {
        let name: Arc<str> = part.name.into();
        let queue = Arc::new(Queue::with_backlog(part.queue, self.backlog.is_some()));
        let (acked_tx, acked_rx) = watch::channel(acked);
        if state.spilled_from().is_some() {
            // A backlog (left by the previous run, or by a replaced forwarder) is
            // read from the spool first.
            health.spilling();
        }
        // Series that exist from the start, so rates over them work at once.
        metrics::counter!("eventgate_events_forwarded_total", "forwarder" => name.to_string())
            .increment(0);
        metrics::counter!("eventgate_forwarder_retries_total", "forwarder" => name.to_string())
            .increment(0);
        metrics::counter!("eventgate_forwarder_checkpoint_failures_total", "forwarder" => name.to_string())
            .increment(0);
        let dead_letters =
            deadletter::Hook::new(Arc::clone(&name), part.dead_letters, part.batch.events);
        let closing = self.closing.child_token();
        let stop = self.stop.child_token();
        let inflight = self.inflight(&name);
        // Without a backlog nothing could be sent again after a lost checkpoint.
        let forwarder: Arc<dyn Forwarder> = match &self.backlog {
            Some(_) => part.forwarder,
            None => Arc::new(cursor::SyncEachBatch(part.forwarder)),
        };
        let common = common::Common {
            name: Arc::clone(&name),
            health: Arc::clone(&health),
            backlog: self.backlog.as_ref().map(|b| Arc::clone(&b.backlog)),
            closing: closing.clone(),
            stop: stop.clone(),
        };
        let intake = Intake::new(
            &common,
            Arc::clone(&queue),
            Arc::clone(&state),
            part.filter.clone(),
            part.batch,
        );
        let stack = retry::stack_reporting(
            Arc::clone(&forwarder),
            &name,
            &part.retry,
            Arc::clone(&health),
        );
        let delivery = Delivery::new(
            &common,
            Arc::clone(&forwarder),
            stack,
            dead_letters,
            inflight,
        );
        let cursor = Cursor::new(&common, forwarder, part.checkpoint, acked_tx);
        let task = tokio::spawn(Worker::new(&common, intake, delivery, cursor).run());
        let route = Arc::new(Route::new(
            Arc::clone(&name),
            part.filter,
            Arc::clone(&queue),
            state,
            Arc::clone(&health),
        ));
        let entry = Entry {
            handle: ForwarderHandle {
                name,
                queue: Arc::clone(&queue),
                acked: acked_rx,
                health,
            },
            worker: Some(WorkerTask {
                queue,
                closing,
                stop,
                task,
            }),
        };
        (route, entry)
    }

    /// The forwarder's in-flight record, with a durable backlog (the only case where
    /// a restart hands it the same events again).
    fn inflight(&self, name: &str) -> inflight::Inflight {
        let Some(dir) = self.backlog.as_ref().and_then(|b| b.backlog.inflight_dir()) else {
            return inflight::Inflight::disabled();
        };
        match inflight::Inflight::open(&dir, name) {
            Ok(journal) => {
                if let Some(suspect) = journal.suspect {
                    tracing::warn!(
                        forwarder = name,
                        first_seq = suspect.first,
                        last_seq = suspect.last,
                        deaths = suspect.deaths,
                        "the previous run ended while this forwarder was delivering these events; they are delivered one at a time"
                    );
                }
                journal
            }
            Err(error) => {
                tracing::warn!(forwarder = name, dir = %dir.display(), %error, "cannot open the in-flight record; an event that crashes the process could crash it again after a restart");
                inflight::Inflight::disabled()
            }
        }
    }

    pub fn router(&self) -> Router {
        self.router.clone()
    }

    /// The forwarders running now, in configuration order.
    pub fn forwarders(&self) -> Vec<ForwarderHandle> {
        self.entries.list()
    }

    /// A live view of the forwarders, which follows reloads.
    pub fn view(&self) -> Forwarders {
        self.entries.clone()
    }

    pub fn forwarder(&self, name: &str) -> Option<ForwarderHandle> {
        self.entries
            .lock()
            .iter()
            .find(|e| &*e.handle.name == name)
            .map(|e| e.handle.clone())
    }

    /// Closes every queue and lets the workers deliver what is queued, for at most
    /// `deadline`; then abandons the rest. Returns one report per forwarder saying
    /// what was delivered and what was not.
    pub async fn shutdown(&self, deadline: Duration) -> Vec<Report> {
        self.closing.cancel();
        for route in self.router.all().iter() {
            route.queue.close();
        }
        let workers: Vec<WorkerTask> = self
            .entries
            .lock()
            .iter_mut()
            .filter_map(|e| e.worker.take())
            .collect();
        let stop = self.stop.clone();
        let timer = tokio::spawn(async move {
            tokio::time::sleep(deadline).await;
            stop.cancel();
        });
        let mut reports = Vec::new();
        for worker in workers {
            match worker.task.await {
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
    pub checkpoint: settings::CheckpointSettings,
    /// Where batches given up on are recorded; `None`: only logged.
    pub dead_letters: Option<DeadLetters>,
}

#[cfg(test)]
mod tests;
