//! The writer thread: the only owner of the active segment file. It takes whatever
//! was appended since its last turn, writes it with one `write_all`, syncs per the
//! fsync mode and publishes the durable position. Publishers that append while a
//! sync is running are taken together on the next turn (group commit).

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

/// How often dirty cursors are written at most.
const CURSOR_PERIOD: Duration = Duration::from_secs(1);

pub struct Writer {
    pub shared: Arc<Shared>,
    /// The active segment, open for appending.
    pub file: File,
    /// Its length.
    pub len: u64,
    /// Whether the active segment holds any record (a roll never leaves an empty file).
    pub has_records: bool,
    pub metrics: WriterMetrics,
}

/// Looked up once: each turn records several, and a lookup hashes the key every time.
pub struct WriterMetrics {
    group_records: metrics::Histogram,
    fsyncs: metrics::Counter,
    fsync_seconds: metrics::Histogram,
}

impl WriterMetrics {
    pub fn new() -> Self {
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
    pub fn run(mut self) {
        let mut last_persist = Instant::now();
        let mut spare = (Vec::new(), Vec::new());
        loop {
            let turn = self.take(&mut spare, last_persist);
            if !turn.buf.is_empty() {
                let failed = self.shared.lock().failed.is_some();
                if !failed && let Err(error) = self.write_group(&turn.buf, &turn.ends) {
                    self.fail(error);
                }
            }
            spare = (turn.buf, turn.ends);
            spare.0.clear();
            spare.1.clear();
            for path in &turn.doomed {
                if let Err(error) = std::fs::remove_file(path) {
                    tracing::warn!(path = %path.display(), %error, "cannot delete a spool segment");
                }
            }
            if let Some(cursors) = turn.cursors {
                last_persist = Instant::now();
                if let Err(error) = cursors::save(&self.shared.dirs.cursors(), &cursors) {
                    tracing::warn!(%error, "cannot persist spool cursors; they will be retried");
                    self.shared.lock().cursors_dirty = true;
                }
            }
            if turn.closing {
                self.finish();
                return;
            }
        }
    }

    /// Waits until there is something to do and takes it.
    fn take(&self, spare: &mut (Vec<u8>, Vec<(u64, usize)>), last_persist: Instant) -> Turn {
        let mut state = self.shared.lock();
        loop {
            let since = last_persist.elapsed();
            let cursors_due = state.cursors_dirty && since >= CURSOR_PERIOD;
            if !state.buf.is_empty() || !state.doomed.is_empty() || cursors_due || state.closing {
                break;
            }
            let wait = if state.cursors_dirty {
                CURSOR_PERIOD - since
            } else {
                Duration::from_secs(3600)
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
        Turn {
            buf,
            ends,
            doomed: std::mem::take(&mut state.doomed),
            cursors,
            closing,
        }
    }

    fn write_group(&mut self, buf: &[u8], ends: &[(u64, usize)]) -> io::Result<()> {
        let mode = self.shared.settings.fsync;
        let limit = self.shared.settings.segment_bytes.0;
        self.metrics.group_records.record(ends.len() as f64);
        self.shared.groups.fetch_add(1, Ordering::Relaxed);
        let mut i = 0;
        let mut start = 0;
        while i < ends.len() {
            if self.len >= limit && self.has_records {
                self.roll(ends[i].0)?;
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
                    self.write(&buf[from..ends[k].1], ends[k].0)?;
                    self.sync()?;
                    self.publish(ends[k].0);
                }
            } else {
                self.write(&buf[start..ends[j - 1].1], ends[j - 1].0)?;
            }
            start = ends[j - 1].1;
            i = j;
        }
        let last = ends.last().map_or(0, |e| e.0);
        match mode {
            Fsync::Always => {}
            Fsync::Batch => {
                self.sync()?;
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
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
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

    fn fail(&self, error: io::Error) {
        tracing::error!(%error, dir = %self.shared.dirs.root.display(), "spool write failed; the spool accepts no more events until restarted");
        let error = Arc::new(error);
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
                Err(error) => self.fail(error),
            }
        }
        self.shared.progress.send_modify(|p| p.stopped = true);
        self.answer_all(|| SpoolError::Closed);
    }
}
