//! A PostgreSQL audit store: the connection settings ([`ConnectOptions`]), the
//! schema (`migrations/postgres/`, [`migrate`]), time partitions, the batch writer the
//! `postgres` forwarder runs ([`write`]) and the Kafka offsets kept with the rows
//! ([`offsets`]). Readers (`query`, `stats`, `timeline`, `/ui`) connect with the same
//! settings.

pub(crate) mod connect;
pub(crate) mod migrate;
pub(crate) mod offsets;
pub(crate) mod partitions;
pub(crate) mod verify;
pub(crate) mod write;

use std::time::Duration;

use thiserror::Error;
use tokio_postgres::error::SqlState;

pub(crate) use connect::{ConnectOptions, Target};
pub(crate) use partitions::Period;

#[derive(Debug, Error)]
pub(crate) enum PostgresError {
    #[error("{0}")]
    Config(String),
    #[error("cannot read the PostgreSQL password from {what}")]
    Password {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot connect to {target}: {}", describe(source))]
    Connect {
        target: String,
        #[source]
        source: tokio_postgres::Error,
    },
    #[error("cannot connect to {target}: no answer within {timeout:?} (connect_timeout)")]
    ConnectTimeout { target: String, timeout: Duration },
    #[error(
        "the database's eventgate schema is version {found}, newer than this eventgate knows \
         ({known}): upgrade eventgate"
    )]
    TooNew { found: i32, known: i32 },
    #[error(
        "the database's eventgate schema is version {found}, older than this eventgate reads \
         ({needed}): start the gateway that writes it (it migrates) first"
    )]
    TooOld { found: i32, needed: i32 },
    #[error(
        "the database has no eventgate store (no eventgate_schema table): is this the right database?"
    )]
    Empty,
    #[error(
        "the database has an `events` table that eventgate did not make: use a database (or \
         schema, through the URL's `options=-csearch_path=...`) of eventgate's own"
    )]
    Foreign,
    #[error("migration {name} failed: {}", describe(source))]
    Migration {
        name: &'static str,
        #[source]
        source: tokio_postgres::Error,
    },
    #[error("{}", describe(.0))]
    Query(#[from] tokio_postgres::Error),
}

/// A server error with its SQLSTATE and, where the server gave them, its detail and
/// hint: "ERROR 28P01: password authentication failed for user ..." says what to fix;
/// tokio-postgres's own Display says only "db error".
pub(crate) fn describe(error: &tokio_postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => {
            let mut text = format!("{} {}: {}", db.severity(), db.code().code(), db.message());
            if let Some(detail) = db.detail() {
                text.push_str(&format!(" ({detail})"));
            }
            if let Some(hint) = db.hint() {
                text.push_str(&format!("; hint: {hint}"));
            }
            text
        }
        None => {
            // "error connecting to server: Connection refused (os error 111)" and the
            // like: the source chain holds the cause.
            let mut text = error.to_string();
            let mut source = std::error::Error::source(error);
            while let Some(cause) = source {
                text.push_str(&format!(": {cause}"));
                source = cause.source();
            }
            text
        }
    }
}

impl PostgresError {
    /// Whether the same batch may succeed later. Only the rows themselves (a value
    /// PostgreSQL refuses, a row too large) are permanent; the server being down,
    /// full, restarting, refusing the login or holding another schema are
    /// conditions an operator fixes, and the events wait for it.
    pub(crate) fn is_retryable(&self) -> bool {
        match self {
            PostgresError::Query(error) => match error.code() {
                Some(code) => !permanent(code),
                None => true,
            },
            _ => true,
        }
    }

    /// The SQLSTATE, for logs.
    pub(crate) fn code(&self) -> Option<&str> {
        match self {
            PostgresError::Query(error)
            | PostgresError::Connect { source: error, .. }
            | PostgresError::Migration { source: error, .. } => error.code().map(SqlState::code),
            _ => None,
        }
    }
}

/// Classes 22 (data exception: bad encoding, a value out of range) and 54 (program
/// limit exceeded: a row or value too large), and integrity violations (23) other
/// than the key conflict the insert already absorbs and a row with no partition.
fn permanent(code: &SqlState) -> bool {
    // "No partition of relation events found for row": a partition dropped by
    // retention after this writer made it; made again at the next attempt.
    if *code == SqlState::CHECK_VIOLATION {
        return false;
    }
    let text = code.code();
    text.starts_with("22") || text.starts_with("23") || text.starts_with("54")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_rows_own_faults_are_permanent() {
        for (code, expected) in [
            (SqlState::CHARACTER_NOT_IN_REPERTOIRE, true),
            (SqlState::UNTRANSLATABLE_CHARACTER, true),
            (SqlState::PROGRAM_LIMIT_EXCEEDED, true),
            (SqlState::NOT_NULL_VIOLATION, true),
            (SqlState::CHECK_VIOLATION, false),
            (SqlState::DISK_FULL, false),
            (SqlState::ADMIN_SHUTDOWN, false),
            (SqlState::INVALID_PASSWORD, false),
            (SqlState::T_R_DEADLOCK_DETECTED, false),
            (SqlState::UNDEFINED_COLUMN, false),
        ] {
            assert_eq!(permanent(&code), expected, "{}", code.code());
        }
    }
}
