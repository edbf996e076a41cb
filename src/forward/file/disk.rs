//! The active file on disk: opening it whole, writing with injectable faults, and
//! the errors of the writer.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use thiserror::Error;

use super::archive::FILE_MODE;

#[derive(Debug, Error)]
pub(super) enum WriteError {
    #[error("cannot open {}", path.display())]
    Open {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot write to {}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot sync {}", path.display())]
    Sync {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot truncate {} back to {len} bytes after a failed write", path.display())]
    Repair {
        path: PathBuf,
        len: u64,
        #[source]
        source: io::Error,
    },
    #[error("cannot record the checkpoint in {}", path.display())]
    Checkpoint {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot rotate {} to {}", path.display(), to.display())]
    Rotate {
        path: PathBuf,
        to: PathBuf,
        #[source]
        source: io::Error,
    },
}

impl WriteError {
    /// The OS error underneath, for callers that word the context themselves.
    pub(super) fn into_io(self) -> io::Error {
        match self {
            WriteError::Open { source, .. }
            | WriteError::Write { source, .. }
            | WriteError::Sync { source, .. }
            | WriteError::Repair { source, .. }
            | WriteError::Checkpoint { source, .. }
            | WriteError::Rotate { source, .. } => source,
        }
    }
}

/// The writer's idea of now, replaceable in tests.
pub(super) trait Clock: Send + Sync {
    fn now(&self) -> SystemTime;
}

pub(super) struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// Failures to inject, to prove what a reader sees after one.
#[cfg(test)]
#[derive(Default)]
pub struct Faults {
    /// A segment write stores only this many bytes, then fails with ENOSPC...
    pub short_write: Option<usize>,
    /// ...after this many segment writes succeeded.
    pub writes_before_fault: usize,
    /// The next sync fails with EIO.
    pub sync: bool,
    /// The next save of the checkpoint record fails with ENOSPC.
    pub record: bool,
}

pub(super) fn write_all(
    file: &mut File,
    bytes: &[u8],
    #[cfg(test)] faults: &mut Faults,
) -> io::Result<()> {
    #[cfg(test)]
    if faults.short_write.is_some() && faults.writes_before_fault > 0 {
        faults.writes_before_fault -= 1;
    } else if let Some(n) = faults.short_write.take() {
        file.write_all(&bytes[..n.min(bytes.len())])?;
        return Err(io::Error::from_raw_os_error(libc::ENOSPC));
    }
    file.write_all(bytes)
}

/// Opens the active file for appending, creating it with [`FILE_MODE`]; returns it
/// with its length after cutting off a partial last line.
pub(super) fn open_active(name: &str, path: &Path) -> Result<(File, u64), WriteError> {
    let open_error = |source| WriteError::Open {
        path: path.to_path_buf(),
        source,
    };
    let existed = path.exists();
    let mut file = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .mode(FILE_MODE)
        .open(path)
        .map_err(open_error)?;
    if !existed {
        file.set_permissions(fs::Permissions::from_mode(FILE_MODE))
            .map_err(open_error)?;
    }
    let len = file.metadata().map_err(open_error)?.len();
    let whole = whole_lines_len(&mut file, len).map_err(open_error)?;
    if whole < len {
        file.set_len(whole).map_err(open_error)?;
        tracing::warn!(forwarder = name, path = %path.display(), removed_bytes = len - whole, "removed a partial last line (an earlier run stopped mid-write)");
    }
    Ok((file, whole))
}

/// The length up to and including the last newline.
fn whole_lines_len(file: &mut File, len: u64) -> io::Result<u64> {
    let mut end = len;
    let mut chunk = vec![0u8; 64 * 1024];
    while end > 0 {
        let start = end.saturating_sub(chunk.len() as u64);
        let buf = &mut chunk[..(end - start) as usize];
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(buf)?;
        if let Some(i) = buf.iter().rposition(|&b| b == b'\n') {
            return Ok(start + i as u64 + 1);
        }
        end = start;
    }
    Ok(0)
}
