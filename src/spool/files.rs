//! Paths under the spool directory and the few file operations that must be atomic.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// `<dir>/segments`, `<dir>/corrupt` and `<dir>/cursors`.
#[derive(Clone, Debug)]
pub(super) struct Dirs {
    pub root: PathBuf,
    pub segments: PathBuf,
    pub corrupt: PathBuf,
}

impl Dirs {
    pub(super) fn new(root: &Path) -> Self {
        Self {
            root: root.to_path_buf(),
            segments: root.join("segments"),
            corrupt: root.join("corrupt"),
        }
    }

    pub(super) fn cursors(&self) -> PathBuf {
        self.root.join("cursors")
    }

    pub(super) fn segment(&self, first_seq: u64) -> PathBuf {
        self.segments.join(segment_name(first_seq))
    }
}

/// Twenty digits, so that names sort like the numbers.
pub(super) fn segment_name(first_seq: u64) -> String {
    format!("{first_seq:020}.log")
}

pub(super) fn parse_segment_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".log")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Makes a rename or a new file in `dir` survive a power loss.
pub(super) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Ends `text` (lines, each with its newline) with `crc32 <hex>` of everything before,
/// so that a flipped bit in a small state file is found instead of trusted.
pub(crate) fn seal(mut text: String) -> String {
    let crc = crc32fast::hash(text.as_bytes());
    text.push_str(&format!("crc32 {crc:08x}\n"));
    text
}

/// The lines of a [`seal`]ed text before its checksum line, once the checksum holds.
pub(crate) fn unseal(bytes: &[u8]) -> Result<&str, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_string())?;
    let body_end = text
        .trim_end_matches('\n')
        .rfind('\n')
        .map(|i| i + 1)
        .ok_or("no checksum line")?;
    let (body, last) = text.split_at(body_end);
    let crc = last
        .trim_end()
        .strip_prefix("crc32 ")
        .and_then(|hex| u32::from_str_radix(hex, 16).ok())
        .ok_or("the last line is not `crc32 <hex>`")?;
    if crc32fast::hash(body.as_bytes()) != crc {
        return Err("checksum mismatch".into());
    }
    Ok(body)
}

/// Replaces `path` with `bytes` so that a crash leaves either the old or the new file:
/// temp file, fsync, rename, fsync of the directory.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_atomic_with(path, |file| file.write_all(bytes))
}

/// [`write_atomic`] with the content written by `write`, so it need not be in memory.
pub(super) fn write_atomic_with(
    path: &Path,
    write: impl FnOnce(&mut io::BufWriter<File>) -> io::Result<()>,
) -> io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut out = io::BufWriter::new(crate::fsmode::create_file(&tmp)?);
    write(&mut out)?;
    let file = out.into_inner().map_err(io::IntoInnerError::into_error)?;
    file.sync_all()?;
    drop(file);
    fs::rename(&tmp, path)?;
    sync_dir(path.parent().unwrap_or(Path::new(".")))
}

/// Keeps bad bytes, written by `write`, for inspection: `<corrupt>/<name>`, never
/// overwriting an earlier one.
pub(super) fn quarantine_with(
    corrupt: &Path,
    name: &str,
    write: impl FnOnce(&mut io::BufWriter<File>) -> io::Result<()>,
) -> io::Result<PathBuf> {
    let path = free_name(corrupt, name);
    let mut out = io::BufWriter::new(crate::fsmode::create_file(&path)?);
    write(&mut out)?;
    let file = out.into_inner().map_err(io::IntoInnerError::into_error)?;
    file.sync_all()?;
    sync_dir(corrupt)?;
    Ok(path)
}

/// Moves a whole file into `<corrupt>/`.
pub(super) fn move_aside(corrupt: &Path, file: &Path, name: &str) -> io::Result<PathBuf> {
    let path = free_name(corrupt, name);
    fs::rename(file, &path)?;
    sync_dir(corrupt)?;
    if let Some(parent) = file.parent() {
        sync_dir(parent)?;
    }
    Ok(path)
}

fn free_name(dir: &Path, name: &str) -> PathBuf {
    let mut path = dir.join(name);
    let mut n = 1;
    while path.exists() {
        path = dir.join(format!("{name}.{n}"));
        n += 1;
    }
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_names_round_trip_and_reject_others() {
        assert_eq!(segment_name(42), "00000000000000000042.log");
        assert_eq!(parse_segment_name(&segment_name(u64::MAX)), Some(u64::MAX));
        for bad in [
            "42.log",
            "0000000000000000004x.log",
            "00000000000000000042.tmp",
        ] {
            assert_eq!(parse_segment_name(bad), None, "{bad}");
        }
    }
}
