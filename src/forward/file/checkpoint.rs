//! The file forwarder's checkpoint record: how much of which file is durable, and the
//! spool position that goes with it, in `<data_dir>/checkpoints/<forwarder>.file`.
//!
//! ```text
//! eventgate file checkpoint 1
//! next 1042
//! file 2049 131077
//! len 56789
//! sealed 0
//! crc32 1a2b3c4d
//! ```
//!
//! The pipeline persists the forwarder's cursor only after a checkpoint, so after a
//! crash the spool sends again everything from the cursor, and the file may hold
//! lines past the checkpoint (a process crash keeps them, a power loss may not). At
//! the next start the file is cut back to `len`, and sending resumes at `next`
//! (which the cursor may not have reached yet): no line is lost, none is written
//! twice. `sealed` means the file was complete and rotated away: the active file
//! then holds nothing checkpointed. The file is named by device and inode, so a file
//! replaced behind the forwarder's back is never cut.

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::spool::{seal, unseal, write_atomic};

const MAGIC: &str = "eventgate file checkpoint 1";

/// Which file: device and inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FileId {
    pub dev: u64,
    pub ino: u64,
}

impl FileId {
    pub(super) fn of(metadata: &std::fs::Metadata) -> Self {
        Self {
            dev: metadata.dev(),
            ino: metadata.ino(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Record {
    /// The spool position everything before which is durable in the files.
    pub next: u64,
    pub file: FileId,
    /// Bytes of `file` that are durable.
    pub len: u64,
    /// `file` was complete and rotated away.
    pub sealed: bool,
}

/// What to do with the active file before sending resumes.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Resume {
    /// Cut the active file to this length and resume at `next`.
    CutTo { len: u64, next: u64 },
    /// The record does not describe the active file (or the spool): keep the file,
    /// resume at the pipeline's cursor. Says why.
    Keep(String),
}

impl Record {
    /// What the record says about `active` (the active file's identity and length)
    /// for a pipeline resuming at `cursor` with a spool that ends at `end`.
    pub(crate) fn resume(&self, active: FileId, active_len: u64, end: u64) -> Resume {
        if self.next > end {
            return Resume::Keep(format!(
                "the checkpoint is at spool position {}, past the spool's end {end}",
                self.next
            ));
        }
        if active == self.file {
            if active_len < self.len {
                return Resume::Keep(format!(
                    "the file is {active_len} bytes, shorter than the {} bytes checkpointed",
                    self.len
                ));
            }
            return Resume::CutTo {
                len: self.len,
                next: self.next,
            };
        }
        if self.sealed {
            // Rotated away whole: every line of the active file came after.
            return Resume::CutTo {
                len: 0,
                next: self.next,
            };
        }
        Resume::Keep("the active file is not the one checkpointed".into())
    }
}

pub(crate) fn render(record: &Record) -> String {
    seal(format!(
        "{MAGIC}\nnext {}\nfile {} {}\nlen {}\nsealed {}\n",
        record.next,
        record.file.dev,
        record.file.ino,
        record.len,
        u8::from(record.sealed)
    ))
}

pub(crate) fn parse(bytes: &[u8]) -> Result<Record, String> {
    let mut lines = unseal(bytes)?.lines();
    if lines.next() != Some(MAGIC) {
        return Err(format!("the first line is not {MAGIC:?}"));
    }
    let mut field = |key: &str| -> Result<Vec<u64>, String> {
        let line = lines.next().ok_or_else(|| format!("no `{key}` line"))?;
        let values = line
            .strip_prefix(key)
            .and_then(|rest| rest.strip_prefix(' '))
            .ok_or_else(|| format!("line {line:?} is not `{key} ...`"))?;
        values
            .split(' ')
            .map(|v| {
                v.parse::<u64>()
                    .map_err(|_| format!("bad number in {line:?}"))
            })
            .collect()
    };
    let next = field("next")?;
    let file = field("file")?;
    let len = field("len")?;
    let sealed = field("sealed")?;
    match (&next[..], &file[..], &len[..], &sealed[..]) {
        (&[next], &[dev, ino], &[len], &[sealed @ (0 | 1)]) => Ok(Record {
            next,
            file: FileId { dev, ino },
            len,
            sealed: sealed == 1,
        }),
        _ => Err("a line has the wrong number of values".into()),
    }
}

/// `Ok(None)` when there is no record yet; `Err(problem)` when it cannot be trusted.
pub(super) fn load(path: &Path) -> io::Result<Result<Option<Record>, String>> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(parse(&bytes).map(Some)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Ok(None)),
        Err(e) => Err(e),
    }
}

/// Written atomically and synced: the cursor is persisted after this returns.
pub(super) fn save(path: &Path, record: &Record) -> io::Result<()> {
    if let Some(dir) = path.parent() {
        crate::fsmode::create_dir_all(dir)?;
    }
    write_atomic(path, render(record).as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: FileId = FileId { dev: 8, ino: 42 };

    fn record(sealed: bool) -> Record {
        Record {
            next: 100,
            file: FILE,
            len: 5000,
            sealed,
        }
    }

    #[test]
    fn round_trip_and_damage_is_found() {
        let text = render(&record(true));
        assert_eq!(parse(text.as_bytes()), Ok(record(true)));
        let damaged = text.replace("len 5000", "len 9000");
        assert_eq!(parse(damaged.as_bytes()), Err("checksum mismatch".into()));
        assert!(parse(b"").is_err());
        assert!(parse(b"eventgate file checkpoint 1\ncrc32 00000000\n").is_err());
    }

    #[test]
    fn the_checkpointed_file_is_cut_back_and_resumed_after() {
        let other = FileId { dev: 8, ino: 43 };
        assert_eq!(
            record(false).resume(FILE, 7000, 200),
            Resume::CutTo {
                len: 5000,
                next: 100
            }
        );
        // Rotated away whole: the new file's lines all came after it.
        assert_eq!(
            record(true).resume(other, 700, 200),
            Resume::CutTo { len: 0, next: 100 }
        );
        // Never cut a file the record does not describe, or lengthen one.
        assert!(matches!(
            record(false).resume(other, 7000, 200),
            Resume::Keep(_)
        ));
        assert!(matches!(
            record(false).resume(FILE, 4000, 200),
            Resume::Keep(_)
        ));
        // A spool that ends before the checkpoint is not the one it was taken with.
        assert!(matches!(
            record(false).resume(FILE, 7000, 50),
            Resume::Keep(_)
        ));
    }
}
