//! The dead-letter store: events a forwarder rejected permanently or ran out of retry
//! budget for, kept in their own SQLite file (default `<data_dir>/deadletters.db`,
//! schema in `migrations/deadletter/`) with the forwarder's name, the error, the
//! attempt count and times, until `eventgate dlq retry` has them redelivered or
//! `eventgate dlq purge` removes them.
//!
//! The pipeline writes here ([`crate::pipeline`]'s workers, before acknowledging a
//! batch given up on) and redelivers requested entries; the `eventgate dlq` commands
//! read and mark entries, possibly while a gateway runs: the file is in WAL mode and
//! each change is one short transaction.

mod schema;
mod settings;
mod sql;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use prost::Message;
use rusqlite::Connection;
use thiserror::Error;

use crate::event::{Event, EventId, Identity, Origin, Source, Workload};
use crate::proto::containerd::types::Envelope;
use crate::proto::rfc3339_nanos;
use crate::publisher::Publisher;
pub use schema::LATEST;
pub(crate) use schema::check as check_schema;
pub use settings::DeadLetterSettings;

#[derive(Debug, Error)]
pub enum DeadLetterError {
    #[error("no dead letters: {path} does not exist")]
    Missing { path: PathBuf },
    #[error("cannot create the directory {dir} for the dead-letter store")]
    CreateDir {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{path} is not a SQLite database (its header is not SQLite's, or it is encrypted); move it away or configure another `dead_letter.path`"
    )]
    NotADatabase {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    #[error(
        "{path} is a SQLite database of another application (application_id {application_id:#x}, {objects} schema objects), not an eventgate dead-letter store; configure another `dead_letter.path`"
    )]
    Foreign {
        path: PathBuf,
        application_id: i32,
        objects: i64,
    },
    #[error(
        "{path} was written by a newer eventgate: dead-letter schema version {found}, and this eventgate knows up to version {known}; upgrade eventgate, or configure another `dead_letter.path` (the file was left as it is)"
    )]
    TooNew {
        path: PathBuf,
        found: i64,
        known: i64,
    },
    #[error("{path} is read-only; the dead-letter store needs to write there")]
    ReadOnly { path: PathBuf },
    #[error(
        "{path}: SQLite kept journal_mode {mode:?} instead of WAL (the filesystem may not support WAL's shared memory)"
    )]
    NoWal { path: PathBuf, mode: String },
    #[error("dead-letter store {path}: migration {name} failed")]
    Migration {
        path: PathBuf,
        name: &'static str,
        #[source]
        source: rusqlite::Error,
    },
    #[error("dead-letter store {path}: {what}")]
    Sqlite {
        path: PathBuf,
        what: &'static str,
        #[source]
        source: rusqlite::Error,
    },
    #[error("dead-letter store {path}: the blocking task failed")]
    Task {
        path: PathBuf,
        #[source]
        source: tokio::task::JoinError,
    },
}

/// Why a forwarder gave up on an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// The forwarder said the batch can never be delivered.
    Permanent,
    /// Retryable failures until `retry.attempts` or `retry.elapsed` ran out.
    RetriesExhausted,
    /// The forwarder's code panicked on this event, alone in its batch.
    Panicked,
    /// The gateway process died while delivering this event, twice, the second time
    /// with the event alone in flight (see `pipeline::inflight`).
    Crashed,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Permanent => "permanent",
            Reason::RetriesExhausted => "retries_exhausted",
            Reason::Panicked => "panicked",
            Reason::Crashed => "crashed",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        match text {
            "permanent" => Some(Reason::Permanent),
            "retries_exhausted" => Some(Reason::RetriesExhausted),
            "panicked" => Some(Reason::Panicked),
            "crashed" => Some(Reason::Crashed),
            _ => None,
        }
    }
}

/// Where an entry is in its redelivery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Waiting for an operator.
    Dead,
    /// `eventgate dlq retry` asked for redelivery; the forwarder's worker picks it up.
    Requested,
    /// A worker is redelivering it.
    Queued,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Dead => "dead",
            State::Requested => "requested",
            State::Queued => "queued",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        match text {
            "dead" => Some(State::Dead),
            "requested" => Some(State::Requested),
            "queued" => Some(State::Queued),
            _ => None,
        }
    }
}

/// How a delivery ended for good.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub reason: Reason,
    /// The last error, with its causes.
    pub error: String,
    pub attempts: u32,
    pub first_attempt_at: SystemTime,
    pub last_attempt_at: SystemTime,
}

/// One row of the store. Times are RFC 3339 UTC text with nine fraction digits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub id: i64,
    pub forwarder: String,
    pub event_id: String,
    pub seq: u64,
    /// `publish`, `forward`, `upstream:<name>` or `eventgate`.
    pub source: String,
    /// The containerd Envelope as protobuf bytes.
    pub envelope: Vec<u8>,
    pub received_at: String,
    pub error: String,
    pub reason: Reason,
    pub attempts: u64,
    pub first_attempt_at: String,
    pub last_attempt_at: String,
    pub dead_at: String,
    pub retry_requested_at: Option<String>,
    pub state: State,
    /// Who published the event; `None` without one (or for entries recorded before
    /// publishers were kept).
    pub publisher: Option<Publisher>,
    /// Received live or reconstructed by a reconcile, and from whose record
    /// ([`Origin::Live`] for entries recorded before origins were kept; reconciled
    /// entries recorded before witnesses were kept are containerd's).
    pub origin: Origin,
    /// What the event's container record said when it was captured; `None` for
    /// events without one (and entries recorded before workloads were kept).
    pub workload: Option<Workload>,
    /// The node the event was captured on; `None` when unknown (and for entries
    /// recorded before nodes were kept).
    pub node: Option<String>,
    /// The event's seq on its node's gateway, for an event taken in from another
    /// gateway; `None` otherwise (and for entries recorded before it was kept).
    pub node_seq: Option<u64>,
    /// How the event entered its node's gateway, for an event taken in from another
    /// gateway that said so; `None` otherwise (and for entries recorded before it
    /// was kept).
    pub node_source: Option<String>,
}

/// An entry that cannot be turned back into an event (a damaged row).
#[derive(Debug, Error)]
pub enum RestoreError {
    #[error("the stored envelope cannot be decoded")]
    Envelope(#[source] prost::DecodeError),
    #[error("the stored event id {0:?} is not a UUID")]
    Id(String),
    #[error("the stored received_at {0:?} is not an RFC 3339 time")]
    ReceivedAt(String),
}

impl Entry {
    pub fn decode_envelope(&self) -> Result<Envelope, prost::DecodeError> {
        Envelope::decode(self.envelope.as_slice())
    }

    /// The event as the forwarder first saw it: same id, sequence number, source,
    /// publisher, origin, workload, node, node seq, arrival time and envelope.
    pub fn to_event(&self) -> Result<Event, RestoreError> {
        let envelope = self.decode_envelope().map_err(RestoreError::Envelope)?;
        let id: EventId = self
            .event_id
            .parse()
            .map_err(|_| RestoreError::Id(self.event_id.clone()))?;
        let received_at = humantime::parse_rfc3339(&self.received_at)
            .map_err(|_| RestoreError::ReceivedAt(self.received_at.clone()))?;
        let identity = Identity {
            id,
            received_at,
            source: Source::parse(&self.source),
            publisher: self.publisher.clone(),
            origin: self.origin,
            workload: self.workload.clone().map(Arc::new),
            node: self.node.as_deref().map(Arc::from),
            node_seq: self.node_seq,
            node_source: self.node_source.as_deref().map(Arc::from),
        };
        Ok(Event::from_identity(self.seq, identity, envelope))
    }
}

/// A wall-clock time as stored.
pub(crate) fn timestamp(time: SystemTime) -> String {
    rfc3339_nanos(&prost_types::Timestamp::from(time))
}

/// The store, shared by a gateway's workers. Cheap to clone; every call runs on the
/// blocking pool, one at a time.
#[derive(Clone)]
pub struct Store {
    path: Arc<PathBuf>,
    conn: Arc<Mutex<Connection>>,
}

impl Store {
    /// Opens the store, creating the file (and its directory) unless `create` is false,
    /// when a missing file is [`DeadLetterError::Missing`].
    pub async fn open(path: PathBuf, create: bool) -> Result<Self, DeadLetterError> {
        let opened = {
            let path = path.clone();
            tokio::task::spawn_blocking(move || schema::open(&path, create)).await
        };
        let conn = match opened {
            Ok(result) => result?,
            Err(source) => return Err(DeadLetterError::Task { path, source }),
        };
        Ok(Self {
            path: Arc::new(path),
            conn: Arc::new(Mutex::new(conn)),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    async fn run<T: Send + 'static>(
        &self,
        what: &'static str,
        work: impl FnOnce(&mut Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T, DeadLetterError> {
        let conn = Arc::clone(&self.conn);
        let done = tokio::task::spawn_blocking(move || {
            let mut conn = conn.lock().unwrap_or_else(PoisonError::into_inner);
            work(&mut conn)
        })
        .await;
        let path = self.path.to_path_buf();
        match done {
            Ok(result) => result.map_err(|source| DeadLetterError::Sqlite { path, what, source }),
            Err(source) => Err(DeadLetterError::Task { path, source }),
        }
    }

    /// Records `events` as dead for `forwarder`; an event already dead for it is
    /// updated (attempts add up, times move). Returns how many were recorded.
    pub async fn record(
        &self,
        forwarder: &str,
        events: Vec<Arc<Event>>,
        failure: Failure,
    ) -> Result<usize, DeadLetterError> {
        let forwarder = forwarder.to_owned();
        self.run("recording dead letters", move |conn| {
            sql::record(conn, &forwarder, &events, &failure, SystemTime::now())
        })
        .await
    }

    /// Entries in the order they died, optionally of one forwarder, at most `limit`.
    pub async fn list(
        &self,
        forwarder: Option<String>,
        limit: Option<u64>,
    ) -> Result<Vec<Entry>, DeadLetterError> {
        self.run("listing dead letters", move |conn| {
            sql::list(conn, forwarder.as_deref(), limit)
        })
        .await
    }

    /// Marks dead entries for redelivery (all, one forwarder's, or by id); returns
    /// how many were marked.
    pub async fn request(
        &self,
        forwarder: Option<String>,
        ids: Vec<i64>,
    ) -> Result<usize, DeadLetterError> {
        self.run("requesting redelivery", move |conn| {
            sql::request(conn, forwarder.as_deref(), &ids, SystemTime::now())
        })
        .await
    }

    /// Takes up to `limit` of `forwarder`'s requested entries, marking them queued.
    pub async fn take(&self, forwarder: &str, limit: u64) -> Result<Vec<Entry>, DeadLetterError> {
        let forwarder = forwarder.to_owned();
        self.run("taking requested dead letters", move |conn| {
            sql::take(conn, &forwarder, limit)
        })
        .await
    }

    /// Removes entries by id; returns how many there were.
    pub async fn delete(&self, ids: Vec<i64>) -> Result<usize, DeadLetterError> {
        self.run("deleting redelivered dead letters", move |conn| {
            sql::delete(conn, &ids)
        })
        .await
    }

    /// Returns a queued entry to `dead` with a new error.
    pub async fn release(&self, id: i64, error: String) -> Result<usize, DeadLetterError> {
        self.run("releasing a dead letter", move |conn| {
            sql::release(conn, id, &error)
        })
        .await
    }

    /// Removes entries of one forwarder (or all) that died before `before` (or ever).
    pub async fn purge(
        &self,
        forwarder: Option<String>,
        before: Option<SystemTime>,
    ) -> Result<usize, DeadLetterError> {
        self.run("purging dead letters", move |conn| {
            sql::purge(conn, forwarder.as_deref(), before)
        })
        .await
    }

    /// At a gateway's start: entries its predecessor left `queued` go back to
    /// `requested`, so a redelivery interrupted by a crash is never lost.
    pub async fn requeue_interrupted(&self) -> Result<usize, DeadLetterError> {
        self.run(
            "requeueing interrupted redeliveries",
            sql::requeue_interrupted,
        )
        .await
    }

    /// Forwarders with entries, with their counts, by name.
    pub async fn forwarders(&self) -> Result<Vec<(String, u64)>, DeadLetterError> {
        self.run("listing forwarders", |conn| sql::forwarders(conn))
            .await
    }

    pub async fn has_forwarder(&self, forwarder: &str) -> Result<bool, DeadLetterError> {
        let forwarder = forwarder.to_owned();
        self.run("looking up a forwarder", move |conn| {
            sql::has_forwarder(conn, &forwarder)
        })
        .await
    }
}

#[cfg(test)]
mod tests;
