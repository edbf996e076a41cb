//! `<dir>/format`: which spool format the directory holds, so that an older eventgate
//! refuses a newer spool instead of reading its records as damage and quarantining
//! them.
//!
//! ```text
//! eventgate spool format 1
//! crc32 1a2b3c4d
//! ```
//! Read before anything in the directory is read, moved or written. A spool without
//! the file was written before it existed ([`LEGACY`]) or is new ([`CURRENT`]); the
//! file is written for both. A damaged file is refused, never rewritten: guessing
//! the format of a spool is what the file is there to avoid.

use std::io;
use std::path::Path;

use super::{SpoolError, files};

/// The format this eventgate writes, and the newest it reads. A change an older
/// eventgate cannot read (a record layout, a kind bit it would take for damage, the
/// cursors file's shape) bumps it; one an older eventgate reads correctly does not.
pub(crate) const CURRENT: u32 = 1;

/// The format of a spool written before the stamp existed.
const LEGACY: u32 = 1;

const PREFIX: &str = "eventgate spool format ";

fn path(dir: &Path) -> std::path::PathBuf {
    dir.join("format")
}

/// The spool's format, `None` when `dir` has no stamp (or does not exist). Refuses
/// a format newer than [`CURRENT`] and a damaged stamp. Reads only.
pub(crate) fn check(dir: &Path) -> Result<Option<u32>, SpoolError> {
    let path = path(dir);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(SpoolError::Dir {
                action: "read",
                path,
                source,
            });
        }
    };
    let found = parse(&bytes).map_err(|problem| SpoolError::FormatDamaged {
        path: path.clone(),
        problem,
    })?;
    if found > CURRENT {
        return Err(SpoolError::TooNew {
            dir: dir.to_path_buf(),
            found,
            known: CURRENT,
        });
    }
    Ok(Some(found))
}

fn parse(bytes: &[u8]) -> Result<u32, String> {
    let body = files::unseal(bytes)?;
    let mut lines = body.lines();
    let format = lines
        .next()
        .and_then(|line| line.strip_prefix(PREFIX))
        .ok_or_else(|| format!("the first line does not start with {PREFIX:?}"))?;
    let format = format
        .parse::<u32>()
        .ok()
        .filter(|&f| f > 0)
        .ok_or_else(|| format!("{format:?} is not a format number"))?;
    if lines.next().is_some() {
        return Err("more than one line before the checksum".into());
    }
    Ok(format)
}

pub(super) fn render(format: u32) -> String {
    files::seal(format!("{PREFIX}{format}\n"))
}

/// Stamps a spool that has none: [`LEGACY`] when it holds segments or cursors
/// already, else [`CURRENT`]. Atomic and synced, directory included.
pub(super) fn stamp_unstamped(dirs: &files::Dirs) -> Result<u32, SpoolError> {
    let listed = |dir: &Path| -> io::Result<bool> { Ok(std::fs::read_dir(dir)?.next().is_some()) };
    let holds_data = dirs.cursors().exists()
        || listed(&dirs.segments).map_err(|source| SpoolError::Dir {
            action: "list spool segments in",
            path: dirs.segments.clone(),
            source,
        })?;
    let format = if holds_data { LEGACY } else { CURRENT };
    let path = path(&dirs.root);
    files::write_atomic(&path, render(format).as_bytes()).map_err(|source| SpoolError::Dir {
        action: "write",
        path: path.clone(),
        source,
    })?;
    if holds_data {
        tracing::info!(path = %path.display(), format, "spool written before format stamps; stamped");
    }
    Ok(format)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_what_is_not_a_stamp() {
        assert_eq!(parse(render(1).as_bytes()), Ok(1));
        assert_eq!(parse(render(7).as_bytes()), Ok(7));
        let flipped = render(1).replace("format 1", "format 2");
        assert_eq!(parse(flipped.as_bytes()), Err("checksum mismatch".into()));
        for body in ["eventgate spool cursors 1\n", "eventgate spool format x\n"] {
            assert!(
                parse(files::seal(body.into()).as_bytes()).is_err(),
                "{body}"
            );
        }
        let two_lines = files::seal(format!("{PREFIX}1\nextra\n"));
        assert!(parse(two_lines.as_bytes()).is_err());
        assert!(parse(b"").is_err());
    }
}
