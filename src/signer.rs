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
    Metric::counter(
        "eventgate_witness_submissions_total",
        metrics::Unit::Count,
        "Checkpoints sent to a witness, by sqlite forwarder, witness and result (cosigned, conflict, refused, unreachable, bad_response, bad_cosignature).",
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
    /// Each configured witness, in configuration order.
    pub witnesses: Vec<WitnessStatus>,
    /// How many must be cosigning for the signer to count as ready.
    pub min_witnesses: usize,
}

/// Where one witness stands for one store's checkpoints.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct WitnessStatus {
    pub name: String,
    pub url: String,
    /// When it last cosigned, and the tree size.
    pub cosigned: Option<(SystemTime, u64)>,
    /// Since when, and why, it gives no cosignature.
    pub failing: Option<(SystemTime, String)>,
}

/// The longest a witness that failed is left alone before it is asked again.
const WITNESS_BACKOFF: Duration = Duration::from_secs(300);

/// One witness as one signer task sees it.
struct Witness {
    url: String,
    key: crate::tlog::cosignature::WitnessKey,
    /// The tree size it is believed to have cosigned (0: not known; it says).
    size: u64,
    /// Not asked again before this, after a failure.
    retry_at: Option<std::time::Instant>,
    backoff: Duration,
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
    witnesses: Vec<(String, crate::tlog::cosignature::WitnessKey)>,
    witness_timeout: Duration,
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
            let witnesses = settings.witnesses();
            let (status, receiver) = watch::channel(SignerStatus {
                forwarder: spec.name.clone(),
                last: None,
                failing: None,
                witnesses: witnesses
                    .iter()
                    .map(|(url, key)| WitnessStatus {
                        name: key.name().to_owned(),
                        url: url.clone(),
                        cosigned: None,
                        failing: None,
                    })
                    .collect(),
                min_witnesses: settings.min_witnesses.unwrap_or(witnesses.len()),
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
                witnesses,
                witness_timeout: settings.witness_timeout,
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
        let mut witnesses: Vec<Witness> = self
            .witnesses
            .iter()
            .map(|(url, key)| Witness {
                url: url.clone(),
                key: key.clone(),
                size: 0,
                retry_at: None,
                backoff: Duration::from_secs(1),
            })
            .collect();
        let mut retry = TICK;
        loop {
            let stopping = tokio::select! {
                () = self.stop.cancelled() => true,
                () = tokio::time::sleep(retry) => false,
            };
            match self.turn(&mut line, &mut witnesses, stopping).await {
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
    async fn turn(
        &self,
        line: &mut Option<Line>,
        witnesses: &mut [Witness],
        stopping: bool,
    ) -> Result<(), String> {
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
        // The one signed at a clean stop too (within `witness_timeout`, well inside
        // the shutdown timeout): otherwise a gateway stopped on purpose would end its
        // archive with a tree head no witness saw.
        let note = match &checkpoint.tree {
            Some(tree) if !witnesses.is_empty() => self.witnessed(note, tree.size, witnesses).await,
            _ => note,
        };
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

    /// Sends the signed tree head to every witness not backing off, at once, and
    /// returns the note with the cosignatures that came back and verify. A witness
    /// that fails is reported and left alone for a while (1 s, doubling to 5 min);
    /// the checkpoint is shipped with what there is, never held back.
    async fn witnessed(&self, note: String, size: u64, witnesses: &mut [Witness]) -> String {
        let now = std::time::Instant::now();
        let asks = witnesses
            .iter()
            .enumerate()
            .filter(|(_, w)| w.retry_at.is_none_or(|at| at <= now))
            .map(|(i, w)| {
                let (url, key, known) = (w.url.clone(), w.key.clone(), w.size);
                let note = note.clone();
                async move { (i, self.cosign(&url, &key, known, size, &note).await) }
            });
        let answers = futures::future::join_all(asks).await;
        let mut cosigned = note;
        for (i, answer) in answers {
            let witness = &mut witnesses[i];
            let (result, outcome) = match &answer {
                Ok(_) => ("cosigned", None),
                Err((result, error)) => (*result, Some(error.clone())),
            };
            metrics::counter!(
                "eventgate_witness_submissions_total",
                "forwarder" => self.forwarder.clone(),
                "witness" => witness.key.name().to_owned(),
                "result" => result
            )
            .increment(1);
            match answer {
                Ok(lines) => {
                    witness.size = size;
                    witness.retry_at = None;
                    witness.backoff = Duration::from_secs(1);
                    for line in lines {
                        cosigned.push_str(&line);
                        cosigned.push('\n');
                    }
                    self.status.send_modify(|s| {
                        if let Some(w) = s.witnesses.get_mut(i) {
                            w.cosigned = Some((SystemTime::now(), size));
                            w.failing = None;
                        }
                    });
                }
                Err(_) => {
                    let error = outcome.unwrap_or_default();
                    witness.retry_at = Some(std::time::Instant::now() + witness.backoff);
                    witness.backoff = (witness.backoff * 2).min(WITNESS_BACKOFF);
                    let first = self
                        .status
                        .borrow()
                        .witnesses
                        .get(i)
                        .is_some_and(|w| w.failing.is_none());
                    if first {
                        tracing::error!(forwarder = %self.forwarder, witness = %witness.key.name(), url = %witness.url, %error, "a witness gives no cosignature; checkpoints are shipped without it, and it is asked again");
                    }
                    self.status.send_modify(|s| {
                        if let Some(w) = s.witnesses.get_mut(i) {
                            let since = w.failing.as_ref().map_or_else(SystemTime::now, |f| f.0);
                            w.failing = Some((since, error));
                        }
                    });
                }
            }
        }
        cosigned
    }

    /// One witness's cosignature lines on `note` (a tree of `size` leaves), proving
    /// consistency from the size it is believed to have; after a conflict, once more
    /// from the size it says it has. The error is (the metric's result, what happened).
    async fn cosign(
        &self,
        url: &str,
        key: &crate::tlog::cosignature::WitnessKey,
        known: u64,
        size: u64,
        note: &str,
    ) -> Result<Vec<String>, (&'static str, String)> {
        use crate::witness::client::{WitnessError, add_checkpoint, verify_cosignature};
        let mut old = known.min(size);
        for attempt in 0..2 {
            let proof = self
                .consistency(old, size)
                .await
                .map_err(|e| ("refused", e))?;
            match add_checkpoint(url, old, &proof, note, self.witness_timeout).await {
                Ok(lines) => {
                    verify_cosignature(key, note, &lines)
                        .map_err(|e| ("bad_cosignature", errors::chain(&e)))?;
                    // Only this witness's lines are shipped.
                    let (text, _) = crate::note::split(note)
                        .map_err(|e| ("bad_cosignature", errors::chain(&e)))?;
                    let mine = lines
                        .into_iter()
                        .filter(|line| {
                            crate::note::split(&format!("{text}\n{line}\n")).is_ok_and(
                                |(_, parsed)| {
                                    parsed.first().is_some_and(|l| {
                                        key.check(text, l)
                                            != crate::tlog::cosignature::Checked::Other
                                    })
                                },
                            )
                        })
                        .collect();
                    return Ok(mine);
                }
                Err(WitnessError::Conflict { size: theirs }) if attempt == 0 && theirs <= size => {
                    old = theirs;
                }
                Err(WitnessError::Conflict { size: theirs }) => {
                    return Err((
                        "conflict",
                        format!(
                            "the witness has recorded a tree of {theirs} leaves for this log, and this store's is {size}: it cannot be extended from there (the store went back, or another store signs under this origin)"
                        ),
                    ));
                }
                Err(error @ WitnessError::Unreachable { .. }) => {
                    return Err(("unreachable", errors::chain(&error)));
                }
                Err(error @ (WitnessError::BadResponse { .. } | WitnessError::Url { .. })) => {
                    return Err(("bad_response", errors::chain(&error)));
                }
                Err(error @ WitnessError::BadCosignature { .. }) => {
                    return Err(("bad_cosignature", errors::chain(&error)));
                }
                Err(error @ WitnessError::Refused { .. }) => {
                    return Err(("refused", errors::chain(&error)));
                }
            }
        }
        Err((
            "conflict",
            "the witness answered with a conflict twice".to_owned(),
        ))
    }

    /// The consistency proof from `old` to `size` leaves, read from the store's tree.
    async fn consistency(&self, old: u64, size: u64) -> Result<Vec<crate::tlog::Hash>, String> {
        if old == 0 || old == size {
            return Ok(Vec::new());
        }
        let path = self.store.clone();
        tokio::task::spawn_blocking(move || {
            let conn = Connection::open_with_flags(
                &path,
                OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )
            .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
            crate::tlog::proof::prove_tree(
                size,
                old,
                &mut crate::store::tree::SqlHashes::new(&conn),
            )
            .map_err(|e| format!("cannot prove consistency from {old} to {size} leaves: {e}"))
        })
        .await
        .map_err(|e| format!("the proof reader stopped: {e}"))?
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
