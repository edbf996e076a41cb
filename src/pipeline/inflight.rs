//! What a forwarder was delivering when the process died, so that one event that
//! kills the process (an abort, a stack overflow, the kernel's OOM killer) cannot kill
//! it again at every start: the spool hands the forwarder the same events after each
//! restart, so without this record such an event would be a poison pill.
//!
//! Before each batch the worker writes its sequence range here, and clears it once
//! the batch is done. A plain `pwrite` of 24 bytes, not synced: the page cache
//! outlives the process, which is the death that matters; after a power loss the
//! record may be stale, which costs one slow start and loses nothing.
//!
//! At start, a range left behind means the previous process died during that batch.
//! Its events are then delivered one at a time; if the process dies again with one
//! of them alone in flight, that event is the cause: at the next start it goes to the
//! dead-letter store (reason `crashed`, envelope as received) instead of to the
//! forwarder, and the rest flows on. An event is buried only after two deaths, the
//! second with the event alone, so a SIGKILL in the middle of a batch only makes the
//! next start deliver that batch singly.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// The record's size: first seq, last seq, deaths, CRC-32 of the 20 bytes before.
const LEN: usize = 24;

/// A batch that was in flight when the process died.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Suspect {
    pub first: u64,
    pub last: u64,
    /// How many processes died with these events in flight (this start counted).
    pub deaths: u32,
}

impl Suspect {
    /// Whether `seq` is the one event the process died on twice.
    pub(super) fn is_poison(&self, seq: u64) -> bool {
        self.first == seq && self.last == seq && self.deaths >= 2
    }

    pub(super) fn covers(&self, seq: u64) -> bool {
        (self.first..=self.last).contains(&seq)
    }
}

/// One forwarder's in-flight record. Without a directory (no durable spool: nothing
/// is redelivered after a restart anyway) it records nothing.
pub(super) struct Inflight {
    file: Option<(File, PathBuf)>,
    /// Left by the previous process, until the worker has delivered past it.
    pub suspect: Option<Suspect>,
}

impl Inflight {
    pub(super) fn disabled() -> Self {
        Self {
            file: None,
            suspect: None,
        }
    }

    /// Opens (creating) `<dir>/<forwarder>` and reads what the previous process left.
    /// Forwarder names are `[A-Za-z0-9_-]+` (checked by the configuration), so the
    /// name is a safe file name.
    pub(super) fn open(dir: &Path, forwarder: &str) -> io::Result<Self> {
        crate::fsmode::create_dir_all(dir)?;
        let path = dir.join(forwarder);
        let file = crate::fsmode::open(
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false),
            &path,
        )?;
        let mut buf = [0u8; LEN];
        let suspect = match file.read_exact_at(&mut buf, 0) {
            Ok(()) => decode(&buf).map(|s| Suspect {
                deaths: s.deaths.saturating_add(1),
                ..s
            }),
            Err(error) if error.kind() == io::ErrorKind::UnexpectedEof => None,
            Err(error) => return Err(error),
        };
        Ok(Self {
            file: Some((file, path)),
            suspect,
        })
    }

    /// The worker is about to hand events `first..=last` to the forwarder. A failure
    /// to record is logged, not fatal: delivery matters more than this safeguard.
    pub(super) fn begin(&self, first: u64, last: u64) {
        let deaths = self
            .suspect
            .filter(|s| s.covers(first) || s.covers(last))
            .map_or(0, |s| s.deaths);
        self.write(&encode(first, last, deaths));
    }

    /// The batch is done (delivered, buried or abandoned at shutdown).
    pub(super) fn end(&self) {
        self.write(&[0u8; LEN]);
    }

    /// The worker has delivered past the suspect range: back to whole batches.
    pub(super) fn passed(&mut self, seq: u64) {
        if self.suspect.is_some_and(|s| seq >= s.last) {
            self.suspect = None;
        }
    }

    fn write(&self, bytes: &[u8; LEN]) {
        if let Some((file, path)) = &self.file
            && let Err(error) = file.write_all_at(bytes, 0)
        {
            tracing::warn!(path = %path.display(), %error, "cannot record the batch in flight");
        }
    }
}

fn encode(first: u64, last: u64, deaths: u32) -> [u8; LEN] {
    let mut buf = [0u8; LEN];
    buf[0..8].copy_from_slice(&first.to_le_bytes());
    buf[8..16].copy_from_slice(&last.to_le_bytes());
    buf[16..20].copy_from_slice(&deaths.to_le_bytes());
    let crc = crc32fast::hash(&buf[..20]);
    buf[20..24].copy_from_slice(&crc.to_le_bytes());
    buf
}

/// `None` for a cleared record, and for a torn or foreign one (nothing to suspect).
fn decode(buf: &[u8; LEN]) -> Option<Suspect> {
    let word = |range: std::ops::Range<usize>| -> Option<u64> {
        let mut bytes = [0u8; 8];
        bytes[..range.len()].copy_from_slice(buf.get(range)?);
        Some(u64::from_le_bytes(bytes))
    };
    let crc = u32::try_from(word(20..24)?).ok()?;
    if crc != crc32fast::hash(&buf[..20]) {
        return None;
    }
    let first = word(0..8)?;
    let last = word(8..16)?;
    let deaths = u32::try_from(word(16..20)?).ok()?;
    (first != 0 && first <= last).then_some(Suspect {
        first,
        last,
        deaths,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_left_in_flight_is_suspect_at_the_next_start() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Inflight::open(dir.path(), "log").unwrap();
        assert_eq!(journal.suspect, None, "a new record suspects nothing");
        journal.begin(10, 20);
        drop(journal); // the process dies here

        let journal = Inflight::open(dir.path(), "log").unwrap();
        let suspect = journal.suspect.expect("the batch was left in flight");
        assert_eq!((suspect.first, suspect.last, suspect.deaths), (10, 20, 1));
        assert!(
            !suspect.is_poison(10),
            "one death with others in flight proves nothing"
        );

        // Delivered singly; the process dies again with seq 13 alone.
        journal.begin(13, 13);
        drop(journal);
        let journal = Inflight::open(dir.path(), "log").unwrap();
        let suspect = journal.suspect.expect("seq 13 was in flight");
        assert!(suspect.is_poison(13), "{suspect:?}");
        assert!(!suspect.is_poison(14));
    }

    #[test]
    fn a_finished_batch_or_a_torn_record_suspects_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Inflight::open(dir.path(), "kafka").unwrap();
        journal.begin(5, 9);
        journal.end();
        drop(journal);
        assert_eq!(Inflight::open(dir.path(), "kafka").unwrap().suspect, None);

        let mut torn = encode(5, 9, 1);
        torn[3] ^= 0xff;
        std::fs::write(dir.path().join("kafka"), torn).unwrap();
        assert_eq!(Inflight::open(dir.path(), "kafka").unwrap().suspect, None);
        std::fs::write(dir.path().join("kafka"), b"short").unwrap();
        assert_eq!(Inflight::open(dir.path(), "kafka").unwrap().suspect, None);
    }

    #[test]
    fn the_suspect_range_is_dropped_once_delivered_past() {
        let dir = tempfile::tempdir().unwrap();
        Inflight::open(dir.path(), "audit").unwrap().begin(3, 4);
        let mut journal = Inflight::open(dir.path(), "audit").unwrap();
        journal.passed(3);
        assert!(journal.suspect.is_some());
        journal.passed(4);
        assert_eq!(journal.suspect, None);
    }
}
