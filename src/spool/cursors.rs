//! The `cursors` file: each forwarder's next sequence number to deliver.
//!
//! ```text
//! eventgate spool cursors 1
//! audit 1042
//! log 1040
//! crc32 1a2b3c4d
//! ```
//! The checksum covers every line before it, so a flipped bit is found instead of
//! silently moving a cursor past undelivered events.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;

use super::files;

const MAGIC: &str = "eventgate spool cursors 1";

pub(crate) type Cursors = BTreeMap<String, u64>;

/// `Ok(None)` when there is no file yet; `Err(problem)` when it cannot be trusted.
pub(super) fn load(path: &Path) -> io::Result<Result<Option<Cursors>, String>> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Ok(None)),
        Err(e) => return Err(e),
    };
    Ok(parse(&bytes).map(Some))
}

pub(crate) fn parse(bytes: &[u8]) -> Result<Cursors, String> {
    let mut lines = files::unseal(bytes)?.lines();
    if lines.next() != Some(MAGIC) {
        return Err(format!("the first line is not {MAGIC:?}"));
    }
    let mut cursors = Cursors::new();
    for line in lines {
        let (name, seq) = line
            .split_once(' ')
            .and_then(|(name, seq)| Some((name, seq.parse::<u64>().ok()?)))
            .ok_or_else(|| format!("line {line:?} is not `<forwarder> <seq>`"))?;
        cursors.insert(name.to_string(), seq);
    }
    Ok(cursors)
}

pub(crate) fn render(cursors: &Cursors) -> String {
    let mut text = format!("{MAGIC}\n");
    for (name, seq) in cursors {
        text.push_str(&format!("{name} {seq}\n"));
    }
    files::seal(text)
}

pub(super) fn save(path: &Path, cursors: &Cursors) -> io::Result<()> {
    files::write_atomic(path, render(cursors).as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_damage_is_found() {
        let cursors = Cursors::from([("audit".to_string(), 1042), ("log".to_string(), 7)]);
        let text = render(&cursors);
        assert_eq!(parse(text.as_bytes()), Ok(cursors));
        let damaged = text.replace("1042", "9042");
        assert_eq!(parse(damaged.as_bytes()), Err("checksum mismatch".into()));
        assert!(parse(b"").is_err());
        assert!(parse(b"garbage\n").is_err());
    }
}
