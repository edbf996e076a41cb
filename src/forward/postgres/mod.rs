//! The `postgres` forwarder: every event as one row of a PostgreSQL audit store
//! ([`crate::postgres`]), one transaction per batch (a large batch split over up to
//! `connections` connections, a transaction each), written on a thread of its own
//! ([`thread`]).
//!
//! The server may be down at start, restart, or refuse the login: the forwarder
//! starts anyway, each batch connects if it must, and a failure is retryable (the
//! pipeline retries with backoff, the spool keeps the events, `/readyz` says the
//! forwarder fails). Only a row the server refuses (a value it cannot hold) is
//! permanent, and the pipeline isolates that row from its batch into the dead letters.
//! A commit is durable on the server (`synchronous_commit` as the server sets it),
//! so `send` returning Ok is this forwarder's checkpoint.

pub(crate) mod metric_table;
mod retention;
mod thread;

use std::sync::Arc;
use std::time::Instant;

use futures::future::BoxFuture;
use serde::Deserialize;

use super::{Batch, BuildError, Context, ErrorKind, ForwardError, Forwarder, Kind, Options};
use crate::postgres::write::{MAX_CONNECTIONS, Writer};
use crate::postgres::{ConnectOptions, Period, PostgresError, Target};
use retention::{Pruner, RetentionOptions};
use thread::WriterThread;

/// `[[forwarder]] kind = "postgres"` keys.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PostgresOptions {
    #[serde(flatten)]
    pub(crate) connect: ConnectOptions,
    /// How much time one partition of `events` holds.
    #[serde(default)]
    partition: Period,
    /// Names this gateway in each row's `written_by`; the host name by default.
    #[serde(default)]
    writer: Option<String>,
    /// No table: keep every partition.
    #[serde(default)]
    retention: Option<RetentionOptions>,
    /// Connections a large batch is split over, its slices written at once.
    /// Read as any integer, so a negative one is refused by name, not by serde.
    #[serde(default = "default_connections")]
    connections: i64,
}

/// Two: a batch then keeps two server processes busy instead of one
/// (docs/benchmarks.md, central ingest); a batch under 200 events takes one.
pub(crate) const DEFAULT_CONNECTIONS: usize = 2;

fn default_connections() -> i64 {
    DEFAULT_CONNECTIONS as i64
}

impl PostgresOptions {
    /// Every check that needs no server (what `check-config` runs).
    pub(crate) fn parse(options: &Options) -> Result<Self, BuildError> {
        // `flatten` loses `deny_unknown_fields`: unknown keys are found here.
        const KEYS: &[&str] = &[
            "url",
            "password_file",
            "password_env",
            "tls",
            "ca_file",
            "connect_timeout",
            "partition",
            "writer",
            "retention",
            "connections",
        ];
        if let Some(unknown) = options.keys().find(|k| !KEYS.contains(&k.as_str())) {
            return Err(BuildError::Options(format!(
                "unknown key `{unknown}` (known: {})",
                KEYS.join(", ")
            )));
        }
        let parsed: Self = super::parse_options(options)?;
        parsed
            .connect
            .target()
            .map_err(|e| BuildError::Options(e.to_string()))?;
        if let Some(writer) = &parsed.writer
            && (writer.trim().is_empty() || writer.len() > crate::node::MAX_LEN)
        {
            return Err(BuildError::Options(format!(
                "`writer` must be 1 to {} characters",
                crate::node::MAX_LEN
            )));
        }
        if let Some(retention) = &parsed.retention {
            retention.validate()?;
        }
        if !(1..=MAX_CONNECTIONS as i64).contains(&parsed.connections) {
            return Err(BuildError::Options(format!(
                "`connections` must be 1 to {MAX_CONNECTIONS}, not {}",
                parsed.connections
            )));
        }
        Ok(parsed)
    }
}

pub(crate) struct PostgresKind;

impl Kind for PostgresKind {
    fn check(&self, options: &Options) -> Result<(), BuildError> {
        PostgresOptions::parse(options).map(drop)
    }

    fn build<'a>(
        &'a self,
        context: &'a Context,
        options: &'a Options,
    ) -> BoxFuture<'a, Result<Arc<dyn Forwarder>, BuildError>> {
        Box::pin(async move {
            let options = PostgresOptions::parse(options)?;
            let target = options
                .connect
                .target()
                .map_err(|e| BuildError::Options(e.to_string()))?;
            let writer_name: Arc<str> = options
                .writer
                .clone()
                .unwrap_or_else(crate::node::host_name)
                .into();
            let name: Arc<str> = Arc::from(context.name.as_str());
            tracing::info!(
                forwarder = %name,
                store = %target.describe(),
                tls = ?options.connect.tls,
                partition = ?options.partition,
                connections = options.connections,
                "postgres store configured; it connects with the first batch"
            );
            let pruner = options
                .retention
                .as_ref()
                .map(|r| Pruner::start(Arc::clone(&name), target.clone(), r));
            let writer = Writer::new(
                target.clone(),
                options.partition,
                writer_name,
                Arc::clone(&name),
            )
            .connections(usize::try_from(options.connections).unwrap_or(1));
            let writer = WriterThread::start(&name, writer).map_err(|e| {
                BuildError::start(
                    format!("forwarder {name}: cannot start its writer thread"),
                    e,
                )
            })?;
            Ok(Arc::new(PostgresForwarder {
                name,
                target,
                writer,
                pruner: std::sync::Mutex::new(pruner),
            }) as Arc<dyn Forwarder>)
        })
    }

    fn default_batch_events(&self) -> usize {
        1000
    }
}

pub(crate) struct PostgresForwarder {
    name: Arc<str>,
    target: Target,
    /// The connections; the pipeline sends one batch at a time.
    writer: WriterThread,
    pruner: std::sync::Mutex<Option<Pruner>>,
}

impl Forwarder for PostgresForwarder {
    fn send<'a>(&'a self, batch: &'a Batch) -> BoxFuture<'a, Result<(), ForwardError>> {
        Box::pin(async move {
            let (first_seq, last_seq) = batch.seq_range();
            let started = Instant::now();
            let written = match self.writer.write(batch.events()).await {
                Ok(written) => written,
                Err(stopped) => {
                    return Err(ForwardError {
                        kind: ErrorKind::Retryable,
                        message: format!("forwarder {}: {stopped}", self.name),
                        source: Some(Box::new(stopped)),
                    });
                }
            };
            metrics::histogram!("eventgate_postgres_transaction_seconds", "forwarder" => self.name.to_string())
                .record(started.elapsed().as_secs_f64());
            let rows = |outcome: &'static str, n: u64| {
                if n > 0 {
                    metrics::counter!("eventgate_postgres_rows_total", "forwarder" => self.name.to_string(), "outcome" => outcome)
                        .increment(n);
                }
            };
            match written {
                Ok(written) => {
                    if written.kept > 0 {
                        let path = match (written.staged, written.split) {
                            (true, _) => "staged",
                            (false, true) => "split",
                            (false, false) => "direct",
                        };
                        metrics::counter!("eventgate_postgres_batches_total", "forwarder" => self.name.to_string(), "path" => path)
                            .increment(1);
                    }
                    rows("inserted", written.inserted);
                    rows("duplicate", written.duplicates);
                    rows("fenced", written.fenced);
                    if written.fenced > 0 {
                        tracing::warn!(
                            forwarder = %self.name,
                            first_seq,
                            last_seq,
                            fenced = written.fenced,
                            "events read from Kafka partitions another gateway has claimed since were not written: the partitions' owner reads them from the stored offset"
                        );
                    }
                    Ok(())
                }
                Err(error) => Err(self.failed(error, first_seq, last_seq, batch.len())),
            }
        })
    }

    /// The rows' JSON, the one costly part of a row, is rendered here, off the
    /// transaction's path.
    fn prepare(&self, batch: &Batch) {
        for event in batch.events() {
            let _ = event.payload_json();
        }
    }

    fn close(&self) -> BoxFuture<'_, Result<(), ForwardError>> {
        let pruner = self
            .pruner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        Box::pin(async move {
            if let Some(pruner) = pruner {
                pruner.stop().await;
            }
            self.writer.close().await;
            tracing::info!(forwarder = %self.name, "postgres store closed");
            Ok(())
        })
    }
}

impl PostgresForwarder {
    fn failed(
        &self,
        error: PostgresError,
        first_seq: u64,
        last_seq: u64,
        events: usize,
    ) -> ForwardError {
        let retryable = error.is_retryable();
        let class = if retryable { "retryable" } else { "permanent" };
        metrics::counter!("eventgate_postgres_errors_total", "forwarder" => self.name.to_string(), "class" => class)
            .increment(1);
        tracing::warn!(
            forwarder = %self.name,
            store = %self.target.describe(),
            first_seq,
            last_seq,
            events,
            code = error.code(),
            retryable,
            %error,
            "postgres batch failed and was rolled back"
        );
        ForwardError {
            kind: if retryable {
                ErrorKind::Retryable
            } else {
                ErrorKind::Permanent
            },
            message: format!("postgres store {}: {error}", self.target.describe()),
            source: Some(Box::new(error)),
        }
    }
}
