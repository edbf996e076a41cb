//! Recovery at open: every segment is scanned and every record validated (length,
//! checksum, increasing seq). A torn tail of the last segment is cut off; any other
//! bad bytes are copied into `corrupt/` and cut out of the segment, keeping every
//! intact record around them. Content never makes the spool refuse to open.

use std::fs;
use std::io;
use std::ops::Range;
use std::path::{Path, PathBuf};

use super::files::{self, Dirs};
use super::record::{self, Check, HEADER, MIN_BODY};
use super::shared::Segment;

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
pub struct Recovered {
    pub segments: Vec<Segment>,
    pub last_seq: u64,
}

/// Scans `dirs.segments`; only failing to list the directory is an error.
pub fn recover(dirs: &Dirs, report: &mut Recovery) -> io::Result<Recovered> {
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
    let count = named.len();
    for (i, (first_seq, path)) in named.into_iter().enumerate() {
        let is_last = i + 1 == count;
        let bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "cannot read a spool segment; moving it aside");
                set_aside(dirs, &path, &files::segment_name(first_seq), report);
                continue;
            }
        };
        let floor = last_seq.max(first_seq.saturating_sub(1));
        let scan = scan(&bytes, floor);
        let name = files::segment_name(first_seq);
        let Some(kept) = repair(dirs, &path, &name, &bytes, &scan, is_last, report) else {
            continue;
        };
        if let Some(&(_, seq)) = scan.good.last() {
            report.missing_records += scan.good.first().map_or(0, |(_, first)| first - floor - 1);
            report.missing_records += scan
                .good
                .windows(2)
                .map(|w| w[1].1 - w[0].1 - 1)
                .sum::<u64>();
            last_seq = seq;
        }
        report.records += scan.good.len() as u64;
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
    Ok(Recovered { segments, last_seq })
}

/// A segment's intact records and its bad ranges.
struct Scan {
    /// (byte range, seq) of each intact record, in order.
    good: Vec<(Range<usize>, u64)>,
    /// Bad bytes with intact records after them.
    bad: Vec<Range<usize>>,
    /// Bad bytes running to the end of the file, and whether they are merely an
    /// unfinished record (a torn write) rather than a complete bad one.
    tail: Option<(Range<usize>, bool)>,
}

fn scan(bytes: &[u8], floor: u64) -> Scan {
    let mut scan = Scan {
        good: Vec::new(),
        bad: Vec::new(),
        tail: None,
    };
    let mut last = floor;
    let mut at = 0;
    while at < bytes.len() {
        let check = record::check(&bytes[at..]);
        if let Check::Valid { seq, len } = check
            && seq > last
        {
            scan.good.push((at..at + len, seq));
            last = seq;
            at += len;
            continue;
        }
        match resync(bytes, at, last) {
            Some(next) => {
                scan.bad.push(at..next);
                at = next;
            }
            None => {
                scan.tail = Some((at..bytes.len(), check == Check::Incomplete));
                break;
            }
        }
    }
    scan
}

/// The next offset after `bad` where an intact record with a plausible seq starts:
/// larger than `last`, and no larger than the bad bytes could have held records.
fn resync(bytes: &[u8], bad: usize, last: u64) -> Option<usize> {
    (bad + 1..bytes.len()).find(|&at| {
        let Some(seq) = record::claimed_seq(&bytes[at..]) else {
            return false;
        };
        let most = last + 1 + ((at - bad) / (HEADER + MIN_BODY)) as u64;
        seq > last
            && seq <= most
            && matches!(record::check(&bytes[at..]), Check::Valid { seq: s, .. } if s == seq)
    })
}

/// Applies a scan to the file; returns the bytes kept, or `None` when the whole file
/// was moved aside.
fn repair(
    dirs: &Dirs,
    path: &Path,
    name: &str,
    bytes: &[u8],
    scan: &Scan,
    is_last: bool,
    report: &mut Recovery,
) -> Option<u64> {
    let intact = scan.bad.is_empty() && scan.tail.is_none();
    if intact {
        return Some(bytes.len() as u64);
    }
    let torn = match &scan.tail {
        Some((range, true)) if is_last => Some(range.clone()),
        _ => None,
    };
    if scan.good.is_empty() && torn.as_ref().is_none_or(|r| r.start != 0) {
        tracing::warn!(path = %path.display(), bytes = bytes.len(), "spool segment holds no intact record; moving it aside");
        set_aside(dirs, path, name, report);
        report.corrupt_bytes += bytes.len() as u64;
        return None;
    }
    let mut bad: Vec<Range<usize>> = scan.bad.clone();
    match (&scan.tail, &torn) {
        (Some((range, _)), None) => bad.push(range.clone()),
        (_, Some(range)) => {
            tracing::warn!(path = %path.display(), offset = range.start, bytes = range.len(), "cutting an unfinished record off the spool's last segment");
            report.truncated_bytes += range.len() as u64;
        }
        (None, None) => {}
    }
    for range in &bad {
        tracing::warn!(path = %path.display(), offset = range.start, bytes = range.len(), "corrupt bytes in a spool segment; moving them aside");
        report.corrupt_ranges += 1;
        report.corrupt_bytes += range.len() as u64;
        match files::quarantine(
            &dirs.corrupt,
            &format!("{name}.{:012}", range.start),
            &bytes[range.clone()],
        ) {
            Ok(kept) => report.quarantined.push(kept),
            // Losing the copy is better than refusing to start.
            Err(error) => tracing::error!(%error, "cannot keep corrupt spool bytes in corrupt/"),
        }
    }
    let kept: Vec<u8> = scan
        .good
        .iter()
        .flat_map(|(range, _)| bytes[range.clone()].iter().copied())
        .collect();
    let result = if scan.bad.is_empty() {
        // Only the end goes: cutting it in place is enough.
        fs::OpenOptions::new()
            .write(true)
            .open(path)
            .and_then(|f| f.set_len(kept.len() as u64).and_then(|()| f.sync_all()))
    } else {
        files::write_atomic(path, &kept)
    };
    if let Err(error) = result {
        tracing::error!(path = %path.display(), %error, "cannot repair a spool segment; moving it aside");
        set_aside(dirs, path, name, report);
        return None;
    }
    Some(kept.len() as u64)
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
