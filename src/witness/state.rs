//! What a witness remembers, in SQLite (`<data_dir>/witness.db`): per origin the
//! latest checkpoint it cosigned, and the signed checkpoints it refused as forks.
//!
//! A witness's one promise is never to cosign a tree head that does not extend the
//! one it cosigned before, so the head is read, judged and replaced in one
//! IMMEDIATE transaction: two requests (or two processes on the same file) that
//! both start from the same recorded head are serialized, and the second is judged
//! against what the first wrote. The file is synced at every commit (WAL,
//! `synchronous = FULL`): the spec wants the head on disk before the cosignature
//! leaves.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use rusqlite::{Connection, ErrorCode, OpenFlags, OptionalExtension, TransactionBehavior};
use thiserror::Error;

use crate::store::migrate::{self, Migration, Schema, SchemaError};
use crate::tlog::Hash;

/// "EvWt": written into the database header by the first migration.
pub(crate) const APPLICATION_ID: i32 = 0x4576_5774;

/// The state file's name in the data directory.
pub(crate) const FILE_NAME: &str = "witness.db";

/// How many refused forks are kept per origin: the first ones. Only a holder of the
/// log's key can make one, but such a holder must not be able to fill the disk.
pub(crate) const MAX_FORKS_PER_ORIGIN: i64 = 100;

/// How long a transaction waits for another process's.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

const MIGRATIONS: &[Migration] = &[Migration {
    version: 1,
    name: "0001_witness.sql",
    sql: include_str!("../../migrations/witness/0001_witness.sql"),
}];

const SCHEMA: Schema = Schema {
    application_id: APPLICATION_ID,
    migrations: MIGRATIONS,
};

#[derive(Debug, Error)]
pub enum StateError {
    #[error("cannot create the witness's data directory {}", dir.display())]
    CreateDir {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} is not a SQLite database", path.display())]
    NotADatabase {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    #[error("witness state {}: {what}", path.display())]
    Sqlite {
        path: PathBuf,
        what: &'static str,
        #[source]
        source: rusqlite::Error,
    },
    #[error(
        "{} was written by a newer eventgate (witness state version {found}; this one knows up to {known})",
        path.display()
    )]
    TooNew {
        path: PathBuf,
        found: i64,
        known: i64,
    },
    #[error(
        "{} is a SQLite database of another application (application_id {application_id:#x}, {objects} schema objects), not an eventgate witness's state; choose another data_dir",
        path.display()
    )]
    Foreign {
        path: PathBuf,
        application_id: i32,
        objects: i64,
    },
    #[error("witness state {}: migration {name} failed", path.display())]
    Migration {
        path: PathBuf,
        name: &'static str,
        #[source]
        source: rusqlite::Error,
    },
    #[error(
        "witness state {}: SQLite kept journal_mode {mode:?} instead of WAL (the filesystem may not support WAL's shared memory)",
        path.display()
    )]
    NoWal { path: PathBuf, mode: String },
    #[error("witness state {}: the recorded head of {origin:?} is unreadable: {problem}", path.display())]
    Corrupt {
        path: PathBuf,
        origin: String,
        problem: String,
    },
}

/// The latest checkpoint cosigned for an origin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Head {
    pub size: u64,
    pub root: Hash,
    /// The signed checkpoint as the log sent it.
    pub note: String,
    /// The cosignature's time, Unix seconds.
    pub cosigned_at: u64,
}

/// What [`State::advance`] did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Advanced<E> {
    /// The new head replaced the recorded one.
    Recorded,
    /// The judgement refused it; nothing was written. `recorded` is what it was
    /// judged against.
    Refused { refusal: E, recorded: Option<Head> },
}

/// A refused checkpoint kept as evidence of a fork.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Fork<'a> {
    pub origin: &'a str,
    pub size: u64,
    pub root: &'a Hash,
    pub note: &'a str,
    pub old: u64,
    pub recorded: &'a Head,
    pub reason: &'a str,
    pub received_at: u64,
}

/// The witness's database. Blocking: call from blocking threads.
#[derive(Debug)]
pub(crate) struct State {
    conn: Mutex<Connection>,
    path: PathBuf,
}

impl State {
    /// Opens (creating it and its directory if needed) and migrates the state file.
    pub(crate) fn open(path: &Path) -> Result<State, StateError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            crate::fsmode::create_dir_all(dir).map_err(|source| StateError::CreateDir {
                dir: dir.to_path_buf(),
                source,
            })?;
        }
        // With the project's file mode before SQLite makes it; a failure is left for
        // SQLite to report when it opens the file.
        let _ = crate::fsmode::prepare_sqlite(path);
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let mut conn = Connection::open_with_flags(path, flags).map_err(sqlite(path, "opening"))?;
        conn.busy_timeout(BUSY_TIMEOUT)
            .map_err(sqlite(path, "setting busy_timeout"))?;
        // Judged before anything is written (WAL mode rewrites the header).
        migrate::usable_version(&conn, &SCHEMA).map_err(|e| schema_error(path, e))?;
        let mode: String = conn
            .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
            .map_err(sqlite(path, "switching to WAL mode"))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StateError::NoWal {
                path: path.to_path_buf(),
                mode,
            });
        }
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(sqlite(path, "setting synchronous"))?;
        migrate::migrate(&mut conn, &SCHEMA).map_err(|e| schema_error(path, e))?;
        Ok(State {
            conn: Mutex::new(conn),
            path: path.to_path_buf(),
        })
    }

    /// Whether [`State::open`] would refuse the file for its schema; read-only, and
    /// a missing file passes.
    pub(crate) fn check(path: &Path) -> Result<(), StateError> {
        migrate::check_file(path, &SCHEMA).map_err(|e| schema_error(path, e))
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    fn conn(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock left no transaction open (the guard's
        // transaction rolled back when it unwound): the connection is still good.
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The head recorded for `origin`.
    pub(crate) fn head(&self, origin: &str) -> Result<Option<Head>, StateError> {
        read_head(&self.conn(), &self.path, origin)
    }

    /// Every recorded origin and its size, by origin.
    pub(crate) fn sizes(&self) -> Result<Vec<(String, u64)>, StateError> {
        let conn = self.conn();
        let read = sqlite(&self.path, "reading the recorded heads");
        let mut statement = conn
            .prepare_cached("SELECT origin, size FROM heads ORDER BY origin")
            .map_err(&read)?;
        let rows = statement
            .query_map([], |row| {
                Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?))
            })
            .map_err(&read)?;
        let mut sizes = Vec::new();
        for row in rows {
            let (origin, size) = row.map_err(&read)?;
            let size = u64::try_from(size).map_err(|_| StateError::Corrupt {
                path: self.path.clone(),
                origin: origin.clone(),
                problem: format!("negative size {size}"),
            })?;
            sizes.push((origin, size));
        }
        Ok(sizes)
    }

    /// Compare-and-set: in one IMMEDIATE transaction, reads the head recorded for
    /// `origin`, asks `judge` about it, and when it agrees replaces it with `new`.
    pub(crate) fn advance<E>(
        &self,
        origin: &str,
        new: &Head,
        judge: impl FnOnce(Option<&Head>) -> Result<(), E>,
    ) -> Result<Advanced<E>, StateError> {
        let mut conn = self.conn();
        let path = &self.path;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sqlite(path, "locking the state to record a head"))?;
        let recorded = read_head(&tx, path, origin)?;
        if let Err(refusal) = judge(recorded.as_ref()) {
            // Dropped: rolled back, nothing was written.
            return Ok(Advanced::Refused { refusal, recorded });
        }
        let size = to_sql_size(path, origin, new.size)?;
        let time = to_sql_size(path, origin, new.cosigned_at)?;
        tx.execute(
            "INSERT INTO heads (origin, size, root, note, cosigned_at) VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (origin) DO UPDATE SET size = excluded.size, root = excluded.root,
                 note = excluded.note, cosigned_at = excluded.cosigned_at",
            rusqlite::params![origin, size, &new.root[..], new.note, time],
        )
        .map_err(sqlite(path, "recording the new head"))?;
        tx.commit()
            .map_err(sqlite(path, "committing the new head"))?;
        Ok(Advanced::Recorded)
    }

    /// Keeps a refused fork as evidence, unless the origin already has
    /// [`MAX_FORKS_PER_ORIGIN`]; returns whether it was kept.
    pub(crate) fn keep_fork(&self, fork: &Fork<'_>) -> Result<bool, StateError> {
        let path = &self.path;
        let mut conn = self.conn();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sqlite(path, "locking the state to keep a fork"))?;
        let kept: i64 = tx
            .query_row(
                "SELECT count(*) FROM forks WHERE origin = ?1",
                [fork.origin],
                |row| row.get(0),
            )
            .map_err(sqlite(path, "counting the forks kept"))?;
        if kept >= MAX_FORKS_PER_ORIGIN {
            return Ok(false);
        }
        let number = |n| to_sql_size(path, fork.origin, n);
        tx.execute(
            "INSERT INTO forks (origin, size, root, note, old, recorded_size, recorded_root,
                                reason, received_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            rusqlite::params![
                fork.origin,
                number(fork.size)?,
                &fork.root[..],
                fork.note,
                number(fork.old)?,
                number(fork.recorded.size)?,
                &fork.recorded.root[..],
                fork.reason,
                number(fork.received_at)?
            ],
        )
        .map_err(sqlite(path, "keeping a fork"))?;
        tx.commit().map_err(sqlite(path, "committing a fork"))?;
        Ok(true)
    }

    /// How many forks are kept for `origin`.
    #[cfg(test)]
    pub(crate) fn forks(&self, origin: &str) -> Result<u64, StateError> {
        let count: i64 = self
            .conn()
            .query_row(
                "SELECT count(*) FROM forks WHERE origin = ?1",
                [origin],
                |row| row.get(0),
            )
            .map_err(sqlite(&self.path, "counting the forks kept"))?;
        Ok(count.unsigned_abs())
    }
}

fn read_head(conn: &Connection, path: &Path, origin: &str) -> Result<Option<Head>, StateError> {
    let row = conn
        .query_row(
            "SELECT size, root, note, cosigned_at FROM heads WHERE origin = ?1",
            [origin],
            |row| {
                Ok((
                    row.get::<_, i64>(0)?,
                    row.get::<_, Vec<u8>>(1)?,
                    row.get::<_, String>(2)?,
                    row.get::<_, i64>(3)?,
                ))
            },
        )
        .optional()
        .map_err(sqlite(path, "reading the recorded head"))?;
    let Some((size, root, note, cosigned_at)) = row else {
        return Ok(None);
    };
    let corrupt = |problem: String| StateError::Corrupt {
        path: path.to_path_buf(),
        origin: origin.to_owned(),
        problem,
    };
    Ok(Some(Head {
        size: u64::try_from(size).map_err(|_| corrupt(format!("negative size {size}")))?,
        root: Hash::try_from(root.as_slice())
            .map_err(|_| corrupt(format!("a root of {} bytes", root.len())))?,
        note,
        cosigned_at: u64::try_from(cosigned_at)
            .map_err(|_| corrupt(format!("negative time {cosigned_at}")))?,
    }))
}

/// Sizes and times past SQLite's integers were refused when the request was
/// parsed; this keeps the conversion from being a cast all the same.
fn to_sql_size(path: &Path, origin: &str, n: u64) -> Result<i64, StateError> {
    i64::try_from(n).map_err(|_| StateError::Corrupt {
        path: path.to_path_buf(),
        origin: origin.to_owned(),
        problem: format!("{n} does not fit a SQLite integer"),
    })
}

fn sqlite(path: &Path, what: &'static str) -> impl Fn(rusqlite::Error) -> StateError {
    let path = path.to_path_buf();
    move |source| {
        if source.sqlite_error_code() == Some(ErrorCode::NotADatabase) {
            StateError::NotADatabase {
                path: path.clone(),
                source,
            }
        } else {
            StateError::Sqlite {
                path: path.clone(),
                what,
                source,
            }
        }
    }
}

fn schema_error(path: &Path, error: SchemaError) -> StateError {
    let path = path.to_path_buf();
    match error {
        SchemaError::Sqlite { what, source } => sqlite(&path, what)(source),
        SchemaError::TooNew { found, known } => StateError::TooNew { path, found, known },
        SchemaError::Foreign {
            application_id,
            objects,
        } => StateError::Foreign {
            path,
            application_id,
            objects,
        },
        SchemaError::Migration { name, source } => StateError::Migration { path, name, source },
    }
}

#[cfg(test)]
#[path = "state_tests.rs"]
mod tests;
