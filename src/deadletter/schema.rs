//! Opening the dead-letter database: the audit store's approach with its own
//! identity. `PRAGMA application_id` marks the file as eventgate's dead-letter store
//! (so neither store is ever written into the other's file), `PRAGMA user_version`
//! records the last migration from `migrations/deadletter/` applied.

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, ErrorCode, OpenFlags, TransactionBehavior};

use super::DeadLetterError;

/// "EvDl": written into the database header by the first migration.
pub const APPLICATION_ID: i32 = 0x4576_446c;

/// How long a statement waits for the other process (gateway or CLI) to finish.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

struct Migration {
    version: i64,
    name: &'static str,
    sql: &'static str,
}

const MIGRATIONS: &[Migration] = &[Migration {
    version: 1,
    name: "0001_dead_letters.sql",
    sql: include_str!("../../migrations/deadletter/0001_dead_letters.sql"),
}];

/// The schema version this binary writes and reads.
pub const LATEST: i64 = MIGRATIONS[MIGRATIONS.len() - 1].version;

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
pub fn open(path: &Path, create: bool) -> Result<Connection, DeadLetterError> {
    let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    if create {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| DeadLetterError::CreateDir {
                dir: dir.to_path_buf(),
                source,
            })?;
        }
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
    usable_version(&conn, path)?;
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
    migrate(&mut conn, path)?;
    Ok(conn)
}

/// Refuses a file that is not a dead-letter store, or is from a newer eventgate;
/// returns the current version (0: a new, empty file).
fn usable_version(conn: &Connection, path: &Path) -> Result<i64, DeadLetterError> {
    let read = sqlite(path, "reading the database header");
    let application_id: i32 = conn
        .pragma_query_value(None, "application_id", |row| row.get(0))
        .map_err(&read)?;
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .map_err(&read)?;
    let objects: i64 = conn
        .query_row("SELECT count(*) FROM sqlite_master", [], |row| row.get(0))
        .map_err(&read)?;
    match application_id {
        APPLICATION_ID if version > LATEST => Err(DeadLetterError::TooNew {
            path: path.to_path_buf(),
            found: version,
            known: LATEST,
        }),
        APPLICATION_ID => Ok(version),
        0 if version == 0 && objects == 0 => Ok(0),
        _ => Err(DeadLetterError::Foreign {
            path: path.to_path_buf(),
            application_id,
            objects,
        }),
    }
}

/// Brings the schema to [`LATEST`] in one IMMEDIATE transaction, so a gateway and a
/// CLI opening a new file together do not both create the table.
fn migrate(conn: &mut Connection, path: &Path) -> Result<(), DeadLetterError> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(sqlite(path, "locking the database to migrate"))?;
    let found = usable_version(&tx, path)?;
    if found == LATEST {
        return Ok(());
    }
    for migration in MIGRATIONS.iter().filter(|m| m.version > found) {
        tx.execute_batch(migration.sql)
            .map_err(|source| DeadLetterError::Migration {
                path: path.to_path_buf(),
                name: migration.name,
                source,
            })?;
    }
    let stamp = sqlite(path, "recording the schema version");
    tx.pragma_update(None, "application_id", APPLICATION_ID)
        .map_err(&stamp)?;
    tx.pragma_update(None, "user_version", LATEST)
        .map_err(&stamp)?;
    tx.commit()
        .map_err(sqlite(path, "committing the migration"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A migration file that is not in [`MIGRATIONS`] would silently never run.
    #[test]
    fn every_migration_file_is_listed_in_order() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations/deadletter");
        let mut files: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|name| name.ends_with(".sql"))
            .collect();
        files.sort();
        let listed: Vec<&str> = MIGRATIONS.iter().map(|m| m.name).collect();
        assert_eq!(files, listed);
        for (i, migration) in MIGRATIONS.iter().enumerate() {
            assert_eq!(migration.version, i as i64 + 1, "{}", migration.name);
        }
    }
}
