//! The `sqlite` forwarder: every event as one row of the audit store
//! ([`crate::store`]), one transaction per batch.
//!
//! Batches commit with the configured `synchronous` (`normal`: no sync per commit in
//! WAL mode); the pipeline's checkpoints make them durable with one commit under
//! `synchronous = FULL` (see `migrations/0007_checkpoints.sql`).
//!
//! Exactly one writer: the forwarder owns the only write connection behind a mutex
//! and runs each batch on the blocking pool. The pipeline sends one batch at a time;
//! the mutex matters when an attempt timed out but is still running: the retry waits
//! for it, then finds its rows already stored (ids are unique, re-inserts are no-ops).

mod classify;
pub(crate) mod metric_table;
mod retention;

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use rusqlite::Connection;
use serde::Deserialize;

use super::{Batch, BuildError, Context, ForwardError, Forwarder, Kind, Options, parse_options};
use crate::store::{self, EventRow, Synchronous, WriterOptions};
use crate::units::duration_text;
pub(crate) use classify::classify;
use retention::{Pruner, RetentionOptions};

/// `[[forwarder]] kind = "sqlite"` keys.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SqliteOptions {
    /// Relative paths are under the data directory.
    #[serde(default = "default_path")]
    path: PathBuf,
    #[serde(default)]
    synchronous: Synchronous,
    #[serde(default = "default_busy_timeout", with = "duration_text")]
    busy_timeout: Duration,
    /// No table: keep every row.
    #[serde(default)]
    retention: Option<RetentionOptions>,
}

fn default_path() -> PathBuf {
    PathBuf::from("audit.db")
}

fn default_busy_timeout() -> Duration {
    WriterOptions::default().busy_timeout
}

impl SqliteOptions {
    fn parse(options: &Options) -> Result<Self, BuildError> {
        let parsed: Self = parse_options(options)?;
        if parsed.path.as_os_str().is_empty() {
            return Err(BuildError::Options("`path` must not be empty".into()));
        }
        if parsed.busy_timeout > store::MAX_BUSY_TIMEOUT {
            return Err(BuildError::Options(format!(
                "`busy_timeout` must be at most {}",
                humantime::format_duration(store::MAX_BUSY_TIMEOUT)
            )));
        }
        if let Some(retention) = &parsed.retention {
            retention.validate()?;
        }
        Ok(parsed)
    }
}

/// The retention policy a `sqlite` forwarder's options set (`None`: keep every row),
/// as its signed checkpoints state it.
pub(crate) fn retention_policy(
    options: &Options,
) -> Result<Option<store::retention::Policy>, BuildError> {
    SqliteOptions::parse(options)?
        .retention
        .map(|r| r.validate())
        .transpose()
}

pub(crate) struct SqliteKind;

impl Kind for SqliteKind {
    fn check(&self, options: &Options) -> Result<(), BuildError> {
        SqliteOptions::parse(options).map(drop)
    }

    fn build<'a>(
        &'a self,
        context: &'a Context,
        options: &'a Options,
    ) -> BoxFuture<'a, Result<Arc<dyn Forwarder>, BuildError>> {
        Box::pin(async move {
            let options = SqliteOptions::parse(options)?;
            let path = context.resolve(&options.path);
            let writer = WriterOptions {
                synchronous: options.synchronous,
                busy_timeout: options.busy_timeout,
            };
            let mut forwarder = SqliteForwarder::open(&context.name, path, writer).await?;
            if let Some(retention) = &options.retention {
                forwarder.keep(retention)?;
            }
            Ok(Arc::new(forwarder) as Arc<dyn Forwarder>)
        })
    }

    fn default_batch_events(&self) -> usize {
        1000
    }
}

/// The audit store's writer.
pub struct SqliteForwarder {
    name: Arc<str>,
    path: Arc<PathBuf>,
    /// `None` once closed.
    conn: Arc<Mutex<Option<Connection>>>,
    /// Taken when closing.
    pruner: Mutex<Option<Pruner>>,
    synchronous: Synchronous,
}

impl SqliteForwarder {
    /// Opens (creating and migrating) the database at `path`.
    pub async fn open(
        name: &str,
        path: PathBuf,
        options: WriterOptions,
    ) -> Result<Self, BuildError> {
        let opened = {
            let path = path.clone();
            tokio::task::spawn_blocking(move || store::open_writer(&path, &options)).await
        };
        let conn = match opened {
            Ok(Ok(conn)) => conn,
            Ok(Err(error)) => {
                return Err(BuildError::start("cannot open the audit store", error));
            }
            Err(join) => return Err(BuildError::start("opening the audit store failed", join)),
        };
        tracing::info!(
            forwarder = name,
            path = %path.display(),
            schema_version = store::migrate::LATEST,
            synchronous = ?options.synchronous,
            busy_timeout = ?options.busy_timeout,
            "audit store open"
        );
        Ok(Self {
            name: name.into(),
            path: Arc::new(path),
            conn: Arc::new(Mutex::new(Some(conn))),
            pruner: Mutex::new(None),
            synchronous: options.synchronous,
        })
    }

    /// Starts pruning the store in the background as `options` says.
    fn keep(&mut self, options: &RetentionOptions) -> Result<(), BuildError> {
        let policy = options.validate()?;
        let shrinks = {
            let guard = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
            guard.as_ref().map(store::retention::shrinks)
        };
        if let Some(Ok(false)) = shrinks {
            tracing::warn!(
                forwarder = %self.name,
                path = %self.path.display(),
                "this audit store was created without incremental auto-vacuum: pruned space is \
                 reused, but the file will not shrink; to switch, stop eventgate and run \
                 sqlite3 <path> 'PRAGMA auto_vacuum = INCREMENTAL; VACUUM;'"
            );
        }
        tracing::info!(
            forwarder = %self.name,
            max_age = ?options.max_age,
            max_rows = options.max_rows,
            interval = ?options.interval,
            batch = options.batch,
            "audit store retention on"
        );
        let pruner = Pruner::start(
            Arc::clone(&self.name),
            Arc::clone(&self.path),
            Arc::clone(&self.conn),
            options,
            policy,
        );
        *self.pruner.lock().unwrap_or_else(PoisonError::into_inner) = Some(pruner);
        Ok(())
    }
}

impl Forwarder for SqliteForwarder {
    fn send<'a>(&'a self, batch: &'a Batch) -> BoxFuture<'a, Result<(), ForwardError>> {
        let batch = batch.clone();
        let conn = Arc::clone(&self.conn);
        let name = Arc::clone(&self.name);
        Box::pin(async move {
            tokio::task::spawn_blocking(move || write_batch(&name, &conn, &batch))
                .await
                .unwrap_or_else(|join| {
                    Err(
                        ForwardError::retryable("the audit store writer task failed")
                            .with_source(join),
                    )
                })
        })
    }

    fn checkpoint(&self, next: u64) -> BoxFuture<'_, Result<(), ForwardError>> {
        let conn = Arc::clone(&self.conn);
        let name = Arc::clone(&self.name);
        let synchronous = self.synchronous;
        Box::pin(async move {
            tokio::task::spawn_blocking(move || checkpoint(&name, &conn, next, synchronous))
                .await
                .unwrap_or_else(|join| {
                    Err(
                        ForwardError::retryable("the audit store checkpoint task failed")
                            .with_source(join),
                    )
                })
        })
    }

    fn close(&self) -> BoxFuture<'_, Result<(), ForwardError>> {
        let pruner = self
            .pruner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let conn = Arc::clone(&self.conn);
        let name = Arc::clone(&self.name);
        let path = Arc::clone(&self.path);
        Box::pin(async move {
            if let Some(pruner) = pruner {
                pruner.stop().await;
            }
            let closed = tokio::task::spawn_blocking(move || {
                let taken = conn.lock().unwrap_or_else(PoisonError::into_inner).take();
                // Closing the last connection checkpoints the WAL into the database.
                taken.map_or(Ok(()), |c| c.close().map_err(|(_, e)| e))
            })
            .await;
            match closed {
                Ok(Ok(())) => {
                    tracing::info!(forwarder = %name, path = %path.display(), "audit store closed");
                    Ok(())
                }
                Ok(Err(error)) => Err(ForwardError::retryable(format!(
                    "closing the audit store {}: {error}",
                    path.display()
                ))
                .with_source(error)),
                Err(join) => {
                    Err(ForwardError::retryable("closing the audit store failed").with_source(join))
                }
            }
        })
    }
}

/// The open write connection, with no transaction left over. A transaction is only
/// left open if a rollback itself failed; without this every later BEGIN would fail
/// and the forwarder would never recover.
fn writable<'a>(
    name: &str,
    conn: &'a mut Option<Connection>,
) -> Result<&'a mut Connection, ForwardError> {
    let conn = conn
        .as_mut()
        .ok_or_else(|| ForwardError::permanent("the audit store is closed"))?;
    if !conn.is_autocommit()
        && let Err(error) = conn.execute_batch("ROLLBACK")
    {
        tracing::warn!(forwarder = name, %error, "rolling back a leftover transaction failed");
    }
    Ok(conn)
}

/// Records `next` in a commit that syncs the write-ahead log, and with it every commit
/// before. Blocking.
fn checkpoint(
    name: &str,
    conn: &Mutex<Option<Connection>>,
    next: u64,
    synchronous: Synchronous,
) -> Result<(), ForwardError> {
    let mut guard = conn.lock().unwrap_or_else(PoisonError::into_inner);
    let conn = writable(name, &mut guard)?;
    let at =
        crate::proto::rfc3339_nanos(&prost_types::Timestamp::from(std::time::SystemTime::now()));
    let full = || -> rusqlite::Result<()> {
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.execute(
            "INSERT INTO checkpoints (forwarder, next_seq, at) VALUES (?1, ?2, ?3)
             ON CONFLICT (forwarder) DO UPDATE SET next_seq = excluded.next_seq, at = excluded.at",
            rusqlite::params![name, i64::try_from(next).unwrap_or(i64::MAX), at],
        )?;
        Ok(())
    };
    let result = full();
    // Back to the configured mode for the batches, whatever happened.
    let restored = conn.pragma_update(None, "synchronous", synchronous.pragma());
    match result.and(restored) {
        Ok(()) => Ok(()),
        Err(error) => {
            metrics::counter!("eventgate_sqlite_errors_total", "forwarder" => name.to_owned(), "class" => "retryable")
                .increment(1);
            tracing::warn!(forwarder = name, next, %error, "audit store checkpoint failed");
            Err(
                ForwardError::retryable(format!("audit store checkpoint failed: {error}"))
                    .with_source(error),
            )
        }
    }
}

/// One batch, one transaction. Blocking.
fn write_batch(
    name: &str,
    conn: &Mutex<Option<Connection>>,
    batch: &Batch,
) -> Result<(), ForwardError> {
    let (first_seq, last_seq) = batch.seq_range();
    let mut guard = conn.lock().unwrap_or_else(PoisonError::into_inner);
    let conn = writable(name, &mut guard)?;
    // Decoding to JSON is the costly part of a row; it runs here, off the runtime.
    let rows: Vec<EventRow<'_>> = batch
        .events()
        .iter()
        .map(|e| EventRow::from_event(e))
        .collect();
    let started = Instant::now();
    let result = store::insert_rows(conn, &rows);
    metrics::histogram!("eventgate_sqlite_transaction_seconds", "forwarder" => name.to_owned())
        .record(started.elapsed().as_secs_f64());
    match result {
        Ok(inserted) => {
            let duplicates = rows.len() - inserted;
            metrics::counter!("eventgate_sqlite_rows_total", "forwarder" => name.to_owned(), "outcome" => "inserted")
                .increment(inserted as u64);
            if duplicates > 0 {
                metrics::counter!("eventgate_sqlite_rows_total", "forwarder" => name.to_owned(), "outcome" => "duplicate")
                    .increment(duplicates as u64);
                tracing::debug!(
                    forwarder = name,
                    first_seq,
                    last_seq,
                    duplicates,
                    "re-delivered events were already stored"
                );
            }
            Ok(())
        }
        Err(error) => {
            let kind = classify(&error.source);
            let retryable = kind == super::ErrorKind::Retryable;
            let class = if retryable { "retryable" } else { "permanent" };
            metrics::counter!("eventgate_sqlite_errors_total", "forwarder" => name.to_owned(), "class" => class)
                .increment(1);
            let event_id = error.row.and_then(|i| rows.get(i)).map(|r| r.id.as_str());
            tracing::warn!(
                forwarder = name,
                first_seq,
                last_seq,
                events = rows.len(),
                event_id,
                code = ?error.source.sqlite_error_code(),
                retryable,
                error = %error.source,
                "audit store batch failed and was rolled back"
            );
            let message = match event_id {
                Some(id) => format!("audit store insert failed at event {id}: {}", error.source),
                None => format!("audit store transaction failed: {}", error.source),
            };
            Err(ForwardError {
                kind,
                message,
                source: Some(Box::new(error)),
            })
        }
    }
}

#[cfg(test)]
mod tests;
