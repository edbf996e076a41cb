//! The PostgreSQL store's schema: `migrations/postgres/`, applied in order in one
//! transaction when a writer connects, the version kept in `eventgate_schema`. Several
//! gateways may start at once against one database: an advisory lock makes one of
//! them migrate while the others wait and then find the schema current.

use tokio_postgres::Client;

use super::PostgresError;

/// Every migration, in order; its number is its position + 1.
pub(crate) const MIGRATIONS: &[(&str, &str)] = &[
    (
        "0001_events.sql",
        include_str!("../../migrations/postgres/0001_events.sql"),
    ),
    (
        "0002_node_source.sql",
        include_str!("../../migrations/postgres/0002_node_source.sql"),
    ),
];

/// The version this binary writes and reads.
pub(crate) const LATEST: i32 = MIGRATIONS.len() as i32;

/// The advisory lock key of schema changes (and partition creation): "EvGt" as a
/// number, eventgate's SQLite `application_id` too.
pub(crate) const LOCK: i64 = 0x4576_4774;

/// Brings the schema to [`LATEST`]; refuses a database whose schema is newer, or
/// whose tables are another application's.
pub(crate) async fn migrate(client: &mut Client) -> Result<i32, PostgresError> {
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&LOCK])
        .await?;
    // Looked up first: CREATE TABLE IF NOT EXISTS would send a NOTICE at every
    // connection.
    let exists: bool = tx
        .query_one("SELECT to_regclass('eventgate_schema') IS NOT NULL", &[])
        .await?
        .get(0);
    if !exists {
        tx.batch_execute(
            "CREATE TABLE eventgate_schema (
             id         integer PRIMARY KEY CHECK (id = 1),
             version    integer NOT NULL,
             store_id   uuid NOT NULL,
             created_at timestamptz NOT NULL DEFAULT now()
         )",
        )
        .await?;
    }
    let found: Option<i32> = tx
        .query_opt("SELECT version FROM eventgate_schema WHERE id = 1", &[])
        .await?
        .map(|row| row.get(0));
    let found = match found {
        Some(version) => version,
        None => {
            // A database holding an `events` table eventgate did not make.
            let foreign: bool = tx
                .query_one("SELECT to_regclass('events') IS NOT NULL", &[])
                .await?
                .get(0);
            if foreign {
                return Err(PostgresError::Foreign);
            }
            tx.execute(
                "INSERT INTO eventgate_schema (id, version, store_id) VALUES (1, 0, $1)",
                &[&uuid::Uuid::now_v7()],
            )
            .await?;
            0
        }
    };
    if found > LATEST {
        return Err(PostgresError::TooNew {
            found,
            known: LATEST,
        });
    }
    for (number, (name, sql)) in MIGRATIONS.iter().enumerate().skip(found.max(0) as usize) {
        tx.batch_execute(sql)
            .await
            .map_err(|source| PostgresError::Migration { name, source })?;
        let version = number as i32 + 1;
        tx.execute(
            "UPDATE eventgate_schema SET version = $1 WHERE id = 1",
            &[&version],
        )
        .await?;
    }
    tx.commit().await?;
    if found < LATEST {
        tracing::info!(from = found, to = LATEST, "postgres store schema migrated");
    }
    Ok(found)
}

/// The schema version a reader finds; a reader never migrates, and refuses a
/// version it does not know.
pub(crate) async fn check(client: &Client) -> Result<(), PostgresError> {
    let found: Option<i32> = client
        .query_opt(
            "SELECT version FROM eventgate_schema WHERE id = 1 AND to_regclass('eventgate_schema') IS NOT NULL",
            &[],
        )
        .await
        .map_err(|error| match error.code() {
            Some(&tokio_postgres::error::SqlState::UNDEFINED_TABLE) => PostgresError::Empty,
            _ => PostgresError::Query(error),
        })?
        .map(|row| row.get(0));
    match found {
        None => Err(PostgresError::Empty),
        Some(found) if found > LATEST => Err(PostgresError::TooNew {
            found,
            known: LATEST,
        }),
        Some(found) if found < LATEST => Err(PostgresError::TooOld {
            found,
            needed: LATEST,
        }),
        Some(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_migration_file_is_listed_in_order() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations/postgres");
        let mut files: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.ends_with(".sql"))
            .collect();
        files.sort();
        let listed: Vec<&str> = super::MIGRATIONS.iter().map(|(name, _)| *name).collect();
        assert_eq!(files, listed);
        for (i, name) in listed.iter().enumerate() {
            assert!(name.starts_with(&format!("{:04}_", i + 1)), "{name}");
        }
    }
}
