//! The writer thread: the only owner of the active segment file. It takes whatever
//! was appended since its last turn, writes it with one `write_all`, syncs per the
//! fsync mode and publishes the durable position. Publishers that append while a
//! sync is running are taken together on the next turn (group commit).
//!
//! Gathering: publishers answered by one fdatasync send their next events together,
//! but microseconds apart, and each waits for its answer before sending again. If the
//! writer synced as soon as the first of them arrived, the others would wait for the
//! whole next sync and groups would alternate between one record and the rest
//! (measured: 1.6 records per sync with 4 publishers). So when fewer records wait than
//! the last group held, the writer waits for the rest, at most as long as the last
//! fdatasync took (never more than `GATHER_MAX`): what a late publisher would
//! otherwise wait anyway. A single publisher never waits: its group was one record.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::SpoolError;
use super::cursors;
use super::files;
use super::settings::Fsync;
use super::shared::{Segment, Shared};
use super::space::{REFRESH_MIN, REFRESH_PERIOD};

/// How often dirty cursors are written at most.
const CURSOR_PERIOD: Duration = Duration::from_secs(1);

/// The longest wait for the rest of a group, whatever the disk's sync time.
const GATHER_MAX: Duration = Duration::from_millis(1);

/// The last group, which the next one waits to match (see the module doc).
#[derive(Default)]
pub(super) struct Gather {
    records: usize,
    sync: Duration,
}

pub(super) struct Writer {
    pub shared: Arc<Shared>,
    /// The active segment, open for appending.
    pub file: File,
    /// Its length.
    pub len: u64,
    /// Whether the active segment holds any record (a roll never leaves an empty file).
    pub has_records: bool,
    pub metrics: WriterMetrics,
    pub gather: Gather,
}

/// Looked up once: each turn records several, and a lookup hashes the key every time.
pub(super) struct WriterMetrics {
    group_records: metrics::Histogram,
    fsyncs: metrics::Counter,
    fsync_seconds: metrics::Histogram,
}

impl WriterMetrics {
    pub(super) fn new() -> Self {
        Self {
            group_records: metrics::histogram!("eventgate_spool_group_records"),
            fsyncs: metrics::counter!("eventgate_spool_fsyncs_total"),
            fsync_seconds: metrics::histogram!("eventgate_spool_fsync_seconds"),
        }
    }
}

/// One turn's work, taken under the lock.
struct Turn {
    buf: Vec<u8>,
    ends: Vec<(u64, usize)>,
    doomed: Vec<std::path::PathBuf>,
    cursors: Option<cursors::Cursors>,
    closing: bool,
}

impl Writer {
    pub(super) fn run(mut self) {
        let mut last_persist = Instant::now();
        let mut last_refresh = Instant::now();
        let mut spare = (Vec::new(), Vec::new());
        loop {
            let turn = self.take(&mut spare, last_persist, last_refresh);
            if !turn.buf.is_empty() {
                let failed = self.shared.lock().failed.is_some();
                if !failed && let Err(error) = self.write_group(&turn.buf, &turn.ends) {
                    self.fail(error);
                }
            }
            // After writes (at most every REFRESH_MIN: a statvfs costs about 2 us, a
            // busy writer turns thousands of times a second), and at least every
            // REFRESH_PERIOD while idle: the sinks on the same disk keep writing when
            // nothing is published.
            if last_refresh.elapsed() >= REFRESH_MIN {
                self.shared.reserve.refresh();
                last_refresh = Instant::now();
            }
            spare = (turn.buf, turn.ends);
            spare.0.clear();
            spare.1.clear();
            let mut doomed = turn.doomed;
            if let Some(cursors) = turn.cursors {
                last_persist = Instant::now();
                if let Err(error) = cursors::save(&self.shared.dirs.cursors(), &cursors) {
                    tracing::warn!(%error, "cannot persist spool cursors; they will be retried");
                    let mut state = self.shared.lock();
                    state.cursors_dirty = true;
                    state.doomed.append(&mut doomed);
                }
            }
            for path in &doomed {
                if let Err(error) = std::fs::remove_file(path) {
                    tracing::warn!(path = %path.display(), %error, "cannot delete a spool segment");
                }
            }
            if turn.closing {
                self.finish();
                return;
            }
        }
    }

    /// Waits until there is something to do (or the free space is due for a look)
    /// and takes it.
    fn take(
        &self,
        spare: &mut (Vec<u8>, Vec<(u64, usize)>),
        last_persist: Instant,
        last_refresh: Instant,
    ) -> Turn {
        let mut state = self.shared.lock();
        loop {
            let since = last_persist.elapsed();
            let cursors_due = state.cursors_dirty && since >= CURSOR_PERIOD;
            let refresh_in = REFRESH_PERIOD.saturating_sub(last_refresh.elapsed());
            if !state.buf.is_empty()
                || (!state.doomed.is_empty() && !state.cursors_dirty)
                || cursors_due
                || state.closing
                || refresh_in.is_zero()
            {
                break;
            }
            let wait = if state.cursors_dirty {
                CURSOR_PERIOD.saturating_sub(since).min(refresh_in)
            } else {
                refresh_in
            };
            state.writer_idle = true;
            state = self
                .shared
                .wake
                .wait_timeout(state, wait)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
            state.writer_idle = false;
        }
        if self.shared.settings.fsync == Fsync::Batch
            && !state.buf.is_empty()
            && state.ends.len() < self.gather.records
        {
            let until = Instant::now() + self.gather.sync.min(GATHER_MAX);
            while state.ends.len() < self.gather.records && !state.closing {
                let left = until.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                state.writer_idle = true;
                state = self
                    .shared
                    .wake
                    .wait_timeout(state, left)
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .0;
                state.writer_idle = false;
            }
        }
        std::mem::swap(&mut state.buf, &mut spare.0);
        std::mem::swap(&mut state.ends, &mut spare.1);
        let buf = std::mem::take(&mut spare.0);
        let ends = std::mem::take(&mut spare.1);
        // Closing ends only once everything appended before it is written.
        let closing = state.closing && buf.is_empty();
        let persist = state.cursors_dirty && (closing || last_persist.elapsed() >= CURSOR_PERIOD);
        let cursors = persist.then(|| {
            state.cursors_dirty = false;
            state.cursors.clone()
        });
        // A segment goes only once the cursors that passed it are on disk (persisted
        // in this turn, before the deletion, or already): deleted first, a crash
        // would restart its forwarders at their older cursors, in records that are
        // gone, and report them as discarded from a full spool.
        let doomed = match state.cursors_dirty {
            true => Vec::new(),
            false => std::mem::take(&mut state.doomed),
        };
        Turn {
            buf,
            ends,
            doomed,
            cursors,
            closing,
        }
    }

    fn write_group(&mut self, buf: &[u8], ends: &[(u64, usize)]) -> Result<(), Fault> {
        let mode = self.shared.settings.fsync;
        let limit = self.shared.settings.segment_bytes.0;
        self.metrics.group_records.record(ends.len() as f64);
        self.shared.groups.fetch_add(1, Ordering::Relaxed);
        let mut i = 0;
        let mut start = 0;
        while i < ends.len() {
            if self.len >= limit && self.has_records {
                self.roll(ends[i].0).map_err(Fault::roll)?;
            }
            // Records that start below the limit go into this segment, so it rolls at
            // a record boundary and never splits one.
            let mut j = i;
            let mut len = self.len;
            while j < ends.len() && (j == i || len < limit) {
                len += (ends[j].1 - if j == 0 { 0 } else { ends[j - 1].1 }) as u64;
                j += 1;
            }
            if mode == Fsync::Always {
                for k in i..j {
                    let from = if k == 0 { 0 } else { ends[k - 1].1 };
                    self.write(&buf[from..ends[k].1], ends[k].0)
                        .map_err(Fault::at("write"))?;
                    self.sync().map_err(Fault::at("fdatasync"))?;
                    self.publish(ends[k].0);
                }
            } else {
                self.write(&buf[start..ends[j - 1].1], ends[j - 1].0)
                    .map_err(Fault::at("write"))?;
            }
            start = ends[j - 1].1;
            i = j;
        }
        let last = ends.last().map_or(0, |e| e.0);
        match mode {
            Fsync::Always => {}
            Fsync::Batch => {
                let started = Instant::now();
                self.sync().map_err(Fault::at("fdatasync"))?;
                self.gather = Gather {
                    records: ends.len(),
                    sync: started.elapsed(),
                };
                self.publish(last);
            }
            Fsync::None => self.publish(last),
        }
        Ok(())
    }

    fn write(&mut self, bytes: &[u8], last_seq: u64) -> io::Result<()> {
        self.file.write_all(bytes)?;
        self.len += bytes.len() as u64;
        self.has_records = true;
        let mut state = self.shared.lock();
        state.total_bytes += bytes.len() as u64;
        if let Some(active) = state.segments.back_mut() {
            active.bytes = self.len;
            active.end_seq = last_seq + 1;
        }
        state.publish_gauges();
        Ok(())
    }

    fn sync(&self) -> io::Result<()> {
        #[cfg(test)]
        self.shared.gate.pass()?;
        let start = Instant::now();
        self.file.sync_data()?;
        self.metrics.fsyncs.increment(1);
        self.shared.fsyncs.fetch_add(1, Ordering::Relaxed);
        self.metrics.fsync_seconds.record(start.elapsed());
        Ok(())
    }

    fn publish(&self, seq: u64) {
        let mut done = Vec::new();
        {
            let mut state = self.shared.lock();
            while state.waiters.front().is_some_and(|(s, _)| *s <= seq) {
                done.extend(state.waiters.pop_front());
            }
        }
        self.shared.progress.send_modify(|p| p.durable_seq = seq);
        for (_, tell) in done {
            // A publisher that stopped waiting has nothing left to hear.
            let _ = tell.send(Ok(()));
        }
    }

    /// Answers every publisher still waiting (after a failure or at the end).
    fn answer_all(&self, error: impl Fn() -> SpoolError) {
        let waiters = std::mem::take(&mut self.shared.lock().waiters);
        for (_, tell) in waiters {
            let _ = tell.send(Err(error()));
        }
    }

    /// Closes the active segment (synced) and starts `<first_seq>.log`.
    fn roll(&mut self, first_seq: u64) -> io::Result<()> {
        self.file.sync_data()?;
        let path = self.shared.dirs.segment(first_seq);
        let file = crate::fsmode::open(OpenOptions::new().create(true).append(true), &path)?;
        files::sync_dir(&self.shared.dirs.segments)?;
        self.file = file;
        self.len = 0;
        self.has_records = false;
        let mut state = self.shared.lock();
        state.segments.push_back(Segment {
            first_seq,
            end_seq: first_seq,
            bytes: 0,
            path,
        });
        state.publish_gauges();
        tracing::debug!(first_seq, "spool segment started");
        Ok(())
    }

    /// Latches the first failure. A failed fdatasync is never retried: the kernel
    /// may have dropped the dirty pages it could not write and report the next sync
    /// as a success (PostgreSQL's "fsyncgate"), so nothing after it could be trusted
    /// as durable. A failed write could be cut back, but its records were already
    /// numbered and routed, and dropping them would leave a hole in the spool's
    /// sequence; the owner restarts instead, and recovery cuts any torn tail.
    fn fail(&self, fault: Fault) {
        let active = match fault.in_dir {
            true => None,
            false => self.shared.lock().segments.back().map(|s| s.path.clone()),
        };
        let path = active.unwrap_or_else(|| self.shared.dirs.segments.clone());
        tracing::error!(
            op = fault.op,
            path = %path.display(),
            error = %fault.source,
            "the spool cannot write to disk: it accepts no more events; a failed sync is not retried"
        );
        let error = Arc::new(io::Error::new(
            fault.source.kind(),
            DiskFault {
                op: fault.op,
                path,
                source: fault.source,
            },
        ));
        self.shared.lock().failed = Some(Arc::clone(&error));
        self.shared.progress.send_modify(|p| {
            p.failed.get_or_insert(Arc::clone(&error));
        });
        self.answer_all(|| SpoolError::Write(Arc::clone(&error)));
    }

    /// `close`: everything written is synced whatever the mode, then readers and
    /// waiters learn that the writer has stopped.
    fn finish(&self) {
        if self.shared.lock().failed.is_none() {
            match self.sync() {
                Ok(()) => {
                    let last = self.shared.lock().next_seq - 1;
                    self.publish(last);
                }
                Err(error) => self.fail(Fault::at("fdatasync")(error)),
            }
        }
        self.shared.progress.send_modify(|p| p.stopped = true);
        self.answer_all(|| SpoolError::Closed);
    }
}

/// A write, sync or roll that failed, and which of them.
pub(super) struct Fault {
    op: &'static str,
    /// About the segments directory rather than the active segment.
    in_dir: bool,
    source: io::Error,
}

impl Fault {
    fn at(op: &'static str) -> impl Fn(io::Error) -> Fault {
        move |source| Fault {
            op,
            in_dir: false,
            source,
        }
    }

    fn roll(source: io::Error) -> Fault {
        Fault {
            op: "start a new segment in",
            in_dir: true,
            source,
        }
    }
}

/// What the spool reports after a failure: the operation, the file and the OS error.
#[derive(Debug, thiserror::Error)]
#[error("cannot {op} {}", path.display())]
pub(super) struct DiskFault {
    pub op: &'static str,
    pub path: std::path::PathBuf,
    #[source]
    pub source: io::Error,
}
