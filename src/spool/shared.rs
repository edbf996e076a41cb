//! State shared by the API, the writer thread and readers.

use std::collections::VecDeque;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use tokio::sync::{Notify, oneshot, watch};

use super::cursors::Cursors;
use super::files::Dirs;
use super::settings::SpoolSettings;
use super::space::Reserve;
use super::{Dropped, SpoolError};

pub(super) struct Shared {
    pub dirs: Dirs,
    pub settings: SpoolSettings,
    /// Free space on the spool's file system against `min_free`; refreshed by the
    /// writer, checked before every append.
    pub reserve: Reserve,
    pub state: Mutex<State>,
    /// Wakes the writer thread (only signalled when it is idle).
    pub wake: Condvar,
    pub progress: watch::Sender<Progress>,
    /// Signalled whenever segments are freed, for `reserve` under `block`.
    pub room: Notify,
    /// Groups written and fdatasyncs done, for stats (group commit's effect).
    pub groups: AtomicU64,
    pub fsyncs: AtomicU64,
    #[cfg(test)]
    pub gate: super::gate::SyncGate,
}

/// What the writer has made durable; readers and `durable` wait on it.
#[derive(Clone, Debug, Default)]
pub(super) struct Progress {
    /// Every record up to and including this seq is durable per the fsync mode.
    pub durable_seq: u64,
    /// The first write or sync error; the spool accepts nothing after it.
    pub failed: Option<Arc<io::Error>>,
    /// The writer thread has stopped (after `close`, or when the spool was dropped).
    pub stopped: bool,
}

/// One segment file; the last one in [`State::segments`] is the one being written.
#[derive(Clone, Debug)]
pub(super) struct Segment {
    /// From the file name: no record in it has a smaller seq.
    pub first_seq: u64,
    /// One past the last record written to it.
    pub end_seq: u64,
    /// Bytes fully written; readers never read past this.
    pub bytes: u64,
    pub path: PathBuf,
}

pub(super) struct State {
    pub next_seq: u64,
    /// Encoded records appended but not yet taken by the writer.
    pub buf: Vec<u8>,
    /// `(seq, end offset in buf)` of each record in `buf`.
    pub ends: Vec<(u64, usize)>,
    pub segments: VecDeque<Segment>,
    /// Sum of `segments[..].bytes`.
    pub total_bytes: u64,
    pub cursors: Cursors,
    pub cursors_dirty: bool,
    /// Where each forwarder's sink has got, ahead of its cursor until its next
    /// checkpoint makes it durable. In memory only: what `drop_oldest` reports as
    /// lost is what a forwarder's sink never received.
    pub delivered: Cursors,
    /// Segment files to delete (on the writer thread, off the callers' path).
    pub doomed: Vec<PathBuf>,
    pub closing: bool,
    pub writer_idle: bool,
    pub failed: Option<Arc<io::Error>>,
    /// Publishers waiting for their record, in seq order.
    pub waiters: VecDeque<(u64, oneshot::Sender<Result<(), SpoolError>>)>,
    pub gauges: Gauges,
}

/// The spool's size gauges, looked up once: the writer sets them after every group,
/// and a lookup hashes the key each time.
pub(super) struct Gauges {
    bytes: metrics::Gauge,
    segments: metrics::Gauge,
}

impl Gauges {
    pub(super) fn new() -> Self {
        Self {
            bytes: metrics::gauge!("eventgate_spool_bytes"),
            segments: metrics::gauge!("eventgate_spool_segments"),
        }
    }
}

impl Shared {
    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain data behind, still consistent
        // enough to keep serving or to close.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn wake_writer(&self, state: &mut State) {
        if state.writer_idle {
            state.writer_idle = false;
            self.wake.notify_one();
        }
    }
}

impl State {
    /// The oldest seq any registered forwarder still needs.
    pub(super) fn min_cursor(&self) -> u64 {
        self.cursors
            .values()
            .copied()
            .min()
            .unwrap_or(self.next_seq)
    }

    /// Forgets segments every cursor has passed; true when something was freed.
    pub(super) fn trim(&mut self) -> bool {
        let min = self.min_cursor();
        let mut freed = false;
        while self.segments.len() > 1 && self.segments[0].end_seq <= min {
            self.pop_front();
            freed = true;
        }
        freed
    }

    /// `drop_oldest`: deletes the oldest segment whatever the cursors say, moves the
    /// cursors that were inside it past it, and says what each forwarder lost. `None`
    /// when only the active segment is left.
    pub(super) fn drop_oldest(&mut self) -> Option<Vec<Dropped>> {
        if self.segments.len() < 2 {
            return None;
        }
        let segment = self.pop_front()?;
        let mut dropped = Vec::new();
        for (name, cursor) in &mut self.cursors {
            if *cursor < segment.end_seq {
                let reached = self
                    .delivered
                    .get(name)
                    .map_or(*cursor, |d| (*d).max(*cursor));
                let first = reached.max(segment.first_seq);
                if first < segment.end_seq {
                    dropped.push(Dropped {
                        forwarder: name.clone(),
                        first_seq: first,
                        last_seq: segment.end_seq - 1,
                        count: segment.end_seq - first,
                    });
                }
                *cursor = segment.end_seq;
                self.cursors_dirty = true;
            }
        }
        Some(dropped)
    }

    fn pop_front(&mut self) -> Option<Segment> {
        let segment = self.segments.pop_front()?;
        self.total_bytes -= segment.bytes;
        self.doomed.push(segment.path.clone());
        Some(segment)
    }

    pub(super) fn first_seq(&self) -> u64 {
        self.segments.front().map_or(self.next_seq, |s| s.first_seq)
    }

    pub(super) fn publish_gauges(&self) {
        self.gauges.bytes.set(self.total_bytes as f64);
        self.gauges.segments.set(self.segments.len() as f64);
    }
}
