//! Recovery at open: every segment is scanned and every record validated (length,
//! checksum, increasing seq). A torn tail of the last segment is cut off; any other
//! bad bytes are copied into `corrupt/` and cut out of the segment, keeping every
//! intact record around them. Content never makes the spool refuse to open.
//!
//! Segments are read through a bounded [`Window`] and repaired by copying ranges, so
//! opening a spool with a large backlog holds a chunk of it in memory, not whole
//! segments, and nothing per record.

use std::fs::{self, File};
use std::io;
use std::ops::Range;
use std::path::{Path, PathBuf};

use super::files::{self, Dirs};
use super::record::{self, Check, HEADER, MIN_BODY};
use super::shared::Segment;
use super::window::{self, CHUNK, Window};

/// What recovery found and did, for the log and the caller.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Segment files kept.
    pub segments: usize,
    /// Intact records in them.
    pub records: u64,
    /// Where appending resumes.
    pub next_seq: u64,
    /// Bytes of an unfinished last record cut off the last segment (a crash mid-write;
    /// such a record was never acknowledged).
    pub truncated_bytes: u64,
    /// Bad byte ranges and unreadable segment files moved into `corrupt/`.
    pub corrupt_ranges: u64,
    pub corrupt_bytes: u64,
    /// Sequence numbers missing between intact records: records lost to corruption,
    /// now or at an earlier open (the gaps stay until their segments are deleted).
    pub missing_records: u64,
    /// Files written into `corrupt/`.
    pub quarantined: Vec<PathBuf>,
    /// Cursors of forwarders no longer configured.
    pub cursors_dropped: Vec<String>,
    /// Forwarders with no cursor yet; they start at `next_seq`.
    pub cursors_added: Vec<String>,
    /// The cursors file could not be trusted (it was moved into `corrupt/`); every
    /// forwarder starts again at the oldest record kept (re-delivery, not loss).
    pub cursors_reset: bool,
}

impl Recovery {
    /// Whether this open found damage and moved it aside (worth a warning).
    pub fn damaged(&self) -> bool {
        self.corrupt_ranges > 0 || self.cursors_reset
    }
}

/// The segments recovered, oldest first, and the last intact seq (0 when none).
pub(super) struct Recovered {
    pub segments: Vec<Segment>,
    pub last_seq: u64,
    /// The most bytes of segment files held in memory at once while scanning them.
    #[cfg(test)]
    pub read_peak: usize,
}

/// Scans `dirs.segments`; only failing to list the directory is an error.
pub(super) fn recover(dirs: &Dirs, report: &mut Recovery) -> io::Result<Recovered> {
    recover_in_chunks(dirs, report, CHUNK)
}

/// [`recover`], reading `chunk` bytes of a segment at a time.
pub(super) fn recover_in_chunks(
    dirs: &Dirs,
    report: &mut Recovery,
    chunk: usize,
) -> io::Result<Recovered> {
    let mut named = Vec::new();
    for entry in fs::read_dir(&dirs.segments)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        match files::parse_segment_name(&name) {
            Some(first_seq) => named.push((first_seq, path)),
            // Left by a rewrite that a crash interrupted; the original is intact.
            None if name.ends_with(".tmp") => remove(&path),
            None => {
                tracing::warn!(path = %path.display(), "unexpected file among spool segments; moving it aside");
                set_aside(dirs, &path, &name, report);
            }
        }
    }
    named.sort();
    let mut segments = Vec::new();
    let mut last_seq = 0;
    #[cfg(test)]
    let mut read_peak = 0;
    let count = named.len();
    for (i, (first_seq, path)) in named.into_iter().enumerate() {
        let is_last = i + 1 == count;
        let floor = last_seq.max(first_seq.saturating_sub(1));
        let scanned = File::open(&path).and_then(|file| {
            let len = file.metadata()?.len();
            let mut window = Window::new(&file, len, chunk);
            let scan = scan(&mut window, floor);
            #[cfg(test)]
            {
                read_peak = read_peak.max(window.peak());
            }
            Ok((file, len, scan?))
        });
        let (file, len, scan) = match scanned {
            Ok(scanned) => scanned,
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "cannot read a spool segment; moving it aside");
                set_aside(dirs, &path, &files::segment_name(first_seq), report);
                continue;
            }
        };
        let name = files::segment_name(first_seq);
        let kept = repair(dirs, &path, &name, &file, len, &scan, is_last, report);
        drop(file);
        let Some(kept) = kept else {
            continue;
        };
        if let Some(seq) = scan.last_seq {
            report.missing_records += scan.missing;
            last_seq = seq;
        }
        report.records += scan.records;
        if kept == 0 && !is_last {
            remove(&path);
            continue;
        }
        segments.push(Segment {
            first_seq,
            end_seq: last_seq.max(first_seq.saturating_sub(1)) + 1,
            bytes: kept,
            path,
        });
    }
    report.segments = segments.len();
    Ok(Recovered {
        segments,
        last_seq,
        #[cfg(test)]
        read_peak,
    })
}

/// What a segment holds: intact records (counted, not kept) and bad ranges; the
/// intact records are everything outside `bad` and `tail`.
struct Scan {
    records: u64,
    /// The last intact record's seq.
    last_seq: Option<u64>,
    /// Seqs missing between the floor and the intact records, and between them.
    missing: u64,
    /// Bad bytes with intact records after them.
    bad: Vec<Range<u64>>,
    /// Bad bytes running to the end of the file, and whether they are merely an
    /// unfinished record (a torn write) rather than a complete bad one.
    tail: Option<(Range<u64>, bool)>,
}

fn scan(window: &mut Window<'_>, floor: u64) -> io::Result<Scan> {
    let mut scan = Scan {
        records: 0,
        last_seq: None,
        missing: 0,
        bad: Vec::new(),
        tail: None,
    };
    let len = window.len();
    let mut last = floor;
    let mut at = 0;
    while at < len {
        let check = record::check(window.record(at)?);
        if let Check::Valid { seq, len } = check
            && seq > last
        {
            scan.records += 1;
            scan.missing += seq - last - 1;
            scan.last_seq = Some(seq);
            last = seq;
            at += len as u64;
            continue;
        }
        match resync(window, at, last)? {
            Some(next) => {
                scan.bad.push(at..next);
                at = next;
            }
            None => {
                scan.tail = Some((at..len, check == Check::Incomplete));
                break;
            }
        }
    }
    Ok(scan)
}

/// The next offset after `bad` where an intact record with a plausible seq starts:
/// larger than `last`, and no larger than the bad bytes could have held records.
fn resync(window: &mut Window<'_>, bad: u64, last: u64) -> io::Result<Option<u64>> {
    for at in bad + 1..window.len() {
        let Some(seq) = record::claimed_seq(window.get(at, HEADER + 8)?) else {
            continue;
        };
        let most = last + 1 + (at - bad) / (HEADER + MIN_BODY) as u64;
        if seq > last
            && seq <= most
            && matches!(record::check(window.record(at)?), Check::Valid { seq: s, .. } if s == seq)
        {
            return Ok(Some(at));
        }
    }
    Ok(None)
}

/// Applies a scan to the file; returns the bytes kept, or `None` when the whole file
/// was moved aside.
#[allow(clippy::too_many_arguments)]
fn repair(
    dirs: &Dirs,
    path: &Path,
    name: &str,
    file: &File,
    len: u64,
    scan: &Scan,
    is_last: bool,
    report: &mut Recovery,
) -> Option<u64> {
    let intact = scan.bad.is_empty() && scan.tail.is_none();
    if intact {
        return Some(len);
    }
    let torn = match &scan.tail {
        Some((range, true)) if is_last => Some(range.clone()),
        _ => None,
    };
    if scan.records == 0 && torn.as_ref().is_none_or(|r| r.start != 0) {
        tracing::warn!(path = %path.display(), bytes = len, "spool segment holds no intact record; moving it aside");
        set_aside(dirs, path, name, report);
        report.corrupt_bytes += len;
        return None;
    }
    let mut bad: Vec<Range<u64>> = scan.bad.clone();
    match (&scan.tail, &torn) {
        (Some((range, _)), None) => bad.push(range.clone()),
        (_, Some(range)) => {
            tracing::warn!(path = %path.display(), offset = range.start, bytes = range.end - range.start, "cutting an unfinished record off the spool's last segment");
            report.truncated_bytes += range.end - range.start;
        }
        (None, None) => {}
    }
    for range in &bad {
        tracing::warn!(path = %path.display(), offset = range.start, bytes = range.end - range.start, "corrupt bytes in a spool segment; moving them aside");
        report.corrupt_ranges += 1;
        report.corrupt_bytes += range.end - range.start;
        match files::quarantine_with(
            &dirs.corrupt,
            &format!("{name}.{:012}", range.start),
            |out| window::copy_range(file, range.clone(), out),
        ) {
            Ok(kept) => report.quarantined.push(kept),
            // Losing the copy is better than refusing to start.
            Err(error) => tracing::error!(%error, "cannot keep corrupt spool bytes in corrupt/"),
        }
    }
    let mut cut = bad;
    cut.extend(torn);
    let kept = window::complement(len, &cut);
    let kept_bytes: u64 = kept.iter().map(|r| r.end - r.start).sum();
    let result = if scan.bad.is_empty() {
        // Only the end goes: cutting it in place is enough.
        fs::OpenOptions::new()
            .write(true)
            .open(path)
            .and_then(|f| f.set_len(kept_bytes).and_then(|()| f.sync_all()))
    } else {
        files::write_atomic_with(path, |out| {
            kept.iter()
                .try_for_each(|range| window::copy_range(file, range.clone(), out))
        })
    };
    if let Err(error) = result {
        tracing::error!(path = %path.display(), %error, "cannot repair a spool segment; moving it aside");
        set_aside(dirs, path, name, report);
        return None;
    }
    Some(kept_bytes)
}

fn set_aside(dirs: &Dirs, path: &Path, name: &str, report: &mut Recovery) {
    report.corrupt_ranges += 1;
    match files::move_aside(&dirs.corrupt, path, name) {
        Ok(kept) => report.quarantined.push(kept),
        Err(error) => {
            tracing::error!(path = %path.display(), %error, "cannot move a bad spool file aside; deleting it");
            remove(path);
        }
    }
}

fn remove(path: &Path) {
    if let Err(error) = fs::remove_file(path) {
        tracing::warn!(path = %path.display(), %error, "cannot delete a spool file");
    }
}
