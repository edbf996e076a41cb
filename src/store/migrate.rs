//! Versioned schemas of eventgate's SQLite files (the audit store here, the
//! dead-letter store in `deadletter`). Each migration file is compiled in and applied
//! once, in order; `PRAGMA user_version` records the last one applied and `PRAGMA
//! application_id` says whose file it is, so a database of another application (or
//! eventgate's other store) is never written into.

use std::path::Path;

use rusqlite::{Connection, TransactionBehavior};

use super::StoreError;

/// "EvGt": written into the audit store's header by the first migration.
pub const APPLICATION_ID: i32 = 0x4576_4774;

pub struct Migration {
    pub version: i64,
    pub name: &'static str,
    pub sql: &'static str,
}

/// Every audit store migration, in order; `version` is the file's number.
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
    Migration {
        version: 3,
        name: "0003_chain.sql",
        sql: include_str!("../../migrations/0003_chain.sql"),
    },
    Migration {
        version: 4,
        name: "0004_order_indexes.sql",
        sql: include_str!("../../migrations/0004_order_indexes.sql"),
    },
    Migration {
        version: 5,
        name: "0005_publisher.sql",
        sql: include_str!("../../migrations/0005_publisher.sql"),
    },
    Migration {
        version: 6,
        name: "0006_origin.sql",
        sql: include_str!("../../migrations/0006_origin.sql"),
    },
    Migration {
        version: 7,
        name: "0007_checkpoints.sql",
        sql: include_str!("../../migrations/0007_checkpoints.sql"),
    },
    Migration {
        version: 8,
        name: "0008_workload.sql",
        sql: include_str!("../../migrations/0008_workload.sql"),
    },
    Migration {
        version: 9,
        name: "0009_seq_index.sql",
        sql: include_str!("../../migrations/0009_seq_index.sql"),
    },
    Migration {
        version: 10,
        name: "0010_node.sql",
        sql: include_str!("../../migrations/0010_node.sql"),
    },
    Migration {
        version: 11,
        name: "0011_node_seq.sql",
        sql: include_str!("../../migrations/0011_node_seq.sql"),
    },
    Migration {
        version: 12,
        name: "0012_reconciled_from.sql",
        sql: include_str!("../../migrations/0012_reconciled_from.sql"),
    },
    Migration {
        version: 13,
        name: "0013_store_id.sql",
        sql: include_str!("../../migrations/0013_store_id.sql"),
    },
    Migration {
        version: 14,
        name: "0014_tree.sql",
        sql: include_str!("../../migrations/0014_tree.sql"),
    },
];

/// The audit store schema version this binary writes and reads.
pub const LATEST: i64 = AUDIT.latest();

/// The audit store's schema.
pub(crate) const AUDIT: Schema = Schema {
    application_id: APPLICATION_ID,
    migrations: MIGRATIONS,
};

/// One kind of eventgate SQLite file: its header mark and its migrations.
pub(crate) struct Schema {
    pub application_id: i32,
    pub migrations: &'static [Migration],
}

impl Schema {
    pub(crate) const fn latest(&self) -> i64 {
        self.migrations[self.migrations.len() - 1].version
    }
}

/// What a database file holds, judged from its header and schema.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum State {
    /// A new or empty file: nothing in it yet.
    Empty,
    /// A file of this schema at this version.
    Ours(i64),
    /// Tables or an application id that are not this schema's.
    Foreign { application_id: i32, objects: i64 },
}

/// Why a file cannot be used or brought up to date; each store turns it into its
/// own error, with the path.
#[derive(Debug)]
pub(crate) enum SchemaError {
    Sqlite {
        what: &'static str,
        source: rusqlite::Error,
    },
    TooNew {
        found: i64,
        known: i64,
    },
    Foreign {
        application_id: i32,
        objects: i64,
    },
    Migration {
        name: &'static str,
        source: rusqlite::Error,
    },
}

impl SchemaError {
    /// The audit store's error for this, naming `path`.
    pub(crate) fn for_store(self, path: &Path) -> StoreError {
        let path = path.to_path_buf();
        match self {
            SchemaError::Sqlite { what, source } => StoreError::from_open(&path, what, source),
            SchemaError::TooNew { found, known } => StoreError::TooNew { path, found, known },
            SchemaError::Foreign {
                application_id,
                objects,
            } => StoreError::Foreign {
                path,
                application_id,
                objects,
            },
            SchemaError::Migration { name, source } => StoreError::Migration { path, name, source },
        }
    }
}

fn sqlite(what: &'static str) -> impl Fn(rusqlite::Error) -> SchemaError {
    move |source| SchemaError::Sqlite { what, source }
}

/// Reads the header and schema without writing. A file that is not SQLite at all
/// fails here (SQLite reads the header lazily, on the first query).
pub(crate) fn identify(conn: &Connection, schema: &Schema) -> Result<State, SchemaError> {
    let read = sqlite("reading the database header");
    let application_id: i32 = conn
        .pragma_query_value(None, "application_id", |row| row.get(0))
        .map_err(&read)?;
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .map_err(&read)?;
    let objects: i64 = conn
        .query_row("SELECT count(*) FROM sqlite_master", [], |row| row.get(0))
        .map_err(&read)?;
    Ok(match application_id {
        id if id == schema.application_id => State::Ours(version),
        0 if version == 0 && objects == 0 => State::Empty,
        _ => State::Foreign {
            application_id,
            objects,
        },
    })
}

/// Refuses what this binary must not touch; returns the current version (0: empty).
pub(crate) fn usable_version(conn: &Connection, schema: &Schema) -> Result<i64, SchemaError> {
    match identify(conn, schema)? {
        State::Empty => Ok(0),
        State::Ours(found) if found > schema.latest() => Err(SchemaError::TooNew {
            found,
            known: schema.latest(),
        }),
        State::Ours(found) => Ok(found),
        State::Foreign {
            application_id,
            objects,
        } => Err(SchemaError::Foreign {
            application_id,
            objects,
        }),
    }
}

/// What `check-config` asks: would opening `path` be refused ([`usable_version`])?
/// Opens read-only and changes nothing; a missing file is fine (it is created).
pub(crate) fn check_file(path: &Path, schema: &Schema) -> Result<(), SchemaError> {
    if !path.exists() {
        return Ok(());
    }
    let flags =
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(sqlite("opening for reading"))?;
    usable_version(&conn, schema).map(drop)
}

/// Brings the schema to its latest version in one IMMEDIATE transaction: another
/// process opening the same file at the same time waits, then finds the work done. A
/// failed migration leaves the file as it was. Returns the version found before.
pub(crate) fn migrate(conn: &mut Connection, schema: &Schema) -> Result<i64, SchemaError> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(sqlite("locking the database to migrate"))?;
    let found = usable_version(&tx, schema)?;
    let latest = schema.latest();
    if found == latest {
        return Ok(found);
    }
    for migration in schema.migrations.iter().filter(|m| m.version > found) {
        tx.execute_batch(migration.sql)
            .map_err(|source| SchemaError::Migration {
                name: migration.name,
                source,
            })?;
    }
    let stamp = sqlite("recording the schema version");
    tx.pragma_update(None, "application_id", schema.application_id)
        .map_err(&stamp)?;
    tx.pragma_update(None, "user_version", latest)
        .map_err(&stamp)?;
    tx.commit().map_err(sqlite("committing the migration"))?;
    Ok(found)
}

/// Test check shared by every schema: each `.sql` file in `dir` is listed in
/// `migrations`, in order, numbered by its name (an unlisted file would silently
/// never run).
#[cfg(test)]
pub(crate) fn assert_files_listed(dir: &Path, migrations: &[Migration]) {
    let mut files: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.ends_with(".sql"))
        .collect();
    files.sort();
    let listed: Vec<&str> = migrations.iter().map(|m| m.name).collect();
    assert_eq!(files, listed);
    for (i, migration) in migrations.iter().enumerate() {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_migration_file_is_listed_in_order() {
        assert_files_listed(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations"),
            MIGRATIONS,
        );
    }
}
