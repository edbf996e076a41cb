//! `eventgate replay`: stored events from the audit store sent again, to one
//! configured forwarder (a Kafka backfill after an outage) or to another exchange.
//!
//! - The selection is exactly what `eventgate query` prints for the same bounds and
//!   filters ([`crate::query`]), in store order, up to the last row present when the
//!   replay first started: a replay into the gateway that writes the store ends.
//! - A forwarder gets batches through the same retry stack the pipeline builds for
//!   it ([`crate::pipeline::retry`]), events with their original id, seq, times,
//!   namespace and source, so sinks deduplicate as they do for the pipeline's
//!   retries. Another exchange gets each envelope with Forward ([`exchange`]).
//! - Progress is kept in a state file ([`state`]) after each acknowledged batch: an
//!   interrupted or failed replay resumes after the last acknowledged row, a finished
//!   one refuses to run again without `restart`. At least once: a crash can send the
//!   batch that was in flight again.

mod exchange;
mod order;
pub(crate) mod progress;
pub(crate) mod rate;
mod run;
mod source;
pub(crate) mod state;
pub(crate) mod target;

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use thiserror::Error;

pub(crate) use progress::ProgressMode;
pub(crate) use run::Stop;
pub(crate) use target::TargetSpec;

use crate::client::ConnectError;
use crate::config::ConfigError;
use crate::filter::Filter;
use crate::forward::{BuildError, Kinds};
use crate::query::time::{from_stored, stored_form};
use crate::query::{Query, QueryError, Reader, RowRange};
use progress::Progress;
use rate::TokenBucket;
use run::{Counts, Engine};
use source::Chunks;
use state::{Identity, State, StateFile};

#[derive(Debug, Error)]
pub enum ReplayError {
    #[error(transparent)]
    Query(#[from] QueryError),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("{config} has no forwarder named {name:?} (its forwarders: {known})")]
    UnknownForwarder {
        name: String,
        config: PathBuf,
        known: String,
    },
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
    #[error("invalid filter: {0}")]
    Selection(String),
    #[error(
        "no socket at {path}: --to-address takes the socket of a running eventgate or containerd"
    )]
    NoSocket {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Connect(#[from] ConnectError),
    #[error(
        "this replay already completed at {at} ({sent} events sent; progress in {state}); pass --restart to send again"
    )]
    AlreadyCompleted {
        at: String,
        sent: u64,
        state: PathBuf,
    },
    #[error("replay state {path}: {what} it")]
    StateIo {
        path: PathBuf,
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "replay state {path} is damaged; move it away or pass --restart to start over (already sent events would be sent again)"
    )]
    StateCorrupt {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error(
        "replay state {path} has version {found}, which this eventgate does not know; pass --restart to start over"
    )]
    StateVersion { path: PathBuf, found: u32 },
    #[error(
        "sending the events seq {first_seq}..={last_seq} to {target} failed ({gave_up}, {attempts} attempt(s)): {reason}; stopped after {done} of {total} events, progress saved: run the same command again to continue with this batch"
    )]
    Delivery {
        target: String,
        first_seq: u64,
        last_seq: u64,
        attempts: u32,
        gave_up: &'static str,
        reason: String,
        done: u64,
        total: u64,
    },
    #[error("interrupted after {done} of {total} events; run the same command again to resume")]
    Interrupted { done: u64, total: u64 },
    #[error("a replay task stopped unexpectedly")]
    Task(#[source] tokio::task::JoinError),
}

/// A `--since`/`--until` bound: the text as given (it names the replay) and the time
/// it meant when the command started.
#[derive(Clone, Debug)]
pub struct Bound {
    pub text: String,
    pub time: SystemTime,
}

/// Which events: the store and the selection, as the command line gave them.
#[derive(Clone, Debug)]
pub(crate) struct Selection {
    pub store: PathBuf,
    pub filters: Vec<String>,
    pub since: Option<Bound>,
    pub until: Option<Bound>,
}

#[derive(Clone, Debug)]
pub(crate) struct Options {
    /// Events per batch instead of the target's.
    pub batch: Option<usize>,
    /// At most this many events per second.
    pub rate: Option<u32>,
    /// Start over even if a state file says otherwise.
    pub restart: bool,
    pub progress: ProgressMode,
}

/// What a finished replay did.
#[derive(Clone, Debug)]
pub(crate) struct Summary {
    pub target: String,
    /// Sent by this run.
    pub sent: u64,
    /// Left out by the forwarder's filters in this run.
    pub skipped: u64,
    /// eventgate's own events left out in this run, as the target refuses them.
    pub own_skipped: u64,
    /// Done (sent or skipped) by earlier runs of the same replay.
    pub earlier: u64,
    pub total: u64,
    pub elapsed: Duration,
    /// Events per second in this run.
    pub rate: f64,
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "replayed {} events to {} in {:.1}s ({:.1} events/s); {} skipped by the forwarder's filters",
            self.sent,
            self.target,
            self.elapsed.as_secs_f64(),
            self.rate,
            self.skipped
        )?;
        if self.own_skipped > 0 {
            write!(
                f,
                "; eventgate's own events (namespace eventgate, topics under /eventgate/) are \
                 not forwarded: the target refuses them; {} skipped",
                self.own_skipped
            )?;
        }
        if self.earlier > 0 {
            write!(f, "; {} done by an earlier run", self.earlier)?;
        }
        write!(f, "; {} selected in all", self.total)
    }
}

/// Runs a replay to its end, its interruption (`stop`) or its first failure.
pub(crate) async fn run(
    kinds: &Kinds,
    selection: Selection,
    target: TargetSpec,
    options: Options,
    stop: Stop,
) -> Result<Summary, ReplayError> {
    let filter =
        Filter::parse_all(&selection.filters).map_err(|e| ReplayError::Selection(e.to_string()))?;
    let path = selection.store.clone();
    let reader = tokio::task::spawn_blocking(move || Reader::open(&path))
        .await
        .map_err(ReplayError::Task)??;
    let store = std::fs::canonicalize(&selection.store).unwrap_or_else(|_| selection.store.clone());
    let resolved = target.resolve()?;
    let identity = Identity {
        store: store.clone(),
        target: resolved.label.clone(),
        slug: resolved.slug.clone(),
        filters: selection.filters.clone(),
        since: selection.since.as_ref().map(|b| b.text.clone()),
        until: selection.until.as_ref().map(|b| b.text.clone()),
        since_at: selection.since.as_ref().map(|b| b.time),
        until_at: selection.until.as_ref().map(|b| b.time),
    };
    let state_path = state_dir(&store).join(identity.file_name());
    let restarting = options.restart && state_path.exists();
    let saved = match options.restart {
        true => None,
        false => StateFile::load(&state_path)?,
    };
    if let Some(State {
        completed_at: Some(at),
        sent,
        ..
    }) = &saved
    {
        return Err(ReplayError::AlreadyCompleted {
            at: at.clone(),
            sent: *sent,
            state: state_path,
        });
    }
    let mut query = Query {
        filter,
        since: identity.since_at,
        until: identity.until_at,
        limit: None,
    };
    let (reader, state) = match saved {
        Some(state) => {
            // The bounds the first run resolved, so `--since 1h` means the same hour.
            query.since = state
                .since_at
                .as_deref()
                .and_then(from_stored)
                .map(Into::into);
            query.until = state
                .until_at
                .as_deref()
                .and_then(from_stored)
                .map(Into::into);
            (reader, state)
        }
        None => {
            let count_query = query.clone();
            tokio::task::spawn_blocking(move || {
                let up_to = reader.last_row_id()?;
                let total = reader.count(&count_query, RowRange { after: 0, up_to })?;
                Ok::<_, QueryError>((reader, State::new(&identity, up_to, total)))
            })
            .await
            .map_err(ReplayError::Task)??
        }
    };
    let file = StateFile {
        path: state_path,
        state,
    };
    let options = Options {
        restart: restarting,
        ..options
    };
    start(kinds, reader, query, resolved, file, options, stop).await
}

/// `<directory of the store>/replay`: next to what is replayed, so the same store
/// finds its progress whatever the working directory.
pub(crate) fn state_dir(store: &Path) -> PathBuf {
    store.parent().unwrap_or(Path::new(".")).join("replay")
}

async fn start(
    kinds: &Kinds,
    reader: Reader,
    query: Query,
    resolved: target::Resolved,
    file: StateFile,
    options: Options,
    stop: Stop,
) -> Result<Summary, ReplayError> {
    let state = &file.state;
    let resumed = state.done() > 0 || state.after > 0;
    let target = resolved.build(kinds, options.batch).await?;
    let progress = Progress::new(options.progress, state.total, state.done());
    if resumed {
        progress.note(&format!(
            "resuming after row {}: {} of {} events done by an earlier run started at {} (state {})",
            state.after,
            state.done(),
            state.total,
            state.started_at,
            file.path.display()
        ));
    } else if options.restart {
        // Only when there was a replay to start over from.
        progress.note(&format!(
            "starting over: {} events selected up to row {}",
            state.total, state.up_to
        ));
    }
    let rows = RowRange {
        after: state.after,
        up_to: state.up_to,
    };
    let stack =
        crate::pipeline::retry::stack(target.forwarder.clone(), &target.name, &target.retry);
    let forwarder = target.forwarder.clone();
    let size = match options.rate {
        Some(rate) => target.batch_events.min(TokenBucket::new(rate).capacity()),
        None => target.batch_events,
    };
    let nothing = state.total == 0;
    let mut engine = Engine {
        target,
        stack,
        state: file,
        bucket: options.rate.map(TokenBucket::new),
        progress,
        stop,
    };
    if nothing {
        // No state file: there is nothing a second run could send twice.
        engine.progress.finish();
        close(&forwarder).await;
        return Ok(engine.summary(Counts::default()));
    }
    // Saved before the first batch, so the upper bound is fixed from here on.
    engine.save().await?;
    let outcome = engine.run(Chunks::spawn(reader, query, rows, size)).await;
    engine.progress.finish();
    close(&forwarder).await;
    let summary = outcome?;
    engine.state.state.completed_at = Some(stored_form(SystemTime::now()));
    engine.save().await?;
    Ok(summary)
}

async fn close(forwarder: &std::sync::Arc<dyn crate::forward::Forwarder>) {
    if let Err(error) = forwarder.close().await {
        tracing::warn!(error = %crate::errors::chain(&error), "closing the target failed");
    }
}

#[cfg(test)]
mod tests;
