//! The SQLite audit store: one database file with one `events` table, hash-chained
//! ([`chain`], checked by `verify`) with its head in `audit_chain` (schema in
//! `migrations/`). The `sqlite` forwarder is its only writer; queries open their own
//! read connections here, so both sides agree on PRAGMAs and schema versions.
//!
//! Times are stored as RFC 3339 text in UTC with nine fraction digits: they sort as
//! text, so `where timestamp >= '2024-05-01T10:00'` and `order by timestamp` work
//! without conversions, and SQLite's date functions read them.

pub(crate) mod chain;
pub(crate) mod checkpoint;
mod insert;
pub(crate) mod migrate;
pub(crate) mod prove;
pub(crate) mod retention;
pub(crate) mod tree;
pub(crate) mod verify;
pub(crate) mod workload;

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, ErrorCode, OpenFlags};
use serde::Deserialize;
use thiserror::Error;

use crate::event::{Clock, Event, Identity, Witness};
use crate::proto::rfc3339_nanos;
use crate::publisher::{Columns, Publisher};
pub use insert::insert_rows;
#[cfg(any(test, feature = "bench"))]
pub(crate) use insert::raw_insert_rows;
pub(crate) use workload::WorkloadColumns;

#[derive(Debug, Error)]
pub enum StoreError {
    #[error(
        "no audit store at {path}; the `sqlite` forwarder creates it when `eventgate serve` runs (name another file with --db or --data-dir)"
    )]
    Missing { path: PathBuf },
    #[error("cannot create the directory {dir} for the audit store")]
    CreateDir {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{path} is not a SQLite database (its header is not SQLite's, or it is encrypted); move it away or configure another path"
    )]
    NotADatabase {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    #[error(
        "{path} is a SQLite database of another application (application_id {application_id:#x}, {objects} schema objects), not an eventgate audit store; configure another path"
    )]
    Foreign {
        path: PathBuf,
        application_id: i32,
        objects: i64,
    },
    #[error(
        "{path} was written by a newer eventgate: audit store schema version {found}, and this eventgate knows up to version {known}; upgrade eventgate, or configure another path (the file was left as it is)"
    )]
    TooNew {
        path: PathBuf,
        found: i64,
        known: i64,
    },
    #[error(
        "{path} has audit store schema version {found}, but version {needed} is needed to read it; start `eventgate serve` with this file once to migrate it"
    )]
    TooOld {
        path: PathBuf,
        found: i64,
        needed: i64,
    },
    #[error("{path} is read-only; the audit store needs to write there")]
    ReadOnly { path: PathBuf },
    #[error(
        "{path}: SQLite kept journal_mode {mode:?} instead of WAL (the filesystem may not support WAL's shared memory)"
    )]
    NoWal { path: PathBuf, mode: String },
    #[error("audit store {path}: migration {name} failed")]
    Migration {
        path: PathBuf,
        name: &'static str,
        #[source]
        source: rusqlite::Error,
    },
    #[error("audit store {path}: cannot build its Merkle tree")]
    Tree {
        path: PathBuf,
        #[source]
        source: tree::TreeError,
    },
    #[error("audit store {path}: {what}")]
    Sqlite {
        path: PathBuf,
        what: &'static str,
        #[source]
        source: rusqlite::Error,
    },
}

impl StoreError {
    /// SQLite reports a non-database file only when it first reads it, from any call.
    fn from_open(path: &Path, what: &'static str, source: rusqlite::Error) -> Self {
        if source.sqlite_error_code() == Some(ErrorCode::NotADatabase) {
            Self::NotADatabase {
                path: path.to_path_buf(),
                source,
            }
        } else {
            Self::Sqlite {
                path: path.to_path_buf(),
                what,
                source,
            }
        }
    }
}

/// `PRAGMA synchronous` for the writer. In WAL mode `normal` never corrupts the
/// database; a power loss may undo the last transactions. `full` syncs every commit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Synchronous {
    #[default]
    Normal,
    Full,
}

impl Synchronous {
    pub fn pragma(self) -> &'static str {
        match self {
            Synchronous::Normal => "NORMAL",
            Synchronous::Full => "FULL",
        }
    }
}

/// The longest `busy_timeout` accepted (SQLite takes milliseconds as a C int).
pub(crate) const MAX_BUSY_TIMEOUT: Duration = Duration::from_secs(3600);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriterOptions {
    pub synchronous: Synchronous,
    /// How long a statement waits for another connection's lock before failing
    /// with SQLITE_BUSY. At most `MAX_BUSY_TIMEOUT`.
    pub busy_timeout: Duration,
}

impl Default for WriterOptions {
    fn default() -> Self {
        Self {
            synchronous: Synchronous::Normal,
            busy_timeout: Duration::from_secs(5),
        }
    }
}

/// Opens (creating the file and its directory if needed) the database to write:
/// refuses files that are not audit stores or are from a newer eventgate, switches
/// to WAL and applies pending migrations. Blocking: call off the async runtime.
pub fn open_writer(path: &Path, options: &WriterOptions) -> Result<Connection, StoreError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        crate::fsmode::create_dir_all(dir).map_err(|source| StoreError::CreateDir {
            dir: dir.to_path_buf(),
            source,
        })?;
    }
    // With the rule's mode before SQLite makes it (its -wal and -shm follow it). A
    // failure is left for SQLite to report when it opens the file.
    let _ = crate::fsmode::prepare_sqlite(path);
    let sqlite = |what| move |source| StoreError::from_open(path, what, source);
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let mut conn =
        Connection::open_with_flags(path, flags).map_err(sqlite("opening for writing"))?;
    conn.busy_timeout(options.busy_timeout.min(MAX_BUSY_TIMEOUT))
        .map_err(sqlite("setting busy_timeout"))?;
    // Judge the file before changing anything in it (WAL mode rewrites the header).
    migrate::usable_version(&conn, &migrate::AUDIT).map_err(|e| e.for_store(path))?;
    // SQLite silently opens a write-protected file read-only.
    if conn
        .is_readonly("main")
        .map_err(sqlite("checking write access"))?
    {
        return Err(StoreError::ReadOnly {
            path: path.to_path_buf(),
        });
    }
    // Only an empty file can choose its auto_vacuum mode without a full VACUUM; with
    // INCREMENTAL, retention can hand pruned pages back and the file shrinks.
    let objects: i64 = conn
        .query_row("SELECT count(*) FROM sqlite_schema", [], |row| row.get(0))
        .map_err(sqlite("reading the schema"))?;
    if objects == 0 {
        conn.pragma_update(None, "auto_vacuum", "INCREMENTAL")
            .map_err(sqlite("setting auto_vacuum"))?;
    }
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
        .map_err(sqlite("switching to WAL mode"))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::NoWal {
            path: path.to_path_buf(),
            mode,
        });
    }
    conn.pragma_update(None, "synchronous", options.synchronous.pragma())
        .map_err(sqlite("setting synchronous"))?;
    migrate::migrate(&mut conn, &migrate::AUDIT).map_err(|e| e.for_store(path))?;
    // A store made before the tree existed gets its leaves now, once; a large one
    // takes a while, so say how far it is.
    let mut last_shown = std::time::Instant::now();
    let added = tree::catch_up(&mut conn, |done, total| {
        if done == total || last_shown.elapsed() >= Duration::from_secs(2) {
            last_shown = std::time::Instant::now();
            tracing::info!(store = %path.display(), done, total, "building the audit store's Merkle tree over its existing rows");
        }
    })
    .map_err(|source| StoreError::Tree {
        path: path.to_path_buf(),
        source,
    })?;
    if added > 0 {
        tracing::info!(store = %path.display(), leaves = added, "the audit store's Merkle tree now covers every chained row");
    }
    Ok(conn)
}

/// Opens an existing audit store read-only, for queries. The schema must be the one
/// this binary knows (the writer migrates; readers never write).
pub fn open_reader(path: &Path, busy_timeout: Duration) -> Result<Connection, StoreError> {
    // Without this SQLite answers a missing file with its bare "unable to open".
    if !path.exists() {
        return Err(StoreError::Missing {
            path: path.to_path_buf(),
        });
    }
    let sqlite = |what| move |source| StoreError::from_open(path, what, source);
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(sqlite("opening for reading"))?;
    conn.busy_timeout(busy_timeout.min(MAX_BUSY_TIMEOUT))
        .map_err(sqlite("setting busy_timeout"))?;
    let found = migrate::usable_version(&conn, &migrate::AUDIT).map_err(|e| e.for_store(path))?;
    if found < migrate::LATEST {
        return Err(StoreError::TooOld {
            path: path.to_path_buf(),
            found,
            needed: migrate::LATEST,
        });
    }
    Ok(conn)
}

/// The columns of one `events` row, borrowing what it can from its event.
#[derive(Clone, Debug, PartialEq)]
pub struct EventRow<'a> {
    pub seq: u64,
    pub id: String,
    /// The envelope's timestamp; `None` when the envelope has none.
    pub timestamp: Option<String>,
    pub received_at: String,
    pub namespace: &'a str,
    pub topic: &'a str,
    /// `None` when the envelope carries no payload.
    pub type_url: Option<&'a str>,
    /// The raw `Any.value` bytes.
    pub payload: Option<&'a [u8]>,
    /// The decoded event as JSON (same shape as the file forwarder); `None` for types
    /// the registry does not know.
    pub event: Option<&'a str>,
    /// `publish`, `forward`, `upstream:<name>` or `eventgate`.
    pub source: Cow<'static, str>,
    /// `publisher_uid`, `publisher_gid`, `publisher_pid`, `publisher_subject`.
    pub publisher: Columns<'a>,
    /// `live`, `reconciled` or `repeat`.
    pub origin: &'static str,
    /// `daemon` or `reconcile` for a reconciled event; `None` for a live one.
    pub origin_clock: Option<&'static str>,
    /// What the container's record said: `pod_name` ... `labels`; all `None` for an
    /// event without a workload.
    pub workload: WorkloadColumns<'a>,
    /// The node the event was captured on; `None` when unknown.
    pub node: Option<&'a str>,
    /// The event's seq on its node's gateway, for an event taken in from another
    /// gateway; `None` for this gateway's own.
    pub node_seq: Option<i64>,
    /// `containerd`, `cri` or `docker` for a reconciled event: whose record it was
    /// reconstructed from; `None` for a live one.
    pub reconciled_from: Option<&'static str>,
    /// The manager's reason for the container's state at this event (the workload's
    /// `reason`); `None` unless set.
    pub reason: Option<&'a str>,
}

impl<'a> EventRow<'a> {
    pub fn from_event(event: &'a Event) -> Self {
        let Identity {
            id,
            received_at,
            source,
            publisher,
            origin,
            workload,
            node,
            node_seq,
            // Not a column of the SQLite store (its rows hash their own `source`);
            // the PostgreSQL writer keeps it beside these (`node_source`).
            node_source: _,
        } = &event.identity;
        let any = event.envelope.event.as_ref();
        Self {
            seq: event.seq,
            id: id.to_string(),
            timestamp: event.envelope.timestamp.as_ref().map(rfc3339_nanos),
            received_at: rfc3339_nanos(&prost_types::Timestamp::from(*received_at)),
            namespace: &event.envelope.namespace,
            topic: &event.envelope.topic,
            type_url: any.map(|a| a.type_url.as_str()),
            payload: any.map(|a| a.value.as_slice()),
            event: event.payload_json(),
            source: source.describe(),
            publisher: Publisher::columns(publisher.as_ref()),
            origin: origin.label(),
            origin_clock: origin.clock().map(Clock::label),
            workload: WorkloadColumns::of(workload.as_deref()),
            node: node.as_deref(),
            // Past i64 (never assigned in practice) it is left out rather than wrapped.
            node_seq: node_seq.and_then(|seq| i64::try_from(seq).ok()),
            reconciled_from: origin.witness().map(Witness::label),
            reason: workload.as_deref().and_then(|w| w.reason.as_deref()),
        }
    }
}

#[cfg(test)]
mod tests;
