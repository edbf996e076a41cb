//! Forwarders: where accepted events go. One trait, [`Forwarder`], and one file per
//! kind (`file`, `sqlite`, `kafka`). The pipeline owns queueing, batching, timeouts
//! and retries; a forwarder only delivers one batch and says how that went.
//!
//! Forwarders are built from `[[forwarder]]` tables by `kind`, through a [`Kinds`]
//! registry: a library user adds a kind with [`Kinds::register`] and passes the
//! registry to [`crate::gateway::Gateway::start_with`], without touching the pipeline.

pub(crate) mod file;
pub(crate) mod kafka;
pub(crate) mod postgres;
pub(crate) mod sqlite;

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use futures::future::BoxFuture;
use thiserror::Error;

use crate::event::Event;

/// Events handed to a forwarder in one call, in gateway order (ascending `seq`).
/// Cheap to clone: a retry re-sends the same batch without copying events.
#[derive(Clone, Debug)]
pub struct Batch {
    events: Arc<[Arc<Event>]>,
    bytes: usize,
}

impl Batch {
    /// `bytes` is the encoded size the pipeline accounted for these events.
    pub fn new(events: Vec<Arc<Event>>, bytes: usize) -> Self {
        Self {
            events: events.into(),
            bytes,
        }
    }

    pub fn events(&self) -> &[Arc<Event>] {
        &self.events
    }

    pub fn len(&self) -> usize {
        self.events.len()
    }

    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Sequence numbers of the first and last event (0, 0 for an empty batch).
    pub fn seq_range(&self) -> (u64, u64) {
        match (self.events.first(), self.events.last()) {
            (Some(first), Some(last)) => (first.seq, last.seq),
            _ => (0, 0),
        }
    }
}

/// Whether trying the same batch again can help. The pipeline retries `Retryable`
/// errors with backoff and gives up on `Permanent` ones at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The sink is down, busy, full or slow; the batch may go through later.
    Retryable,
    /// The batch itself can never be delivered (rejected as invalid, too large...).
    Permanent,
}

/// A failed delivery, classified, with its cause kept.
#[derive(Debug, Error)]
#[error("{message}")]
pub struct ForwardError {
    pub kind: ErrorKind,
    pub message: String,
    #[source]
    pub source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl ForwardError {
    pub fn retryable(message: impl Into<String>) -> Self {
        Self {
            kind: ErrorKind::Retryable,
            message: message.into(),
            source: None,
        }
    }

    pub fn permanent(message: impl Into<String>) -> Self {
        Self {
            kind: ErrorKind::Permanent,
            message: message.into(),
            source: None,
        }
    }

    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Box::new(source));
        self
    }

    pub fn is_retryable(&self) -> bool {
        self.kind == ErrorKind::Retryable
    }
}

/// A destination for events.
///
/// `send` returns `Ok` once the whole batch is handed to the sink (written, committed,
/// acknowledged by the broker), not necessarily durable: the pipeline then moves on.
/// On error the pipeline sends the *same* batch again (retryable) or gives up on it
/// (permanent), so a forwarder may see a batch, or part of one, more than once: sinks
/// deduplicate by event id where they can.
///
/// Durability is a checkpoint: now and then (`checkpoint` in the forwarder's table)
/// the pipeline calls [`Forwarder::checkpoint`], and only once it returns `Ok` does it
/// persist the forwarder's spool cursor past what was sent. The spool keeps
/// everything after the last checkpoint, so a sink that loses what it had not made
/// durable (a power loss) is sent it again from there. A sink whose `send` is
/// durable already (a broker's acknowledgement) keeps the default, which does nothing.
///
/// The pipeline calls `send` for one batch at a time per forwarder, in order.
pub trait Forwarder: Send + Sync + 'static {
    fn send<'a>(&'a self, batch: &'a Batch) -> BoxFuture<'a, Result<(), ForwardError>>;

    /// Makes everything sent so far durable. `next` is the spool position the
    /// pipeline will persist as this forwarder's cursor once this returns `Ok`: every
    /// event before it that the forwarder is meant to have is in what was sent (0: a
    /// pipeline without a spool, which has no positions). A sink may record it with
    /// its durable state (see [`Forwarder::resume`]). On
    /// error the sink must be back at its last checkpoint (what was sent since may be
    /// gone); the pipeline sends it all again.
    fn checkpoint(&self, next: u64) -> BoxFuture<'_, Result<(), ForwardError>> {
        let _ = next;
        Box::pin(async { Ok(()) })
    }

    /// The pipeline is about to send again everything from `cursor` on (at a start
    /// with a spool whose next position is `end`, after a panic, after a failed
    /// checkpoint). A sink that cannot drop duplicates by itself drops what it holds
    /// past its last checkpoint and may answer a later position, the `next` of that
    /// checkpoint, when it has everything before it durably (the cursor is persisted
    /// after the checkpoint, so a crash in between leaves the cursor behind). The
    /// default resends from `cursor`.
    fn resume(&self, cursor: u64, end: u64) -> BoxFuture<'_, Result<u64, ForwardError>> {
        let _ = end;
        Box::pin(async move { Ok(cursor) })
    }

    /// Called once after the last batch at shutdown: flush and release resources.
    fn close(&self) -> BoxFuture<'_, Result<(), ForwardError>> {
        Box::pin(async { Ok(()) })
    }

    /// Work on a batch that needs no sink (rendering what `send` will write, into the
    /// events' own caches), done while the batch before it is being sent: the
    /// pipeline calls it for a batch it read ahead from the spool. It may be skipped;
    /// `send` must not depend on it. The default does nothing.
    fn prepare(&self, batch: &Batch) {
        let _ = batch;
    }
}

/// What a forwarder kind gets to build one forwarder.
#[derive(Clone, Debug)]
pub struct Context {
    /// The forwarder's configured name (for logs, metrics and file names).
    pub name: String,
    /// The gateway's data directory; relative paths in options are resolved here.
    pub data_dir: PathBuf,
}

impl Context {
    /// Resolves a configured path: absolute as is, relative under the data directory.
    pub fn resolve(&self, path: &std::path::Path) -> PathBuf {
        if path.is_absolute() {
            path.to_path_buf()
        } else {
            self.data_dir.join(path)
        }
    }
}

/// The options of one `[[forwarder]]` table that belong to its kind (everything but
/// the pipeline's own keys).
pub type Options = toml::Table;

#[derive(Debug, Error)]
pub enum BuildError {
    #[error("unknown forwarder kind {kind:?} (known kinds: {known})")]
    UnknownKind { kind: String, known: String },
    #[error("{0}")]
    Options(String),
    #[error("{message}")]
    Start {
        message: String,
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
}

impl BuildError {
    pub fn start(
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self::Start {
            message: message.into(),
            source: Some(Box::new(source)),
        }
    }
}

/// A kind of forwarder, as named by `kind = "..."` in the config.
pub trait Kind: Send + Sync + 'static {
    /// Validates the options without side effects (used by `check-config`). Errors
    /// name the offending key.
    fn check(&self, options: &Options) -> Result<(), BuildError>;

    /// Builds a forwarder: opens files, connects, creates topics. Errors here stop
    /// the gateway from starting, with a message that says what to fix.
    fn build<'a>(
        &'a self,
        context: &'a Context,
        options: &'a Options,
    ) -> BoxFuture<'a, Result<Arc<dyn Forwarder>, BuildError>>;

    /// Default batch size in events when the config does not set one.
    fn default_batch_events(&self) -> usize {
        1000
    }

    /// Masks the options that hold secrets, for `check-config --print`. By default
    /// every key named like a secret (password, key, token...) at any depth; a kind
    /// whose secrets hide under other names masks those too.
    fn redact(&self, options: &mut Options) {
        crate::redact::table(options);
    }
}

/// Forwarder kinds by name.
#[derive(Clone)]
pub struct Kinds {
    kinds: BTreeMap<String, Arc<dyn Kind>>,
}

impl fmt::Debug for Kinds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.kinds.keys()).finish()
    }
}

impl Default for Kinds {
    /// The built-in kinds: `file`, `sqlite`, `kafka` and `postgres`.
    fn default() -> Self {
        Self::empty()
            .register("file", file::FileKind)
            .register("sqlite", sqlite::SqliteKind)
            .register("kafka", kafka::KafkaKind)
            .register("postgres", postgres::PostgresKind)
    }
}

impl Kinds {
    pub fn empty() -> Self {
        Self {
            kinds: BTreeMap::new(),
        }
    }

    /// Adds (or replaces) a kind.
    pub fn register(mut self, name: impl Into<String>, kind: impl Kind) -> Self {
        self.kinds.insert(name.into(), Arc::new(kind));
        self
    }

    pub fn get(&self, name: &str) -> Result<&Arc<dyn Kind>, BuildError> {
        self.kinds.get(name).ok_or_else(|| BuildError::UnknownKind {
            kind: name.to_owned(),
            known: self.kinds.keys().cloned().collect::<Vec<_>>().join(", "),
        })
    }
}

/// Deserializes a kind's options into its own struct, rejecting unknown keys with
/// their name (every kind's option struct uses `deny_unknown_fields`).
pub fn parse_options<T: serde::de::DeserializeOwned>(options: &Options) -> Result<T, BuildError> {
    toml::Value::Table(options.clone())
        .try_into()
        .map_err(|e: toml::de::Error| BuildError::Options(e.message().to_owned()))
}
