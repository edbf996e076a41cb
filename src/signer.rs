//! Signed checkpoints of every audit store's chain head, published as events so that
//! every forwarder ships them off the host (see docs/history.md, "Signed
//! checkpoints").
//!
//! One task per `sqlite` forwarder reads its store's head on its own read-only
//! connection (the writer is never waited on), and every `signing.interval`, every
//! `signing.every_rows` rows and at a clean stop signs a [`Checkpoint`] of it and
//! hands it to the exchange as an event of eventgate's own. Nothing here is on the
//! event path: a checkpoint is one more event now and then, and one that cannot be
//! signed or accepted is logged, counted, shown by `/readyz` and tried again, while
//! events flow as before.
//!
//! Each checkpoint names the previous one's note hash. The last note published is
//! kept in `<data_dir>/state/checkpoint-<forwarder>.note` once the exchange has it
//! durably, so a restart continues the same line of checkpoints even before the
//! store has caught up with the spool.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rusqlite::{Connection, OpenFlags};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::errors;
use crate::event::Source;
use crate::exchange::{Exchange, Incoming};
use crate::markers;
use crate::metric::Metric;
use crate::note::Signer;
use crate::pipeline::ForwarderSpec;
use crate::store::chain::{Hash, hex};
use crate::store::checkpoint::{self, Checkpoint, Head};

/// The metrics the signers record.
pub(crate) const METRICS: &[Metric] = &[
    Metric::counter(
        "eventgate_audit_checkpoints_total",
        metrics::Unit::Count,
        "Signed checkpoints of an audit store's chain head published, by sqlite forwarder.",
    ),
    Metric::counter(
        "eventgate_audit_checkpoint_failures_total",
        metrics::Unit::Count,
        "Attempts to sign and publish an audit checkpoint that failed (retried), by sqlite forwarder.",
    ),
];

/// How often a store's head is read.
const TICK: Duration = Duration::from_secs(1);

/// Where one signer stands, for `/readyz` and `/status`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SignerStatus {
    pub forwarder: String,
    pub last: Option<(SystemTime, i64)>,
    /// Since when, and why, checkpoints fail.
    pub failing: Option<(SystemTime, String)>,
}

pub(crate) struct Signers {
    tasks: JoinSet<()>,
    stop: CancellationToken,
    statuses: Vec<watch::Receiver<SignerStatus>>,
}

/// What one task needs.
struct Task {
    forwarder: String,
    store: PathBuf,
    state_file: PathBuf,
    node: String,
    signer: Arc<Signer>,
    interval: Duration,
    every_rows: i64,
    /// The forwarder's retention policy, stated in every checkpoint.
    retention: Option<crate::store::retention::Policy>,
    exchange: Exchange,
    status: watch::Sender<SignerStatus>,
    stop: CancellationToken,
}

impl Signers {
    /// One task per `sqlite` forwarder; none without a signing key.
    pub(crate) fn start(
        signer: Option<Signer>,
        settings: &crate::note::SigningSettings,
        forwarders: &[ForwarderSpec],
        data_dir: &Path,
        node: &str,
        exchange: &Exchange,
    ) -> Signers {
        let mut signers = Signers {
            tasks: JoinSet::new(),
            stop: CancellationToken::new(),
            statuses: Vec::new(),
        };
        let Some(signer) = signer else {
            return signers;
        };
        let signer = Arc::new(signer);
        for spec in forwarders.iter().filter(|f| f.kind == "sqlite") {
            let (status, receiver) = watch::channel(SignerStatus {
                forwarder: spec.name.clone(),
                last: None,
                failing: None,
            });
            let task = Task {
                forwarder: spec.name.clone(),
                store: store_path(spec, data_dir),
                state_file: data_dir
                    .join("state")
                    .join(format!("checkpoint-{}.note", spec.name)),
                node: node.to_owned(),
                signer: Arc::clone(&signer),
                interval: settings.interval,
                every_rows: i64::try_from(settings.every_rows).unwrap_or(i64::MAX),
                // serve refused a configuration whose options do not parse.
                retention: crate::forward::sqlite::retention_policy(&spec.options)
                    .ok()
                    .flatten(),
                exchange: exchange.clone(),
                status,
                stop: signers.stop.child_token(),
            };
            signers.tasks.spawn(task.run());
            signers.statuses.push(receiver);
        }
        signers
    }

    pub(crate) fn watch(&self) -> Vec<watch::Receiver<SignerStatus>> {
        self.statuses.clone()
    }

    /// Signs a last checkpoint of every store (before the exchange closes), within
    /// `timeout`.
    pub(crate) async fn stop(mut self, timeout: Duration) {
        self.stop.cancel();
        let all = async { while self.tasks.join_next().await.is_some() {} };
        if tokio::time::timeout(timeout, all).await.is_err() {
            tracing::warn!("a final audit checkpoint was not published in time");
            self.tasks.abort_all();
        }
    }
}

/// The store a `sqlite` forwarder writes (its `path`, relative to the data dir).
fn store_path(spec: &ForwarderSpec, data_dir: &Path) -> PathBuf {
    let path = spec
        .options
        .get("path")
        .and_then(|p| p.as_str())
        .map_or_else(|| PathBuf::from("audit.db"), PathBuf::from);
    match path.is_absolute() {
        true => path,
        false => data_dir.join(path),
    }
}

/// The line of checkpoints so far: the last one's row, time and note hash.
#[derive(Clone, Debug, Default)]
struct Line {
    row_id: i64,
    at: Option<SystemTime>,
    prev: Option<Hash>,
}

impl Line {
    fn after(note: &str) -> Option<Line> {
        let text = note.split("\n\n").next()?;
        let checkpoint = Checkpoint::parse(&format!("{text}\n")).ok()?;
        Some(Line {
            row_id: checkpoint.row_id,
            at: Some(checkpoint.time),
            prev: Some(checkpoint::note_hash(note)),
        })
    }
}

impl Task {
    async fn run(self) {
        let mut line: Option<Line> = None;
        let mut retry = TICK;
        loop {
            let stopping = tokio::select! {
                () = self.stop.cancelled() => true,
                () = tokio::time::sleep(retry) => false,
            };
            match self.turn(&mut line, stopping).await {
                Ok(()) => retry = TICK,
                Err(error) => {
                    retry = (retry * 2).min(Duration::from_secs(30));
                    self.failed(&error);
                    if stopping {
                        tracing::error!(forwarder = %self.forwarder, %error, "the last audit checkpoint before stopping could not be published");
                    }
                }
            }
            if stopping {
                return;
            }
        }
    }

    /// Reads the head and signs a checkpoint if one is due (always when stopping).
    async fn turn(&self, line: &mut Option<Line>, stopping: bool) -> Result<(), String> {
        let path = self.store.clone();
        let state_file = self.state_file.clone();
        let known = line.is_some();
        let (head, stored_note) = tokio::task::spawn_blocking(move || read(&path, known))
            .await
            .map_err(|e| format!("the store reader stopped: {e}"))??;
        let Some(head) = head else {
            // No store yet: the forwarder makes it with its first batch.
            return Ok(());
        };
        let line = line.get_or_insert_with(|| {
            let kept = std::fs::read_to_string(&state_file).ok();
            kept.as_deref()
                .or(stored_note.as_deref())
                .and_then(Line::after)
                .unwrap_or_default()
        });
        let now = SystemTime::now();
        // Every interval, rows added or not (a heartbeat: a verifier sees silence
        // as the newest checkpoint's age), every `every_rows` rows, and at a clean
        // stop.
        let due = stopping
            || line
                .at
                .is_none_or(|at| now.duration_since(at).unwrap_or(Duration::ZERO) >= self.interval)
            || head.row_id - line.row_id >= self.every_rows;
        if !due {
            return Ok(());
        }
        let checkpoint = Checkpoint {
            node: self.node.clone(),
            store: head.store.clone(),
            row_id: head.row_id,
            seq: head.seq,
            hash: head.hash,
            pruned_rows: head.pruned_rows,
            time: now,
            prev: line.prev,
            tree: self.tree_facts(&head)?,
        };
        let note = self
            .signer
            .sign(&checkpoint.to_text())
            .map_err(|e| format!("cannot sign: {}", errors::chain(&e)))?;
        let envelope = markers::audit_checkpoint(&checkpoint, &note, &self.forwarder);
        let incoming = Incoming::checked(Source::Internal, envelope);
        async { self.exchange.append(incoming).await?.acknowledged().await }
            .await
            .map_err(|e| format!("the exchange did not take it: {}", errors::chain(&e)))?;
        save_note(&self.state_file, &note)
            .map_err(|e| format!("cannot keep {}: {e}", self.state_file.display()))?;
        *line = Line {
            row_id: head.row_id,
            at: Some(now),
            prev: Some(checkpoint::note_hash(&note)),
        };
        metrics::counter!("eventgate_audit_checkpoints_total", "forwarder" => self.forwarder.clone())
            .increment(1);
        tracing::debug!(forwarder = %self.forwarder, row_id = head.row_id, hash = %head.hash.map(|h| hex(&h)).unwrap_or_default(), "signed an audit checkpoint");
        self.status.send_modify(|s| {
            s.last = Some((now, head.row_id));
            s.failing = None;
        });
        Ok(())
    }

    /// The tree head to sign with the chain head (`None` for a store of a schema
    /// before the tree). A tree that does not end at the chain's head is not signed:
    /// the store was edited outside eventgate, and the writer has stopped too.
    fn tree_facts(&self, head: &Head) -> Result<Option<checkpoint::TreeFacts>, String> {
        let Some((first_row_id, size, root)) = head.tree else {
            return Ok(None);
        };
        let last = first_row_id + i64::try_from(size).unwrap_or(i64::MAX) - 1;
        if last != head.row_id {
            return Err(format!(
                "the store's Merkle tree ends at row_id {last} but its chain at row_id {}: the store was modified outside eventgate; run `eventgate audit verify`",
                head.row_id
            ));
        }
        Ok(Some(checkpoint::TreeFacts {
            forwarder: self.forwarder.clone(),
            size,
            root,
            first_row_id,
            pruned_row_id: head.pruned_row_id,
            pruned_hash: head.pruned_hash,
            retention: self.retention,
        }))
    }

    fn failed(&self, error: &str) {
        metrics::counter!("eventgate_audit_checkpoint_failures_total", "forwarder" => self.forwarder.clone())
            .increment(1);
        let first = self.status.borrow().failing.is_none();
        if first {
            tracing::error!(forwarder = %self.forwarder, %error, "cannot publish a signed audit checkpoint; retrying");
        }
        self.status.send_modify(|s| {
            let since = s.failing.as_ref().map_or_else(SystemTime::now, |f| f.0);
            s.failing = Some((since, error.to_owned()));
        });
    }
}

/// The head, and (first time only) the newest checkpoint note the store keeps.
fn read(path: &Path, known: bool) -> Result<(Option<Head>, Option<String>), String> {
    if !path.exists() {
        return Ok((None, None));
    }
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    let head = match checkpoint::head(&conn) {
        Ok(head) => head,
        // Made but not migrated yet by the forwarder: nothing to sign.
        Err(rusqlite::Error::SqliteFailure(_, Some(message)))
            if message.contains("no such table") =>
        {
            return Ok((None, None));
        }
        Err(error) => {
            return Err(format!(
                "cannot read the chain head of {}: {error}",
                path.display()
            ));
        }
    };
    let note = match known {
        true => None,
        false => checkpoint::newest_note(&conn, &head.store).map_err(|e| {
            format!(
                "cannot read the newest checkpoint of {}: {e}",
                path.display()
            )
        })?,
    };
    Ok((Some(head), note))
}

/// Keeps the last published note (written aside, synced, renamed into place).
fn save_note(path: &Path, note: &str) -> std::io::Result<()> {
    use std::io::Write;
    if let Some(dir) = path.parent() {
        crate::fsmode::create_dir_all(dir)?;
    }
    let aside = path.with_extension("note.tmp");
    let mut file = crate::fsmode::create_file(&aside)?;
    file.write_all(note.as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&aside, path)
}

#[cfg(test)]
#[path = "signer_tests.rs"]
mod tests;
