//! The durable spool: every accepted event is appended to a segmented, checksummed
//! log under `<dir>` before it is acknowledged, and each forwarder reads it back from
//! its own persisted cursor, so a crash costs re-delivery, never loss.
//!
//! ```text
//! <dir>/format                                the spool format, `eventgate spool format 1`
//! <dir>/segments/<first seq, 20 digits>.log   records, rolled at segment_bytes
//! <dir>/cursors                               forwarder -> next seq to deliver
//! <dir>/corrupt/                              bad bytes found at open, kept aside
//! ```
//!
//! The format stamp's rule: a change an older eventgate cannot read correctly (a new
//! record layout, a kind bit it would take for damage, another cursors file) bumps
//! [`format::CURRENT`]; one it reads correctly does not. An eventgate refuses a spool
//! of a newer format before reading, moving or writing anything in it, naming both
//! formats, instead of quarantining records it does not understand.
//!
//! Appending only encodes into a shared buffer; one writer thread owns the file,
//! writes what accumulated with one `write_all` and syncs it once for the whole group
//! (`fsync = "batch"`), so concurrent publishers share an fdatasync.

mod backlog;
pub(crate) mod cursors;
mod files;
pub(crate) mod format;
#[cfg(test)]
mod gate;
pub(crate) mod metric_table;
mod open;
mod reader;
pub(crate) mod record;
mod recovery;
pub(crate) mod settings;
mod shared;
pub(crate) mod space;
mod window;
mod writer;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use thiserror::Error;

use crate::event::Event;
pub(crate) use files::{seal, unseal, write_atomic};
#[cfg(test)]
pub(crate) use gate::Gate;
pub(crate) use reader::Reader;
pub(crate) use recovery::Recovery;
pub use settings::{Fsync, FullPolicy, SpoolSettings};
use shared::Shared;
pub use space::MinFree;
pub(crate) use space::{DiskLow, DiskSnapshot};

#[derive(Debug, Error)]
pub enum SpoolError {
    #[error("invalid spool settings: {0}")]
    Settings(String),
    #[error("cannot {action} {path:?}")]
    Dir {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot start the spool writer thread")]
    Thread(#[source] io::Error),
    #[error("event seq {got} appended out of order: the spool expects {expected}")]
    OutOfOrder { expected: u64, got: u64 },
    #[error("event seq {seq} is too large for the spool ({bytes} bytes; at most {max})")]
    TooLarge { seq: u64, bytes: usize, max: usize },
    #[error("the spool is closed")]
    Closed,
    #[error("the spool cannot write to disk")]
    Write(#[source] Arc<io::Error>),
    #[error(
        "spool {} has format {found}, written by a newer eventgate; this eventgate reads format {known} and older: upgrade eventgate, or move the directory aside to start with an empty spool (nothing in it was read or changed)",
        dir.display()
    )]
    TooNew {
        dir: PathBuf,
        found: u32,
        known: u32,
    },
    #[error(
        "the spool's format stamp {} is damaged ({problem}); it is not rewritten by guess: if this eventgate wrote the spool, delete the stamp and it is written again at the next start, else move the spool directory aside",
        path.display()
    )]
    FormatDamaged { path: PathBuf, problem: String },
    #[error("cannot read spool segment {path:?}")]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// `reserve` waited `block_timeout` and the spool stayed full.
#[derive(Debug, Error)]
#[error(
    "the spool is full ({bytes} of {max} bytes held for forwarders that have not delivered them) and stayed full for {waited:?}; the event was not accepted, retry later"
)]
pub struct SpoolFull {
    pub bytes: u64,
    pub max: u64,
    pub waited: Duration,
}

/// Records a forwarder lost under `full = "drop_oldest"`: seqs `first_seq..=last_seq`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dropped {
    pub forwarder: String,
    pub first_seq: u64,
    pub last_seq: u64,
    pub count: u64,
}

/// Proof of an append, redeemed with [`Spool::durable`], or awaited itself: it
/// resolves once the record is durable per the fsync mode. Awaiting it is cancel-safe,
/// so a caller can keep many in flight and poll the oldest.
#[derive(Debug)]
#[must_use]
pub struct Ticket {
    pub seq: u64,
    /// Answered by the writer alone for this record, so a sync wakes exactly the
    /// publishers it made durable.
    done: tokio::sync::oneshot::Receiver<Result<(), SpoolError>>,
}

impl std::future::Future for Ticket {
    type Output = Result<(), SpoolError>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        // A writer gone without answering has stopped: the record's fate is unknown.
        std::pin::Pin::new(&mut self.done)
            .poll(cx)
            .map(|answer| answer.unwrap_or(Err(SpoolError::Closed)))
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpoolStats {
    /// Bytes of segment files written.
    pub bytes: u64,
    pub segments: usize,
    /// The oldest seq that may still be in the spool.
    pub first_seq: u64,
    pub next_seq: u64,
    /// Every record up to this seq is durable (0: none yet).
    pub durable_seq: u64,
    /// Writes of a group of records since open, and fdatasyncs: with `batch`,
    /// appended records / groups is how many publishers shared each sync.
    pub groups: u64,
    pub fsyncs: u64,
}

/// The spool; cheap to clone.
#[derive(Clone)]
pub struct Spool {
    handle: Arc<Handle>,
}

/// Dropping the last handle stops the writer once it has written what it holds.
struct Handle {
    shared: Arc<Shared>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        state.closing = true;
        state.writer_idle = false;
        self.shared.wake.notify_one();
    }
}

impl Spool {
    /// Opens (or creates) the spool in `dir`, recovering what a crash left behind.
    /// `forwarders` are the configured forwarder names: cursors of other names are
    /// dropped, new names start at `next_seq`. Fails only when the directory itself
    /// cannot be used; damaged content is repaired and reported in [`Recovery`].
    pub fn open(
        dir: &Path,
        settings: &SpoolSettings,
        forwarders: &[&str],
    ) -> Result<(Spool, Recovery), SpoolError> {
        let (shared, thread, report) = open::open(dir, settings, forwarders)?;
        let handle = Handle {
            shared,
            thread: Mutex::new(Some(thread)),
        };
        Ok((
            Spool {
                handle: Arc::new(handle),
            },
            report,
        ))
    }

    fn shared(&self) -> &Arc<Shared> {
        &self.handle.shared
    }

    /// The seq the next `append` must carry.
    pub fn next_seq(&self) -> u64 {
        self.shared().lock().next_seq
    }

    /// Makes room for about `bytes` more (call before `append`, outside any order
    /// lock). Under `block` it waits up to `block_timeout` for cursors to free a
    /// segment; under `drop_oldest` it deletes the oldest segments and returns what
    /// each forwarder lost (empty when nothing was dropped).
    pub async fn reserve(&self, bytes: usize) -> Result<Vec<Dropped>, SpoolFull> {
        let shared = self.shared();
        let max = shared.settings.max_bytes.0;
        let waited = shared.settings.block_timeout;
        let mut dropped = Vec::new();
        // The common case, room to spare, takes the lock once and registers no waiter.
        {
            let state = shared.lock();
            if state.total_bytes + state.buf.len() as u64 + bytes as u64 <= max || state.closing {
                return Ok(dropped);
            }
        }
        let deadline = tokio::time::Instant::now() + waited;
        loop {
            let notified = shared.room.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let held = {
                let mut state = shared.lock();
                let held = state.total_bytes + state.buf.len() as u64;
                if held + bytes as u64 <= max || state.closing {
                    return Ok(dropped);
                }
                if shared.settings.full == FullPolicy::DropOldest {
                    match state.drop_oldest() {
                        Some(lost) => {
                            report_dropped(&lost);
                            dropped.extend(lost);
                            state.publish_gauges();
                            shared.wake_writer(&mut state);
                            continue;
                        }
                        // Only the active segment is left: it cannot go, and the
                        // limit is kept at segment granularity.
                        None => return Ok(dropped),
                    }
                }
                held
            };
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                metrics::counter!("eventgate_spool_full_timeouts_total").increment(1);
                return Err(SpoolFull {
                    bytes: held,
                    max,
                    waited,
                });
            }
        }
    }

    /// Refuses while free space on the spool's file system is below `min_free` (call
    /// before `reserve`; one atomic load).
    pub fn check_space(&self) -> Result<(), DiskLow> {
        self.shared().reserve.check()
    }

    /// The reserve's figures; `None` when `min_free` is 0 (off).
    pub fn disk(&self) -> Option<DiskSnapshot> {
        let reserve = &self.shared().reserve;
        reserve.enabled().then(|| reserve.snapshot())
    }

    /// The write or sync error that stopped the spool, if one did.
    pub fn fault(&self) -> Option<Arc<io::Error>> {
        self.shared().progress.borrow().failed.clone()
    }

    /// Resolves once a write or sync has failed: the spool accepts nothing after it,
    /// and its owner should stop (and be restarted) rather than run on refusing.
    pub async fn failed(&self) -> Arc<io::Error> {
        let mut progress = self.shared().progress.subscribe();
        let failed = progress
            .wait_for(|p| p.failed.is_some())
            .await
            .ok()
            .and_then(|seen| seen.failed.clone());
        match failed {
            Some(error) => error,
            // The sender lives as long as the spool, so this is never reached.
            None => std::future::pending().await,
        }
    }

    /// Appends `event` (whose seq must be `next_seq()`); never touches the disk. Wait
    /// on the ticket with [`Spool::durable`] before acknowledging the event.
    pub fn append(&self, event: &Event) -> Result<Ticket, SpoolError> {
        let shared = self.shared();
        let mut state = shared.lock();
        if let Some(error) = &state.failed {
            return Err(SpoolError::Write(Arc::clone(error)));
        }
        if state.closing {
            return Err(SpoolError::Closed);
        }
        if event.seq != state.next_seq {
            return Err(SpoolError::OutOfOrder {
                expected: state.next_seq,
                got: event.seq,
            });
        }
        let start = state.buf.len();
        if let Err(body) = record::encode(event, &mut state.buf) {
            state.buf.truncate(start);
            return Err(SpoolError::TooLarge {
                seq: event.seq,
                bytes: body,
                max: record::MAX_BODY,
            });
        }
        let end = state.buf.len();
        state.ends.push((event.seq, end));
        state.next_seq += 1;
        let (tell, done) = tokio::sync::oneshot::channel();
        state.waiters.push_back((event.seq, tell));
        shared.wake_writer(&mut state);
        Ok(Ticket {
            seq: event.seq,
            done,
        })
    }

    /// Resolves once the ticket's record is durable per the fsync mode.
    pub async fn durable(&self, ticket: Ticket) -> Result<(), SpoolError> {
        ticket.await
    }

    /// Resolves once every record up to `seq` is durable per the fsync mode: what a
    /// forwarder waits for before it hands events from its queue to a sink, so that
    /// a sink never holds an event a crash can take from the spool (its seq would be
    /// given again to another event, and an upstream change told again by the next
    /// reconcile). Fails if the spool stopped (a failed write or sync, or closed)
    /// before that record was durable.
    pub async fn until_durable(&self, seq: u64) -> Result<(), SpoolError> {
        let mut progress = self.shared().progress.subscribe();
        let seen = progress
            .wait_for(|p| p.durable_seq >= seq || p.failed.is_some() || p.stopped)
            .await
            .map_err(|_| SpoolError::Closed)?;
        if seen.durable_seq >= seq {
            return Ok(());
        }
        match &seen.failed {
            Some(error) => Err(SpoolError::Write(Arc::clone(error))),
            None => Err(SpoolError::Closed),
        }
    }

    /// Tests only: holds the writer's next fdatasyncs, fails them, or lets them pass.
    #[cfg(test)]
    pub(crate) fn gate_syncs(&self, gate: Gate) {
        self.shared().gate.set(gate);
    }

    /// Reads durable records with seq >= `from_seq`, in order.
    pub fn reader(&self, from_seq: u64) -> Reader {
        Reader::new(Arc::clone(self.shared()), from_seq)
    }

    /// The next seq `forwarder` has to deliver (`next_seq()` for an unknown name).
    pub fn cursor(&self, forwarder: &str) -> u64 {
        let state = self.shared().lock();
        state
            .cursors
            .get(forwarder)
            .copied()
            .unwrap_or(state.next_seq)
    }

    /// Records that `forwarder` delivered everything below `next_seq`. Never moves a
    /// cursor back. Persisted within a second (and at `close`); segments every cursor
    /// has passed are deleted.
    pub fn set_cursor(&self, forwarder: &str, next_seq: u64) {
        let shared = self.shared();
        let mut state = shared.lock();
        let limit = state.next_seq;
        let Some(cursor) = state.cursors.get_mut(forwarder) else {
            tracing::debug!(forwarder, "cursor of an unknown forwarder ignored");
            return;
        };
        let next_seq = next_seq.min(limit);
        if next_seq <= *cursor {
            return;
        }
        *cursor = next_seq;
        let was_dirty = std::mem::replace(&mut state.cursors_dirty, true);
        let freed = state.trim();
        if freed {
            state.publish_gauges();
        }
        if freed || !was_dirty {
            shared.wake_writer(&mut state);
        }
        drop(state);
        if freed {
            shared.room.notify_waiters();
        }
    }

    /// Adds a cursor for a forwarder started while running, at `next_seq` (at most
    /// the spool's next seq), replacing any cursor of that name. Persisted with the
    /// others.
    pub fn add_cursor(&self, forwarder: &str, next_seq: u64) {
        let shared = self.shared();
        let mut state = shared.lock();
        let next_seq = next_seq.min(state.next_seq);
        state.cursors.insert(forwarder.to_owned(), next_seq);
        state.cursors_dirty = true;
        shared.wake_writer(&mut state);
    }

    /// Removes a forwarder's cursor (the forwarder was removed while running): the
    /// records only it still needed no longer hold their segments.
    /// Records that `forwarder`'s sink has everything below `next_seq`, not durably
    /// yet (its cursor follows at the next checkpoint). Only `drop_oldest` asks.
    pub fn set_delivered(&self, forwarder: &str, next_seq: u64) {
        let shared = self.shared();
        let mut state = shared.lock();
        let delivered = state.delivered.entry(forwarder.to_owned()).or_insert(0);
        *delivered = (*delivered).max(next_seq);
    }

    pub fn remove_cursor(&self, forwarder: &str) {
        let shared = self.shared();
        let mut state = shared.lock();
        state.delivered.remove(forwarder);
        if state.cursors.remove(forwarder).is_none() {
            return;
        }
        state.cursors_dirty = true;
        let freed = state.trim();
        if freed {
            state.publish_gauges();
        }
        shared.wake_writer(&mut state);
        drop(state);
        if freed {
            shared.room.notify_waiters();
        }
    }

    /// The spool's own directory.
    pub fn dir(&self) -> &std::path::Path {
        &self.handle.shared.dirs.root
    }

    pub fn settings(&self) -> &SpoolSettings {
        &self.shared().settings
    }

    pub fn stats(&self) -> SpoolStats {
        let durable_seq = self.shared().progress.borrow().durable_seq;
        let state = self.shared().lock();
        SpoolStats {
            bytes: state.total_bytes,
            segments: state.segments.len(),
            first_seq: state.first_seq(),
            next_seq: state.next_seq,
            durable_seq,
            groups: self.shared().groups.load(Ordering::Relaxed),
            fsyncs: self.shared().fsyncs.load(Ordering::Relaxed),
        }
    }

    /// Writes and syncs everything appended, persists the cursors and stops the
    /// writer thread. Appends after it fail with `Closed`.
    pub async fn close(&self) -> Result<(), SpoolError> {
        let shared = self.shared();
        {
            let mut state = shared.lock();
            state.closing = true;
            state.writer_idle = false;
            shared.wake.notify_one();
        }
        shared.room.notify_waiters();
        let thread = self
            .handle
            .thread
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(thread) = thread {
            // The writer stops as soon as it has synced; joining waits only for that.
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
        match &shared.progress.borrow().failed {
            Some(error) => Err(SpoolError::Write(Arc::clone(error))),
            None => Ok(()),
        }
    }
}

fn report_dropped(lost: &[Dropped]) {
    for d in lost {
        metrics::counter!("eventgate_spool_dropped_records_total", "forwarder" => d.forwarder.clone())
            .increment(d.count);
        tracing::warn!(
            forwarder = d.forwarder,
            first_seq = d.first_seq,
            last_seq = d.last_seq,
            count = d.count,
            "spool full: dropped the oldest records this forwarder had not delivered"
        );
    }
}

#[cfg(test)]
mod tests;
