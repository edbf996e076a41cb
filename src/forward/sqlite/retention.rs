//! The audit store's background pruning: every `interval`, delete what the policy no
//! longer keeps in steps of `batch` rows, then give the freed pages back to the file
//! system. Each step takes the forwarder's connection for one short transaction, so
//! inserts interleave with a large purge instead of waiting for it.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use rusqlite::Connection;
use serde::{Deserialize, Deserializer};
use tokio_util::sync::CancellationToken;

use crate::forward::BuildError;
use crate::store::retention::{self, Policy};
use crate::units::{duration_text, parse_duration};

/// `[forwarder.retention]` keys of a `sqlite` forwarder.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub(super) struct RetentionOptions {
    #[serde(default, deserialize_with = "optional_duration")]
    pub max_age: Option<Duration>,
    #[serde(default, deserialize_with = "row_count")]
    pub max_rows: Option<u64>,
    #[serde(default = "default_interval", with = "duration_text")]
    pub interval: Duration,
    #[serde(default = "default_batch")]
    pub batch: usize,
}

fn default_interval() -> Duration {
    Duration::from_secs(60)
}

fn default_batch() -> usize {
    1000
}

/// The largest step: deleting more rows per transaction holds the write lock longer
/// than a batch of inserts takes, which is what small steps are for.
const MAX_BATCH: usize = 100_000;

/// Pages handed back per vacuum transaction (4 MiB with 4 KiB pages).
const VACUUM_PAGES: u64 = 1024;

fn optional_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    let text = String::deserialize(d)?;
    parse_duration(&text)
        .map(Some)
        .map_err(serde::de::Error::custom)
}

/// TOML integers are signed; a negative count gets a message naming the key.
fn row_count<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let rows = i64::deserialize(d)?;
    u64::try_from(rows).map(Some).map_err(|_| {
        serde::de::Error::custom(format!("`max_rows` must be a number of rows, not {rows}"))
    })
}

impl RetentionOptions {
    pub(super) fn validate(&self) -> Result<Policy, BuildError> {
        let bad = |message: &str| Err(BuildError::Options(format!("retention: {message}")));
        if self.max_age.is_none() && self.max_rows.is_none() {
            return bad(
                "set `max_age`, `max_rows` or both (or remove the table to keep everything)",
            );
        }
        if self.max_age == Some(Duration::ZERO) {
            return bad("`max_age` must be longer than 0s");
        }
        if self.max_rows == Some(0) {
            return bad("`max_rows` must be at least 1");
        }
        if self.interval < Duration::from_secs(1) {
            return bad("`interval` must be at least 1s");
        }
        if !(1..=MAX_BATCH).contains(&self.batch) {
            return bad(&format!("`batch` must be between 1 and {MAX_BATCH}"));
        }
        Ok(Policy {
            max_age: self.max_age,
            max_rows: self.max_rows,
        })
    }
}

/// A running pruner; dropping it does not stop it, [`Pruner::stop`] does.
pub(super) struct Pruner {
    cancel: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Pruner {
    pub(super) fn start(
        name: Arc<str>,
        path: Arc<PathBuf>,
        conn: Arc<Mutex<Option<Connection>>>,
        options: &RetentionOptions,
        policy: Policy,
    ) -> Pruner {
        let cancel = CancellationToken::new();
        let round = Round {
            name,
            path,
            conn,
            policy,
            batch: options.batch,
        };
        let interval = options.interval;
        let stopped = cancel.clone();
        let task = tokio::spawn(async move {
            // The first round runs at once: a store that was down for a while may be
            // far over its limits.
            loop {
                if !round.run(&stopped).await {
                    return;
                }
                tokio::select! {
                    () = stopped.cancelled() => return,
                    () = tokio::time::sleep(interval) => {}
                }
            }
        });
        Pruner { cancel, task }
    }

    /// Stops after the current step (never in the middle of a transaction).
    pub(super) async fn stop(self) {
        self.cancel.cancel();
        if let Err(error) = self.task.await {
            tracing::warn!(%error, "the audit store pruning task failed");
        }
    }
}

struct Round {
    name: Arc<str>,
    path: Arc<PathBuf>,
    conn: Arc<Mutex<Option<Connection>>>,
    policy: Policy,
    batch: usize,
}

/// Why a step did not run to completion.
#[derive(Debug, thiserror::Error)]
enum StepError {
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
    #[error("the blocking task failed")]
    Task(#[source] tokio::task::JoinError),
}

impl Round {
    /// One pruning round; false once the store is closed.
    async fn run(&self, stop: &CancellationToken) -> bool {
        let started = Instant::now();
        let labels = [("forwarder", self.name.to_string())];
        let mut stored = match self.count().await {
            None => return false,
            Some(Ok(n)) => n,
            Some(Err(error)) => {
                self.failed("counting rows", &error);
                return true;
            }
        };
        let mut deleted = 0;
        let mut checkpoint = None;
        while !stop.is_cancelled() {
            let (policy, batch) = (self.policy, self.batch);
            let step = self
                .blocking_mut(move |conn| {
                    retention::prune_step(conn, &policy, stored, SystemTime::now(), batch)
                })
                .await;
            let step = match step {
                None => return false,
                Some(Ok(step)) => step,
                Some(Err(error)) => {
                    self.failed("deleting old rows", &error);
                    break;
                }
            };
            deleted += step.deleted;
            stored = stored.saturating_sub(step.deleted);
            metrics::counter!("eventgate_sqlite_pruned_rows_total", &labels)
                .increment(step.deleted);
            if step.checkpoint.is_some() {
                checkpoint = step.checkpoint;
            }
            if step.deleted < batch as u64 {
                break;
            }
            // Let the forwarder's next batch in between steps.
            tokio::task::yield_now().await;
        }
        let freed = if deleted > 0 {
            self.shrink(stop).await
        } else {
            0
        };
        if let Some(last) = checkpoint {
            // The checkpoint also lands in the log: a copy outside the database.
            tracing::info!(
                forwarder = %self.name,
                path = %self.path.display(),
                deleted,
                rows_left = stored,
                checkpoint_row = last.row_id,
                checkpoint_seq = last.seq,
                checkpoint_timestamp = last.timestamp.as_deref().unwrap_or(""),
                checkpoint_hash = %last.hash.as_deref().map(hex).unwrap_or_default(),
                freed_pages = freed,
                elapsed_ms = started.elapsed().as_millis() as u64,
                "audit store pruned"
            );
        }
        true
    }

    /// Hands freed pages back in short transactions, then checkpoints the WAL so the
    /// file really gets shorter. Returns the pages freed.
    async fn shrink(&self, stop: &CancellationToken) -> u64 {
        let mut freed = 0;
        while !stop.is_cancelled() {
            match self
                .blocking_mut(|conn| retention::vacuum_step(conn, VACUUM_PAGES))
                .await
            {
                Some(Ok(0)) | None => break,
                Some(Ok(pages)) => freed += pages,
                Some(Err(error)) => {
                    self.failed("returning free pages", &error);
                    break;
                }
            }
            tokio::task::yield_now().await;
        }
        if let Some(Err(error)) = self.blocking_mut(|c| retention::checkpoint_wal(c)).await {
            self.failed("checkpointing the WAL", &error);
        }
        freed
    }

    /// Counts rows on a read connection of its own: a full count walks an index,
    /// which on a large store takes long enough that inserts should not wait for it
    /// (in WAL mode a reader never blocks the writer). `None` once the forwarder is
    /// closed.
    async fn count(&self) -> Option<Result<u64, StepError>> {
        if self
            .conn
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_none()
        {
            return None;
        }
        let path = Arc::clone(&self.path);
        let counted = tokio::task::spawn_blocking(move || {
            let conn = Connection::open_with_flags(
                path.as_path(),
                rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY
                    | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )?;
            conn.busy_timeout(Duration::from_secs(5))?;
            retention::count_rows(&conn)
        })
        .await;
        Some(match counted {
            Ok(result) => result.map_err(StepError::from),
            Err(error) => Err(StepError::Task(error)),
        })
    }

    /// Runs `work` on the blocking pool with the forwarder's connection; `None` once
    /// the forwarder is closed.
    async fn blocking_mut<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Option<Result<T, StepError>> {
        let conn = Arc::clone(&self.conn);
        let joined = tokio::task::spawn_blocking(move || {
            let mut guard = conn.lock().unwrap_or_else(PoisonError::into_inner);
            guard.as_mut().map(work)
        })
        .await;
        match joined {
            Ok(result) => result.map(|r| r.map_err(StepError::from)),
            Err(error) => Some(Err(StepError::Task(error))),
        }
    }

    fn failed(&self, what: &str, error: &StepError) {
        metrics::counter!("eventgate_sqlite_prune_errors_total", "forwarder" => self.name.to_string())
            .increment(1);
        // Pruning is retried at the next interval; nothing is lost by waiting.
        tracing::warn!(
            forwarder = %self.name,
            path = %self.path.display(),
            error = %crate::errors::chain(error),
            "audit store retention: {what} failed; trying again at the next interval"
        );
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
