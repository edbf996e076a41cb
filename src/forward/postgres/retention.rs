//! Retention of a PostgreSQL store: every `interval`, drop each partition of
//! `events` whose whole time range is older than `max_age`. Dropping a partition is
//! one catalog change, with no row-by-row delete, no dead tuples, no vacuum; a row is
//! kept until its whole partition (a day, or a month) is past the age.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::Deserialize;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::forward::BuildError;
use crate::postgres::{Target, partitions};
use crate::units::duration_text;

/// `[forwarder.retention]` keys of a `postgres` forwarder.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub(super) struct RetentionOptions {
    #[serde(with = "duration_text")]
    pub max_age: Duration,
    #[serde(default = "default_interval", with = "duration_text")]
    pub interval: Duration,
}

fn default_interval() -> Duration {
    Duration::from_secs(3600)
}

impl RetentionOptions {
    pub(super) fn validate(&self) -> Result<(), BuildError> {
        let bad = |message: &str| Err(BuildError::Options(format!("retention: {message}")));
        if self.max_age < Duration::from_secs(3600) {
            return bad("`max_age` must be at least 1h (partitions hold a day or a month)");
        }
        if self.interval < Duration::from_secs(1) {
            return bad("`interval` must be at least 1s");
        }
        Ok(())
    }
}

pub(super) struct Pruner {
    cancel: CancellationToken,
    task: JoinHandle<()>,
}

impl Pruner {
    pub(super) fn start(name: Arc<str>, target: Target, options: &RetentionOptions) -> Self {
        let cancel = CancellationToken::new();
        let options = options.clone();
        let task = tokio::spawn(run(name, target, options, cancel.clone()));
        Self { cancel, task }
    }

    pub(super) async fn stop(self) {
        self.cancel.cancel();
        let _ = self.task.await;
    }
}

async fn run(name: Arc<str>, target: Target, options: RetentionOptions, cancel: CancellationToken) {
    loop {
        match prune(&target, options.max_age).await {
            Ok(dropped) => {
                for (table, rows) in dropped {
                    metrics::counter!("eventgate_postgres_pruned_rows_total", "forwarder" => name.to_string())
                        .increment(rows);
                    metrics::counter!("eventgate_postgres_pruned_partitions_total", "forwarder" => name.to_string())
                        .increment(1);
                    tracing::info!(forwarder = %name, partition = %table, rows, max_age = ?options.max_age, "postgres retention dropped a partition");
                }
            }
            Err(error) => {
                metrics::counter!("eventgate_postgres_prune_errors_total", "forwarder" => name.to_string())
                    .increment(1);
                tracing::warn!(forwarder = %name, %error, "postgres retention failed; trying again at the next interval");
            }
        }
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(options.interval) => {}
        }
    }
}

async fn prune(
    target: &Target,
    max_age: Duration,
) -> Result<Vec<(String, u64)>, crate::postgres::PostgresError> {
    let cutoff = SystemTime::now()
        .checked_sub(max_age)
        .unwrap_or(SystemTime::UNIX_EPOCH);
    let client = target.connect().await?;
    // A store no writer has made yet has nothing to prune.
    if crate::postgres::migrate::check(&client).await.is_err() {
        return Ok(Vec::new());
    }
    let mut dropped = Vec::new();
    for partition in partitions::older_than(&client, cutoff).await? {
        let rows = partitions::drop(&client, &partition).await?;
        dropped.push((partition.table, rows));
    }
    Ok(dropped)
}
