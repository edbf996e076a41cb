//! One upstream's snapshot: the daemon's state as eventgate recorded it, advanced by
//! every event of that upstream once the spool holds it, and kept on disk under
//! `<data_dir>/state/<upstream>.json`.
//!
//! Saving after every event would put a file write on the upstream's path, so the
//! file is saved now and then (and after each reconcile and at stop), and the spool
//! keeps everything after it: the snapshot holds a spool cursor (`state:<upstream>`,
//! a name no forwarder can have) at the first seq it has not saved. At start the
//! events after that cursor are read back from the spool and applied, so the
//! snapshot is exactly as far as the record, never ahead and never behind.
//!
//! A reconcile's snapshot is saved in two phases (see `pending`): written aside
//! before its events are appended, promoted once its marker is durable, and at start
//! promoted or dropped according to whether the spool holds that marker.

use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::apply::Object;
use super::managed::DOCKER_NAMESPACE;
use super::pending;
use super::state::NodeState;
use crate::event::{Event, Source, Workload};
use crate::spool::{Spool, SpoolError};

/// How often a changed snapshot is written when nothing else saves it.
pub(crate) const SAVE_EVERY: Duration = Duration::from_secs(5);

/// How long an unchanged snapshot may hold other sources' events in the spool.
const HOLD_AT_MOST: Duration = Duration::from_secs(60);

const VERSION: u32 = 1;

/// A state file (a saved or a pending snapshot) that a newer eventgate wrote: refused,
/// like the spool and the stores, and left as it is.
#[derive(Debug, Error)]
#[error(
    "{} was written by a newer eventgate: state snapshot version {found}, and this eventgate knows up to version {known}; upgrade eventgate, or move the file aside (the next reconcile then takes a new baseline; the file was left as it is)",
    path.display()
)]
pub struct NewerSnapshot {
    pub path: PathBuf,
    pub found: u64,
    pub known: u32,
}

/// Refuses `upstream`'s state files if a newer eventgate wrote either. Reads only
/// their `version`; a missing, unreadable or older file is left to `Snapshot::open`.
pub(crate) fn refuse_newer(data_dir: &Path, upstream: &str) -> Result<(), NewerSnapshot> {
    for (path, known) in [
        (path(data_dir, upstream), VERSION),
        (pending::path(data_dir, upstream), pending::VERSION),
    ] {
        if let Some(found) = version_of(&path)
            && found > u64::from(known)
        {
            return Err(NewerSnapshot { path, found, known });
        }
    }
    Ok(())
}

/// The `version` of a JSON state file, if it has one.
pub(super) fn version_of(path: &Path) -> Option<u64> {
    #[derive(Deserialize)]
    struct Versioned {
        version: u64,
    }
    let bytes = std::fs::read(path).ok()?;
    serde_json::from_slice::<Versioned>(&bytes)
        .ok()
        .map(|v| v.version)
}

#[derive(Debug, Error)]
pub(crate) enum SnapshotError {
    #[error("cannot write the state snapshot {}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot read back the spool to bring the state snapshot up to date")]
    Spool(#[source] SpoolError),
    #[error(transparent)]
    Newer(#[from] NewerSnapshot),
    #[error("cannot write the pending state snapshot {}", path.display())]
    Pending {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// The file's shape, as read.
#[derive(Deserialize)]
struct Saved {
    version: u32,
    upstream: String,
    /// Every event of the upstream with a lower seq is in `state`.
    next_seq: u64,
    state: NodeState,
    /// The last reconcile whose state this is (its marker's id); absent in files
    /// written before reconciles were saved in two phases.
    #[serde(default)]
    reconciled: Option<String>,
}

/// The same shape, written without copying the state.
#[derive(Serialize)]
struct Saving<'a> {
    version: u32,
    upstream: &'a str,
    next_seq: u64,
    state: &'a NodeState,
    #[serde(skip_serializing_if = "Option::is_none")]
    reconciled: Option<&'a str>,
}

pub(crate) struct Snapshot {
    upstream: String,
    path: PathBuf,
    pub state: NodeState,
    next_seq: u64,
    /// False until a reconcile has seen the daemon: the first one takes its state as
    /// the starting point instead of telling all of it as news.
    pub known: bool,
    /// While a reconcile lists the daemon: the objects the live stream changed since.
    touched: Option<BTreeSet<Object>>,
    dirty: bool,
    saved_at: Instant,
    /// The last reconcile the saved state includes.
    reconciled: Option<String>,
    /// A reconcile's state written aside, waiting for its marker to be durable.
    staged: Option<Staged>,
    data_dir: PathBuf,
    /// Debug builds only: promotion was held (see [`Snapshot::promote`]); nothing more
    /// is saved, as if the process had stopped right after the marker's fsync.
    frozen: bool,
}

/// What a pending snapshot on disk waits for.
struct Staged {
    marker: String,
    /// The spool keeps everything from here until the marker is promoted.
    from_seq: u64,
}

/// The spool cursor that holds the events a snapshot file does not have yet.
pub(crate) fn cursor_name(upstream: &str) -> String {
    format!("state:{upstream}")
}

pub(crate) fn path(data_dir: &Path, upstream: &str) -> PathBuf {
    data_dir.join("state").join(format!("{upstream}.json"))
}

impl Snapshot {
    /// Loads the saved snapshot (an unreadable one is moved aside and the next
    /// reconcile starts afresh, saying so) and applies what the spool holds after it.
    pub(crate) async fn open(
        data_dir: &Path,
        upstream: &str,
        spool: Option<&Spool>,
    ) -> Result<Snapshot, SnapshotError> {
        let path = path(data_dir, upstream);
        let mut snapshot = Snapshot {
            upstream: upstream.to_owned(),
            path: path.clone(),
            state: NodeState::default(),
            next_seq: 0,
            known: false,
            touched: None,
            dirty: false,
            saved_at: Instant::now(),
            reconciled: None,
            staged: None,
            data_dir: data_dir.to_owned(),
            frozen: false,
        };
        match std::fs::read(&path) {
            Ok(bytes) => match serde_json::from_slice::<Saved>(&bytes) {
                Ok(saved) if saved.version == VERSION && saved.upstream == upstream => {
                    snapshot.state = saved.state;
                    snapshot.next_seq = saved.next_seq;
                    snapshot.known = true;
                    snapshot.reconciled = saved.reconciled;
                }
                Ok(_) | Err(_) => {
                    // `serve` refused a newer one at start; this one came since.
                    refuse_newer(data_dir, upstream)?;
                    let aside = path.with_extension("json.unreadable");
                    tracing::error!(path = %path.display(), aside = %aside.display(), "state snapshot cannot be read; set aside, the next reconcile starts afresh");
                    let _ = std::fs::rename(&path, &aside);
                }
            },
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(error) => {
                tracing::error!(path = %path.display(), %error, "state snapshot cannot be read; the next reconcile starts afresh");
            }
        }
        snapshot.settle_pending(spool).await?;
        if let Some(spool) = spool {
            snapshot.catch_up(spool).await?;
        }
        Ok(snapshot)
    }

    /// A pending snapshot left by the last process: promoted if its marker is in the
    /// spool (the reconcile was recorded, and the process ended before the promotion),
    /// removed otherwise (it was not: the next reconcile does its work again, against
    /// the saved snapshot and whatever of its events the spool holds).
    async fn settle_pending(&mut self, spool: Option<&Spool>) -> Result<(), SnapshotError> {
        let file = pending::path(&self.data_dir, &self.upstream);
        let Some(found) = pending::read(&file, &self.upstream) else {
            return Ok(());
        };
        if self.reconciled.as_deref() == Some(found.marker.as_str()) {
            // Promoted; the process ended before it removed the pending file.
            pending::remove(&file);
            return Ok(());
        }
        let marker_seq = match spool {
            Some(spool) => {
                pending::find_marker(spool, &self.upstream, &found.marker, found.from_seq)
                    .await
                    .map_err(SnapshotError::Spool)?
            }
            None => None,
        };
        let Some(marker_seq) = marker_seq else {
            tracing::warn!(upstream = %self.upstream, marker = %found.marker, "the last reconcile was not recorded before eventgate stopped; the next reconcile does its work again");
            pending::remove(&file);
            return Ok(());
        };
        tracing::info!(upstream = %self.upstream, marker = %found.marker, seq = marker_seq, "the last reconcile was recorded before eventgate stopped; its state snapshot is promoted");
        self.state = found.state;
        self.known = true;
        self.next_seq = marker_seq + 1;
        self.reconciled = Some(found.marker);
        self.dirty = true;
        self.save(spool)?;
        pending::remove(&file);
        Ok(())
    }

    /// Applies this upstream's events the spool holds after the saved snapshot.
    async fn catch_up(&mut self, spool: &Spool) -> Result<(), SnapshotError> {
        let end = spool.next_seq();
        if !self.known || self.next_seq >= end {
            self.next_seq = end;
            return Ok(());
        }
        let mut reader = spool.reader(self.next_seq);
        while reader.position() < end {
            let batch = reader
                .next(1024, 4 << 20)
                .await
                .map_err(SnapshotError::Spool)?;
            if let Some(gap) = batch.gap {
                // Dropped while the spool was full: what those events said is only
                // known to the daemon now, and the next reconcile will ask it.
                tracing::warn!(upstream = %self.upstream, first = gap.first, last = gap.last, "events the state snapshot needed were dropped from the spool");
            }
            for event in &batch.events {
                if event.seq >= end {
                    break;
                }
                self.record(event);
            }
            if batch.events.is_empty() && batch.gap.is_none() {
                break;
            }
        }
        self.next_seq = end;
        Ok(())
    }

    /// Advances the snapshot by one event the spool holds (others' events are
    /// ignored).
    pub(crate) fn record(&mut self, event: &Event) {
        self.next_seq = self.next_seq.max(event.seq + 1);
        if !matches!(&event.identity.source, Source::Upstream(name) if **name == *self.upstream) {
            return;
        }
        let envelope = &event.envelope;
        let changed = self.state.apply(
            &envelope.namespace,
            &envelope.topic,
            envelope.event.as_ref(),
        );
        if let (Some(Object::Container(namespace, id)), Some(workload)) =
            (&changed, &event.identity.workload)
            && let Some(container) = self
                .state
                .namespaces
                .get_mut(namespace)
                .and_then(|ns| ns.containers.get_mut(id))
        {
            container.workload = Some(Workload::clone(workload));
        }
        // dockerd's runs of a container share its id: the time each started is where
        // its log's runs are told apart from the recorded ones (`reconcile::runs`).
        if let Some(Object::Task(namespace, id)) = &changed
            && namespace == DOCKER_NAMESPACE
            && envelope.topic == "/tasks/start"
            && let Some(task) = self
                .state
                .namespaces
                .get_mut(namespace)
                .and_then(|ns| ns.tasks.get_mut(id))
        {
            task.started_at = envelope
                .timestamp
                .and_then(|t| SystemTime::try_from(t).ok());
        }
        if let Some(object) = changed {
            self.dirty = true;
            if let Some(touched) = &mut self.touched {
                touched.insert(object);
            }
        }
    }

    /// From now until [`Snapshot::end_listing`], remembers what the live stream
    /// changes.
    pub(crate) fn begin_listing(&mut self) {
        self.touched = Some(BTreeSet::new());
    }

    /// The objects the live stream changed since `begin_listing`.
    pub(crate) fn end_listing(&mut self) -> BTreeSet<Object> {
        self.touched.take().unwrap_or_default()
    }

    /// Replaces the state, known, and saves it (the reconcile benchmark's library
    /// round uses it too).
    #[cfg(any(test, feature = "bench"))]
    pub(crate) fn reset(
        &mut self,
        state: NodeState,
        spool: Option<&Spool>,
    ) -> Result<(), SnapshotError> {
        self.state = state;
        self.known = true;
        self.dirty = true;
        self.save(spool)
    }

    /// The first phase of a reconcile's save: `state`, what the snapshot is once the
    /// reconcile's marker `marker` is recorded, written aside (durably) before any of
    /// its events is appended. Until [`Snapshot::promote`] or
    /// [`Snapshot::discard_pending`], the spool keeps every event from its next seq
    /// now, so a start can find the marker.
    pub(crate) fn stage(
        &mut self,
        marker: &str,
        state: &NodeState,
        spool: Option<&Spool>,
    ) -> Result<(), SnapshotError> {
        let from_seq = spool.map_or(self.next_seq, Spool::next_seq);
        let file = pending::path(&self.data_dir, &self.upstream);
        // Held before the write: a pending file on disk always has the spool behind it.
        self.staged = Some(Staged {
            marker: marker.to_owned(),
            from_seq,
        });
        if self.frozen {
            return Ok(());
        }
        pending::write(&file, &self.upstream, marker, from_seq, state).map_err(|source| {
            SnapshotError::Pending {
                path: file.clone(),
                source,
            }
        })
    }

    /// The second phase: the reconcile's marker is durable at `marker_seq`, and every
    /// event of the upstream before it is recorded. The snapshot becomes `state`,
    /// good up to the marker, saved; then the pending file goes.
    pub(crate) fn promote(
        &mut self,
        marker: &str,
        state: NodeState,
        marker_seq: u64,
        spool: Option<&Spool>,
    ) -> Result<(), SnapshotError> {
        self.state = state;
        self.known = true;
        self.dirty = true;
        self.next_seq = self.next_seq.max(marker_seq + 1);
        self.reconciled = Some(marker.to_owned());
        if !self.frozen && hold_promotion(&self.data_dir, &self.upstream) {
            tracing::warn!(upstream = %self.upstream, marker, "promotion held for a test; nothing more of this snapshot is saved");
            self.frozen = true;
        }
        if self.frozen {
            return Ok(());
        }
        // Only the file staged for this marker: a later reconcile's is its own. Once
        // the save below succeeds, the spool may let go of the marker; should it fail,
        // the pending file stays, and a start finds the marker (the cursor only moves
        // with a save that succeeded).
        let ours = self.staged.as_ref().is_some_and(|s| s.marker == marker);
        if ours {
            self.staged = None;
        }
        self.save(spool)?;
        if ours {
            pending::remove(&pending::path(&self.data_dir, &self.upstream));
        }
        Ok(())
    }

    /// A staged reconcile whose marker will not be recorded (the subscription ended
    /// before it was durable): its pending file goes, and the spool may let go.
    pub(crate) fn discard_pending(&mut self) {
        if self.staged.take().is_some() && !self.frozen {
            pending::remove(&pending::path(&self.data_dir, &self.upstream));
        }
    }

    /// Saves now and then. `in_flight` is the seq of the oldest of the upstream's own
    /// events the spool has numbered and the snapshot has not seen yet (they are
    /// recorded once durable, in order); every event before it that the snapshot has
    /// not seen is someone else's, so the snapshot is good up to there, or up to the
    /// spool's next seq when none is in flight. Saying so releases those events from
    /// the spool too; an event in flight stays in the spool for the next start.
    pub(crate) fn tick(
        &mut self,
        spool: Option<&Spool>,
        in_flight: Option<u64>,
    ) -> Result<(), SnapshotError> {
        if let Some(spool) = spool {
            let good_to = in_flight.unwrap_or_else(|| spool.next_seq());
            self.next_seq = self.next_seq.max(good_to);
        }
        let elapsed = self.saved_at.elapsed();
        if (self.dirty && elapsed >= SAVE_EVERY) || elapsed >= HOLD_AT_MOST {
            self.save(spool)?;
        }
        Ok(())
    }

    /// Writes the file (atomically, synced), then lets the spool forget what it holds.
    /// A snapshot no reconcile has completed is not written: it holds only what the
    /// stream said since this process started, and taken for the whole record it
    /// would make the next reconcile tell everything else as news.
    pub(crate) fn save(&mut self, spool: Option<&Spool>) -> Result<(), SnapshotError> {
        if self.frozen {
            return Ok(());
        }
        // While a reconcile is staged, its marker and events stay in the spool.
        let release_to = match &self.staged {
            Some(staged) => self.next_seq.min(staged.from_seq),
            None => self.next_seq,
        };
        if !self.known {
            self.dirty = false;
            self.saved_at = Instant::now();
            if let Some(spool) = spool {
                spool.set_cursor(&cursor_name(&self.upstream), release_to);
            }
            return Ok(());
        }
        let saved = Saving {
            version: VERSION,
            upstream: &self.upstream,
            next_seq: self.next_seq,
            state: &self.state,
            reconciled: self.reconciled.as_deref(),
        };
        let write = |path: &Path| -> io::Result<()> {
            if let Some(dir) = path.parent() {
                crate::fsmode::create_dir_all(dir)?;
            }
            let bytes = serde_json::to_vec(&saved).map_err(io::Error::other)?;
            crate::spool::write_atomic(path, &bytes)
        };
        write(&self.path).map_err(|source| SnapshotError::Write {
            path: self.path.clone(),
            source,
        })?;
        self.dirty = false;
        self.saved_at = Instant::now();
        if let Some(spool) = spool {
            spool.set_cursor(&cursor_name(&self.upstream), release_to);
        }
        Ok(())
    }
}

/// Debug builds only: a file `<data_dir>/state/<upstream>.hold-promotion` stops the
/// snapshot at the crash point between a reconcile's durable marker and its
/// promotion, so that a test can kill the process there without racing it. Release
/// builds never look.
fn hold_promotion(data_dir: &Path, upstream: &str) -> bool {
    cfg!(debug_assertions)
        && data_dir
            .join("state")
            .join(format!("{upstream}.hold-promotion"))
            .exists()
}

#[cfg(test)]
mod tests;
