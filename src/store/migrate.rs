//! The audit store's schema versions. Each file in `migrations/` is compiled in and
//! applied once, in order; `PRAGMA user_version` records the last one applied and
//! `PRAGMA application_id` marks the file as eventgate's, so a database of another
//! application is never written into.

use std::path::Path;

use rusqlite::{Connection, TransactionBehavior};

use super::StoreError;

/// "EvGt": written into the database header by the first migration.
pub const APPLICATION_ID: i32 = 0x4576_4774;

pub struct Migration {
    pub version: i64,
    pub name: &'static str,
    pub sql: &'static str,
}

/// Every migration, in order; `version` is the file's number.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "0001_events.sql",
        sql: include_str!("../../migrations/0001_events.sql"),
    },
    Migration {
        version: 2,
        name: "0002_source.sql",
        sql: include_str!("../../migrations/0002_source.sql"),
    },
];

/// The schema version this binary writes and reads.
pub const LATEST: i64 = MIGRATIONS[MIGRATIONS.len() - 1].version;

/// What a database file holds, judged from its header and schema.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// A new or empty file: nothing in it yet.
    Empty,
    /// An audit store at this schema version.
    Ours(i64),
    /// Tables or an application id that are not eventgate's.
    Foreign { application_id: i32, objects: i64 },
}

/// Reads the header and schema without writing. A file that is not SQLite at all
/// fails here (SQLite reads the header lazily, on the first query).
pub fn identify(conn: &Connection, path: &Path) -> Result<State, StoreError> {
    let read = |source| StoreError::from_open(path, "reading the database header", source);
    let application_id: i32 = conn
        .pragma_query_value(None, "application_id", |row| row.get(0))
        .map_err(read)?;
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .map_err(read)?;
    let objects: i64 = conn
        .query_row("SELECT count(*) FROM sqlite_master", [], |row| row.get(0))
        .map_err(read)?;
    Ok(match application_id {
        APPLICATION_ID => State::Ours(version),
        0 if version == 0 && objects == 0 => State::Empty,
        _ => State::Foreign {
            application_id,
            objects,
        },
    })
}

/// Refuses what this binary must not touch; returns the current version (0: empty).
pub fn usable_version(state: State, path: &Path) -> Result<i64, StoreError> {
    match state {
        State::Empty => Ok(0),
        State::Ours(found) if found > LATEST => Err(StoreError::TooNew {
            path: path.to_path_buf(),
            found,
            known: LATEST,
        }),
        State::Ours(found) => Ok(found),
        State::Foreign {
            application_id,
            objects,
        } => Err(StoreError::Foreign {
            path: path.to_path_buf(),
            application_id,
            objects,
        }),
    }
}

/// Brings the schema to [`LATEST`] in one IMMEDIATE transaction: another process
/// opening the same file at the same time waits, then finds the work done. A failed
/// migration leaves the file as it was. Returns the version found before.
pub fn migrate(conn: &mut Connection, path: &Path) -> Result<i64, StoreError> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|source| StoreError::from_open(path, "locking the database to migrate", source))?;
    let found = usable_version(identify(&tx, path)?, path)?;
    if found == LATEST {
        return Ok(found);
    }
    for migration in MIGRATIONS.iter().filter(|m| m.version > found) {
        tx.execute_batch(migration.sql)
            .map_err(|source| StoreError::Migration {
                path: path.to_path_buf(),
                name: migration.name,
                source,
            })?;
    }
    let stamp = |source| StoreError::from_open(path, "recording the schema version", source);
    tx.pragma_update(None, "application_id", APPLICATION_ID)
        .map_err(stamp)?;
    tx.pragma_update(None, "user_version", LATEST)
        .map_err(stamp)?;
    tx.commit()
        .map_err(|source| StoreError::from_open(path, "committing the migration", source))?;
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A migration file that is not in [`MIGRATIONS`] would silently never run.
    #[test]
    fn every_migration_file_is_listed_in_order() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
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
            assert!(
                migration
                    .name
                    .starts_with(&format!("{:04}_", migration.version)),
                "{} does not start with its version",
                migration.name
            );
        }
    }
}
