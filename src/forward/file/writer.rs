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
//! Duplicates: the writer remembers the ids of the events of the last batch it
//! committed (as far as it got) and skips exactly those when that batch is sent
//! again: after a size rotation in the middle of a batch was followed by an error, or
//! after the pipeline timed out an attempt that then completed. Keyed by event id,
//! not by sequence number: a dead letter redelivered by `eventgate dlq retry` and a
//! replayed event carry sequence numbers older than what the file already holds, and
//! they are written like any other event. A skipped event is counted in
//! `eventgate_file_duplicates_skipped_total`.
//!
//! Checkpoints (see `checkpoint`): the pipeline asks the writer to make what it
//! wrote durable; it syncs, records the file's durable length with the spool position
//! in the checkpoint record, and only then may the cursor move. When the pipeline
//! sends again from its cursor ([`Writer::resume`]: at a start, or after a failed
//! checkpoint), the file is cut back to the record's length first, so the lines it
//! sends again are not written twice. A rotation records the whole rotated file
//! (synced) as a sealed checkpoint before the rename.

use std::collections::HashSet;
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use super::archive::{self, Archive};
use super::checkpoint::{self, FileId, Record};
#[cfg(test)]
use super::disk::Faults;
pub(super) use super::disk::{Clock, SystemClock, WriteError};
use super::disk::{open_active, write_all};
use super::options::{FileOptions, Fsync};
use super::render_into;
use crate::event::{Event, EventId};

pub(super) struct Writer {
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
    /// The events of the latest batch that are written and synced per policy: what
    /// a retry of that batch skips. Replaced when another batch comes, so it holds
    /// at most one batch.
    committed_ids: HashSet<EventId>,
    /// A failed write could not be cut back; bytes past `committed_len` may exist.
    torn: bool,
    unsynced: bool,
    last_sync: SystemTime,
    /// When the first line of the active file was written (its age for `max_age`).
    first_line_at: Option<SystemTime>,
    warned_raw: bool,
    /// Where the checkpoint record is kept.
    record_path: PathBuf,
    /// The last checkpoint recorded (loaded at open, or taken since).
    record: Option<Record>,
    /// Bytes of the active file the last checkpoint made durable.
    checkpoint_len: u64,
    /// The highest sequence number written since open (a rotation's record resumes
    /// after it).
    max_seq: u64,
    /// The pipeline has not said where it resumes: no rotation by age until it has
    /// (it would seal lines that are about to be cut).
    awaiting_resume: bool,
    #[cfg(test)]
    pub faults: Faults,
}

impl Writer {
    /// Opens (or creates) the active file. A partial last line left by a crash is cut
    /// off, so appended lines never run into it.
    pub(super) fn open(
        name: Arc<str>,
        path: PathBuf,
        options: FileOptions,
        archive: Arc<Archive>,
        rotated: Box<dyn Fn() + Send>,
        clock: Arc<dyn Clock>,
        record_path: PathBuf,
    ) -> Result<Self, WriteError> {
        let now = clock.now();
        let (file, len) = open_active(&name, &path)?;
        // The file's name made durable before any line in it counts as delivered: a
        // file created here and never synced into its directory is gone after a
        // power loss, checkpointed lines and all. Rotations do the same (`ensure_file`).
        if options.fsync != Fsync::Never
            && let Err(source) = archive::sync_dir(archive.dir())
        {
            return Err(WriteError::Sync {
                path: archive.dir().to_path_buf(),
                source,
            });
        }
        let record_error = |source| WriteError::Checkpoint {
            path: record_path.clone(),
            source,
        };
        let loaded = match checkpoint::load(&record_path) {
            Ok(Ok(record)) => record,
            Ok(Err(problem)) => {
                tracing::error!(forwarder = %name, path = %record_path.display(), %problem, "the checkpoint record cannot be trusted; the file is kept as it is and events after the spool cursor may be written twice");
                None
            }
            Err(source) => return Err(record_error(source)),
        };
        // No checkpoint yet: what the file holds now is the baseline (an earlier
        // version's lines, synced per batch), and what this run writes before its
        // first checkpoint is cut back after a crash like anything later. Not fatal
        // when it cannot be recorded (a device such as /dev/full cannot be synced):
        // the writes will say what is wrong.
        let record = loaded.or_else(|| {
            let baseline = file.sync_data().and_then(|()| {
                let baseline = Record {
                    next: 0,
                    file: FileId::of(&file.metadata()?),
                    len,
                    sealed: false,
                };
                checkpoint::save(&record_path, &baseline).map(|()| baseline)
            });
            match baseline {
                Ok(baseline) => Some(baseline),
                Err(error) => {
                    tracing::warn!(forwarder = %name, path = %path.display(), record = %record_path.display(), %error, "cannot record the file's starting point; until the first checkpoint, a crash may write lines twice");
                    None
                }
            }
        });
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
            committed_ids: HashSet::new(),
            torn: false,
            unsynced: false,
            last_sync: now,
            first_line_at,
            warned_raw: false,
            record_path,
            awaiting_resume: true,
            record,
            checkpoint_len: len,
            max_seq: 0,
            #[cfg(test)]
            faults: Faults::default(),
        })
    }

    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// Writes a batch in its order (the pipeline's are in ascending `seq`; redelivered
    /// dead letters and replays may be older), rotating between lines as needed.
    /// `Ok` once every line is written and synced per the fsync policy.
    pub(super) fn write_batch(&mut self, events: &[Arc<Event>]) -> Result<(), WriteError> {
        self.awaiting_resume = false;
        self.repair()?;
        self.forget_other_batches(events);
        let fresh: Vec<&Arc<Event>> = events
            .iter()
            .filter(|e| !self.committed_ids.contains(&e.identity.id))
            .collect();
        let skipped = events.len() - fresh.len();
        if skipped > 0 {
            metrics::counter!("eventgate_file_duplicates_skipped_total", "forwarder" => self.name.to_string())
                .increment(skipped as u64);
            tracing::debug!(forwarder = %self.name, skipped, "a batch came again; its events already written are skipped");
        }
        if fresh.is_empty() {
            return Ok(());
        }
        let now = self.clock.now();
        if self.age_due(now) {
            self.rotate("age")?;
        }
        self.ensure_file()?;

        let mut pending = Vec::with_capacity(fresh.len() * 256);
        // The events whose lines are in `pending`, and the highest seq among them.
        let mut pending_ids = Vec::with_capacity(fresh.len());
        let mut pending_max = 0;
        for event in fresh {
            let mark = pending.len();
            if !render_into(&mut pending, event, self.options.format) {
                self.raw_payload(event);
            }
            let line = (pending.len() - mark) as u64;
            let before = self.len + mark as u64;
            if self.options.max_size > 0 && before > 0 && before + line > self.options.max_size {
                let rest = pending.split_off(mark);
                if !pending_ids.is_empty() {
                    self.write_segment(&pending)?;
                    self.commit(&mut pending_ids, std::mem::take(&mut pending_max), true)?;
                }
                self.rotate("size")?;
                pending = rest;
            }
            pending_ids.push(event.identity.id);
            pending_max = pending_max.max(event.seq);
            if self.options.fsync == Fsync::Always {
                self.write_segment(&pending)?;
                self.commit(&mut pending_ids, std::mem::take(&mut pending_max), true)?;
                pending.clear();
            }
        }
        if !pending_ids.is_empty() {
            self.write_segment(&pending)?;
            self.commit(&mut pending_ids, pending_max, false)?;
        }
        Ok(())
    }

    /// Makes everything written durable (per the fsync policy) and records it with
    /// `next`, the spool position the pipeline persists once this returns. On error
    /// the file is cut back to the previous checkpoint: the pipeline sends everything
    /// after it again.
    pub(super) fn checkpoint(&mut self, next: u64) -> Result<(), WriteError> {
        self.repair()?;
        if self.unsynced
            && self.options.fsync != Fsync::Never
            && let Err(error) = self.sync()
        {
            self.back_to_checkpoint();
            return Err(error);
        }
        let Some(file) = self.file.as_ref() else {
            // A rotation could not create the next file: nothing was written since
            // the rotation, which recorded everything before it.
            return Ok(());
        };
        let id = match file.metadata() {
            Ok(metadata) => FileId::of(&metadata),
            Err(source) => return Err(self.checkpoint_failed(source)),
        };
        let record = Record {
            next: self.record.map_or(next, |r| r.next.max(next)),
            file: id,
            len: self.len,
            sealed: false,
        };
        if let Err(source) = self.save_record(&record) {
            return Err(self.checkpoint_failed(source));
        }
        self.record = Some(record);
        self.checkpoint_len = self.len;
        self.committed_len = self.len;
        Ok(())
    }

    /// The pipeline sends again everything from `cursor` on (its spool ends at
    /// `end`): cuts the file back to the last checkpoint, and answers where to resume
    /// (the checkpoint's position when it is ahead of the cursor).
    pub(super) fn resume(&mut self, cursor: u64, end: u64) -> Result<u64, WriteError> {
        self.awaiting_resume = false;
        let (Some(record), Some(file)) = (self.record, self.file.as_ref()) else {
            return Ok(cursor);
        };
        let id = match file.metadata() {
            Ok(metadata) => FileId::of(&metadata),
            Err(source) => {
                return Err(WriteError::Open {
                    path: self.path.clone(),
                    source,
                });
            }
        };
        match record.resume(id, self.len, end) {
            checkpoint::Resume::CutTo { len, next } => {
                if self.len > len {
                    tracing::info!(forwarder = %self.name, path = %self.path.display(), removed_bytes = self.len - len, resume_from = next.max(cursor), "cut the file back to its last checkpoint; the lines after it are written again from the spool");
                    self.committed_len = len;
                    self.torn = true;
                    self.repair()?;
                }
                self.checkpoint_len = len;
                self.committed_len = len;
                self.committed_ids.clear();
                Ok(next.max(cursor))
            }
            checkpoint::Resume::Keep(why) => {
                tracing::warn!(forwarder = %self.name, path = %self.path.display(), record = %self.record_path.display(), %why, "the checkpoint record does not apply; the file is kept as it is and events after the spool cursor may be written twice");
                self.rebase(cursor);
                Ok(cursor)
            }
        }
    }

    /// Replaces a record that does not apply with what the file holds now, at
    /// `cursor`. Kept, its position would live on: a checkpoint records the larger
    /// of the record's position and the pipeline's, and a spool that lost its tail
    /// in a power cut (`spool.fsync = "none"`) numbers new events with the lost
    /// ones' sequence numbers, which a later restart would then skip.
    fn rebase(&mut self, cursor: u64) {
        self.record = None;
        let Some(file) = self.file.as_ref() else {
            return;
        };
        let baseline = file.sync_data().and_then(|()| {
            Ok(Record {
                next: cursor,
                file: FileId::of(&file.metadata()?),
                len: self.len,
                sealed: false,
            })
        });
        match baseline.and_then(|record| self.save_record(&record).map(|()| record)) {
            Ok(record) => {
                self.record = Some(record);
                self.checkpoint_len = self.len;
                self.committed_len = self.len;
            }
            Err(error) => {
                tracing::warn!(forwarder = %self.name, record = %self.record_path.display(), %error, "cannot replace the checkpoint record; the next checkpoint will");
            }
        }
    }

    fn save_record(&mut self, record: &Record) -> io::Result<()> {
        #[cfg(test)]
        if std::mem::take(&mut self.faults.record) {
            return Err(io::Error::from_raw_os_error(libc::ENOSPC));
        }
        checkpoint::save(&self.record_path, record)
    }

    /// After a failed checkpoint: what was written since the last one goes, since
    /// the pipeline sends it again.
    fn back_to_checkpoint(&mut self) {
        self.committed_len = self.checkpoint_len;
        self.committed_ids.clear();
        self.cut_back();
    }

    fn checkpoint_failed(&mut self, source: io::Error) -> WriteError {
        self.back_to_checkpoint();
        self.failed(
            "checkpoint",
            WriteError::Checkpoint {
                path: self.record_path.clone(),
                source,
            },
        )
    }

    /// Keeps only the committed ids that `batch` holds: a retry of the last batch
    /// keeps what it already wrote; any other batch starts afresh.
    fn forget_other_batches(&mut self, batch: &[Arc<Event>]) {
        if self.committed_ids.is_empty() {
            return;
        }
        let ids: HashSet<EventId> = batch.iter().map(|e| e.identity.id).collect();
        self.committed_ids.retain(|id| ids.contains(id));
    }

    /// Periodic work between batches: a due interval sync, a due age rotation.
    pub(super) fn tick(&mut self) {
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
            && !self.awaiting_resume
            && let Err(error) = self.rotate("age")
        {
            self.log_error(&error, "rotation by age failed; will try again");
        }
    }

    /// Syncs what is written (unless `fsync = "never"`). For shutdown.
    pub(super) fn flush(&mut self) -> Result<(), WriteError> {
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

    /// Makes everything written so far (the lines of `ids`, which it empties; `max`
    /// is their highest seq) count as delivered, syncing first as the policy asks.
    /// `closing`: the file is about to be rotated away.
    fn commit(
        &mut self,
        ids: &mut Vec<EventId>,
        max: u64,
        closing: bool,
    ) -> Result<(), WriteError> {
        let sync = match self.options.fsync {
            Fsync::Always | Fsync::Batch => true,
            Fsync::Interval => {
                closing || elapsed(self.last_sync, self.clock.now()) >= self.options.fsync_interval
            }
            Fsync::Checkpoint | Fsync::Never => false,
        };
        if sync && let Err(error) = self.sync() {
            self.cut_back();
            return Err(error);
        }
        self.committed_len = self.len;
        self.committed_ids.extend(ids.drain(..));
        self.max_seq = self.max_seq.max(max);
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
        // The whole file is durable now: a crash from here on resumes after its last
        // line, whether or not the rename below happened.
        let sealed = match self.file.as_ref().map(File::metadata) {
            Some(Ok(metadata)) => Record {
                next: self
                    .record
                    .map_or(self.max_seq + 1, |r| r.next.max(self.max_seq + 1)),
                file: FileId::of(&metadata),
                len: self.len,
                sealed: true,
            },
            Some(Err(source)) => return Err(self.checkpoint_failed(source)),
            None => return Ok(()),
        };
        if let Err(source) = self.save_record(&sealed) {
            return Err(self.checkpoint_failed(source));
        }
        self.record = Some(sealed);
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
        self.checkpoint_len = 0;
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
