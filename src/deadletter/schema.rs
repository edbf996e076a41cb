//! Opening the dead-letter database: the audit store's approach with its own
//! identity. `PRAGMA application_id` marks the file as eventgate's dead-letter store
//! (so neither store is ever written into the other's file), `PRAGMA user_version`
//! records the last migration from `migrations/deadletter/` applied.

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, ErrorCode, OpenFlags};

use super::DeadLetterError;
use crate::store::migrate::{self, Migration, Schema, SchemaError};

/// "EvDl": written into the database header by the first migration.
pub(crate) const APPLICATION_ID: i32 = 0x4576_446c;

/// How long a statement waits for the other process (gateway or CLI) to finish.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "0001_dead_letters.sql",
        sql: include_str!("../../migrations/deadletter/0001_dead_letters.sql"),
    },
    Migration {
        version: 2,
        name: "0002_crash_reasons.sql",
        sql: include_str!("../../migrations/deadletter/0002_crash_reasons.sql"),
    },
    Migration {
        version: 3,
        name: "0003_publisher.sql",
        sql: include_str!("../../migrations/deadletter/0003_publisher.sql"),
    },
    Migration {
        version: 4,
        name: "0004_origin.sql",
        sql: include_str!("../../migrations/deadletter/0004_origin.sql"),
    },
    Migration {
        version: 5,
        name: "0005_workload.sql",
        sql: include_str!("../../migrations/deadletter/0005_workload.sql"),
    },
    Migration {
        version: 6,
        name: "0006_node.sql",
        sql: include_str!("../../migrations/deadletter/0006_node.sql"),
    },
    Migration {
        version: 7,
        name: "0007_node_seq.sql",
        sql: include_str!("../../migrations/deadletter/0007_node_seq.sql"),
    },
    Migration {
        version: 8,
        name: "0008_reconciled_from.sql",
        sql: include_str!("../../migrations/deadletter/0008_reconciled_from.sql"),
    },
    Migration {
        version: 9,
        name: "0009_node_source.sql",
        sql: include_str!("../../migrations/deadletter/0009_node_source.sql"),
    },
];

const SCHEMA: Schema = Schema {
    application_id: APPLICATION_ID,
    migrations: MIGRATIONS,
};

/// The schema version this binary writes and reads.
pub const LATEST: i64 = SCHEMA.latest();

fn sqlite(path: &Path, what: &'static str) -> impl Fn(rusqlite::Error) -> DeadLetterError {
    let path = path.to_path_buf();
    move |source| {
        if source.sqlite_error_code() == Some(ErrorCode::NotADatabase) {
            DeadLetterError::NotADatabase {
                path: path.clone(),
                source,
            }
        } else {
            DeadLetterError::Sqlite {
                path: path.clone(),
                what,
                source,
            }
        }
    }
}

/// Opens the store read-write in WAL mode (so the CLI and a running gateway can use
/// it at the same time) and applies pending migrations. With `create`, a missing
/// file and its directory are created; without, a missing file is
/// [`DeadLetterError::Missing`]. Blocking.
pub(super) fn open(path: &Path, create: bool) -> Result<Connection, DeadLetterError> {
    let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    if create {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            crate::fsmode::create_dir_all(dir).map_err(|source| DeadLetterError::CreateDir {
                dir: dir.to_path_buf(),
                source,
            })?;
        }
        // With the rule's mode before SQLite makes it (its -wal and -shm follow it).
        // A failure is left for SQLite to report when it opens the file.
        let _ = crate::fsmode::prepare_sqlite(path);
        flags |= OpenFlags::SQLITE_OPEN_CREATE;
    } else if !path.exists() {
        return Err(DeadLetterError::Missing {
            path: path.to_path_buf(),
        });
    }
    let mut conn = Connection::open_with_flags(path, flags).map_err(sqlite(path, "opening"))?;
    conn.busy_timeout(BUSY_TIMEOUT)
        .map_err(sqlite(path, "setting busy_timeout"))?;
    // Judge the file before changing anything in it (WAL mode rewrites the header).
    migrate::usable_version(&conn, &SCHEMA).map_err(|e| schema_error(path, e))?;
    if conn
        .is_readonly("main")
        .map_err(sqlite(path, "checking write access"))?
    {
        return Err(DeadLetterError::ReadOnly {
            path: path.to_path_buf(),
        });
    }
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
        .map_err(sqlite(path, "switching to WAL mode"))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(DeadLetterError::NoWal {
            path: path.to_path_buf(),
            mode,
        });
    }
    // Dead letters are rare and each one matters more than the write's latency.
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(sqlite(path, "setting synchronous"))?;
    migrate::migrate(&mut conn, &SCHEMA).map_err(|e| schema_error(path, e))?;
    Ok(conn)
}

/// Whether [`open`] would refuse the file at `path` for its schema (newer, or not
/// a dead-letter store); read-only, and a missing file passes.
pub(crate) fn check(path: &Path) -> Result<(), DeadLetterError> {
    migrate::check_file(path, &SCHEMA).map_err(|e| schema_error(path, e))
}

fn schema_error(path: &Path, error: SchemaError) -> DeadLetterError {
    let path = path.to_path_buf();
    match error {
        SchemaError::Sqlite { what, source } => sqlite(&path, what)(source),
        SchemaError::TooNew { found, known } => DeadLetterError::TooNew { path, found, known },
        SchemaError::Foreign {
            application_id,
            objects,
        } => DeadLetterError::Foreign {
            path,
            application_id,
            objects,
        },
        SchemaError::Migration { name, source } => {
            DeadLetterError::Migration { path, name, source }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_migration_file_is_listed_in_order() {
        migrate::assert_files_listed(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations/deadletter"),
            MIGRATIONS,
        );
    }
}
