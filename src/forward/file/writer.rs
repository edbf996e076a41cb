//! The synchronous writer behind the file forwarder. Every method blocks on file I/O;
//! the forwarder calls them from blocking threads only.
//!
//! Torn lines: a batch is rendered into memory and written with one `write_all` per
//! segment (the lines between two commits). If the write or the sync fails, the file
//! is truncated back to its length at the last commit before the error is returned,
//! so the retried batch starts on a line boundary. If even the truncation fails, no
//! further byte is written until it succeeds. A reader tailing the file may briefly
//! see a partial line (or lines) that later disappear; once the writer is idle, the
//! file holds whole lines only.
//!
//! Duplicates: the writer remembers the highest sequence number it committed and
//! skips events up to it when a batch is sent again, e.g. after a size rotation in the
//! middle of a batch was followed by an error, or after the pipeline timed out an
//! attempt that then completed.

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use super::archive::{self, Archive};
#[cfg(test)]
use super::disk::Faults;
pub use super::disk::{Clock, SystemClock, WriteError};
use super::disk::{open_active, write_all};
use super::options::{FileOptions, Fsync};
use super::render_into;
use crate::event::Event;

pub struct Writer {
    name: Arc<str>,
    path: PathBuf,
    options: FileOptions,
    archive: Arc<Archive>,
    /// Called after each rotation (to start compression and pruning).
    rotated: Box<dyn Fn() + Send>,
    clock: Arc<dyn Clock>,
    /// `None` after a rotation renamed the file but could not create the next one.
    file: Option<File>,
    /// Bytes in the active file, whole lines only.
    len: u64,
    /// `len` at the last commit: where a failed write is cut back to.
    committed_len: u64,
    /// Highest sequence number written and synced per policy.
    committed_seq: Option<u64>,
    /// A failed write could not be cut back; bytes past `committed_len` may exist.
    torn: bool,
    unsynced: bool,
    last_sync: SystemTime,
    /// When the first line of the active file was written (its age for `max_age`).
    first_line_at: Option<SystemTime>,
    warned_raw: bool,
    #[cfg(test)]
    pub faults: Faults,
}

impl Writer {
    /// Opens (or creates) the active file. A partial last line left by a crash is cut
    /// off, so appended lines never run into it.
    pub fn open(
        name: Arc<str>,
        path: PathBuf,
        options: FileOptions,
        archive: Arc<Archive>,
        rotated: Box<dyn Fn() + Send>,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, WriteError> {
        let now = clock.now();
        let (file, len) = open_active(&name, &path)?;
        let first_line_at = (len > 0).then(|| {
            file.metadata()
                .and_then(|m| m.created().or_else(|_| m.modified()))
                .unwrap_or(now)
        });
        Ok(Self {
            name,
            path,
            options,
            archive,
            rotated,
            clock,
            file: Some(file),
            len,
            committed_len: len,
            committed_seq: None,
            torn: false,
            unsynced: false,
            last_sync: now,
            first_line_at,
            warned_raw: false,
            #[cfg(test)]
            faults: Faults::default(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes a batch (events in ascending `seq`), rotating between lines as needed.
    /// `Ok` once every line is written and synced per the fsync policy.
    pub fn write_batch(&mut self, events: &[Arc<Event>]) -> Result<(), WriteError> {
        self.repair()?;
        let done = self.committed_seq;
        let skip = events.partition_point(|e| done.is_some_and(|done| e.seq <= done));
        let events = &events[skip..];
        let Some(last) = events.last() else {
            return Ok(());
        };
        let now = self.clock.now();
        if self.age_due(now) {
            self.rotate("age")?;
        }
        self.ensure_file()?;

        let mut pending = Vec::with_capacity(events.len() * 256);
        let mut pending_seq = None;
        for event in events {
            let mark = pending.len();
            if !render_into(&mut pending, event, self.options.format) {
                self.raw_payload(event);
            }
            let line = (pending.len() - mark) as u64;
            let before = self.len + mark as u64;
            if self.options.max_size > 0 && before > 0 && before + line > self.options.max_size {
                let rest = pending.split_off(mark);
                if let Some(seq) = pending_seq {
                    self.write_segment(&pending)?;
                    self.commit(seq, true)?;
                }
                self.rotate("size")?;
                pending = rest;
            }
            pending_seq = Some(event.seq);
            if self.options.fsync == Fsync::Always {
                self.write_segment(&pending)?;
                self.commit(event.seq, true)?;
                pending.clear();
                pending_seq = None;
            }
        }
        if let Some(seq) = pending_seq {
            self.write_segment(&pending)?;
            self.commit(seq, false)?;
        }
        debug_assert_eq!(self.committed_seq, Some(last.seq));
        Ok(())
    }

    /// Periodic work between batches: a due interval sync, a due age rotation.
    pub fn tick(&mut self) {
        let now = self.clock.now();
        if self.options.fsync == Fsync::Interval
            && self.unsynced
            && !self.torn
            && elapsed(self.last_sync, now) >= self.options.fsync_interval
            && let Err(error) = self.sync()
        {
            self.log_error(&error, "interval sync failed");
        }
        if self.age_due(now)
            && !self.torn
            && let Err(error) = self.rotate("age")
        {
            self.log_error(&error, "rotation by age failed; will try again");
        }
    }

    /// Syncs what is written (unless `fsync = "never"`). For shutdown.
    pub fn flush(&mut self) -> Result<(), WriteError> {
        if self.unsynced && !self.torn && self.options.fsync != Fsync::Never {
            self.sync()?;
        }
        Ok(())
    }

    fn age_due(&self, now: SystemTime) -> bool {
        !self.options.max_age.is_zero()
            && self.len > 0
            && self
                .first_line_at
                .is_some_and(|at| elapsed(at, now) >= self.options.max_age)
    }

    fn write_segment(&mut self, bytes: &[u8]) -> Result<(), WriteError> {
        let result = match self.file.as_mut() {
            Some(file) => write_all(
                file,
                bytes,
                #[cfg(test)]
                &mut self.faults,
            ),
            None => Err(io::Error::other("no active file")),
        };
        match result {
            Ok(()) => {
                if self.len == 0 {
                    self.first_line_at = Some(self.clock.now());
                }
                self.len += bytes.len() as u64;
                self.unsynced = true;
                metrics::counter!("eventgate_file_written_bytes_total", "forwarder" => self.name.to_string())
                    .increment(bytes.len() as u64);
                Ok(())
            }
            Err(source) => {
                self.cut_back();
                Err(self.failed(
                    "write",
                    WriteError::Write {
                        path: self.path.clone(),
                        source,
                    },
                ))
            }
        }
    }

    /// Makes everything written so far count as delivered, syncing first as the
    /// policy asks. `closing`: the file is about to be rotated away.
    fn commit(&mut self, seq: u64, closing: bool) -> Result<(), WriteError> {
        let sync = match self.options.fsync {
            Fsync::Always | Fsync::Batch => true,
            Fsync::Interval => {
                closing || elapsed(self.last_sync, self.clock.now()) >= self.options.fsync_interval
            }
            Fsync::Never => false,
        };
        if sync && let Err(error) = self.sync() {
            self.cut_back();
            return Err(error);
        }
        self.committed_len = self.len;
        self.committed_seq = Some(seq);
        Ok(())
    }

    fn sync(&mut self) -> Result<(), WriteError> {
        let started = Instant::now();
        let result = match self.file.as_ref() {
            #[cfg(test)]
            Some(_) if std::mem::take(&mut self.faults.sync) => {
                Err(io::Error::from_raw_os_error(libc::EIO))
            }
            Some(file) => file.sync_data(),
            None => Ok(()),
        };
        metrics::histogram!("eventgate_file_fsync_seconds", "forwarder" => self.name.to_string())
            .record(started.elapsed().as_secs_f64());
        match result {
            Ok(()) => {
                self.unsynced = false;
                self.last_sync = self.clock.now();
                Ok(())
            }
            Err(source) => Err(self.failed(
                "sync",
                WriteError::Sync {
                    path: self.path.clone(),
                    source,
                },
            )),
        }
    }

    /// Cuts the file back to the last commit after a failed write or sync.
    fn cut_back(&mut self) {
        self.len = self.committed_len;
        self.torn = true;
        if let Err(error) = self.repair() {
            self.log_error(&error, "cannot remove a partly written batch yet; no more lines are written until this succeeds");
        }
    }

    fn repair(&mut self) -> Result<(), WriteError> {
        if !self.torn {
            return Ok(());
        }
        if let Some(file) = self.file.as_ref() {
            file.set_len(self.committed_len)
                .map_err(|source| WriteError::Repair {
                    path: self.path.clone(),
                    len: self.committed_len,
                    source,
                })?;
        }
        self.len = self.committed_len;
        self.torn = false;
        Ok(())
    }

    /// Renames the active file into the archive and starts a new one. Only called at
    /// a commit point, so the renamed file ends on a whole line.
    fn rotate(&mut self, reason: &'static str) -> Result<(), WriteError> {
        if self.file.is_none() || self.len == 0 {
            return Ok(());
        }
        if self.unsynced && self.options.fsync != Fsync::Never {
            self.sync()?;
        }
        let to = match self.archive.next_rotated_path(self.clock.now()) {
            Ok(to) => to,
            Err(source) => {
                return Err(self.failed(
                    "rotate",
                    WriteError::Rotate {
                        path: self.path.clone(),
                        to: self.archive.dir().to_path_buf(),
                        source,
                    },
                ));
            }
        };
        if let Err(source) = fs::rename(&self.path, &to) {
            return Err(self.failed(
                "rotate",
                WriteError::Rotate {
                    path: self.path.clone(),
                    to,
                    source,
                },
            ));
        }
        self.file = None;
        self.len = 0;
        self.committed_len = 0;
        self.first_line_at = None;
        self.unsynced = false;
        metrics::counter!("eventgate_file_rotations_total", "forwarder" => self.name.to_string(), "reason" => reason)
            .increment(1);
        tracing::info!(forwarder = %self.name, to = %to.display(), reason, "rotated the file");
        (self.rotated)();
        self.ensure_file()
    }

    fn ensure_file(&mut self) -> Result<(), WriteError> {
        if self.file.is_some() {
            return Ok(());
        }
        let (file, len) =
            open_active(&self.name, &self.path).map_err(|error| self.failed("open", error))?;
        if self.options.fsync != Fsync::Never
            && let Err(source) = archive::sync_dir(self.archive.dir())
        {
            return Err(self.failed(
                "sync",
                WriteError::Sync {
                    path: self.archive.dir().to_path_buf(),
                    source,
                },
            ));
        }
        self.file = Some(file);
        self.len = len;
        self.committed_len = len;
        self.first_line_at = (len > 0).then(|| self.clock.now());
        Ok(())
    }

    fn raw_payload(&mut self, event: &Event) {
        metrics::counter!("eventgate_file_raw_payloads_total", "forwarder" => self.name.to_string())
            .increment(1);
        if !std::mem::replace(&mut self.warned_raw, true) {
            tracing::warn!(forwarder = %self.name, seq = event.seq, type_url = event.type_url(), "an event payload cannot be decoded; archived as base64 under \"raw\" (counted in eventgate_file_raw_payloads_total, not logged again)");
        }
    }

    fn failed(&self, op: &'static str, error: WriteError) -> WriteError {
        metrics::counter!("eventgate_file_errors_total", "forwarder" => self.name.to_string(), "op" => op)
            .increment(1);
        error
    }

    fn log_error(&self, error: &WriteError, what: &str) {
        tracing::error!(forwarder = %self.name, error = %super::chain(error), "{what}");
    }
}

fn elapsed(since: SystemTime, now: SystemTime) -> Duration {
    now.duration_since(since).unwrap_or(Duration::ZERO)
}
