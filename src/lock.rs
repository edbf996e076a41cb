//! One gateway per data directory: `serve` holds an exclusive `flock(2)` on
//! `<data_dir>/eventgate.lock` for as long as it runs, as Kafka and Vector do with
//! their data directories. Two gateways on one spool would interleave records, fight
//! over cursors and truncate each other's files.
//!
//! The kernel releases the lock when the process ends, however it ends, so a crash
//! never leaves a stale lock behind; the file itself stays (deleting it would let a
//! third process lock a new file while the second still holds the old one). What is
//! in it, the holder's pid and host name, is only for the error message.
//!
//! Offline commands do not take it: `dlq` and `replay` are made to run next to a
//! gateway (SQLite transactions, their own state files), and `query`, `stats` and
//! `audit` only read.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use thiserror::Error;

/// The lock file's name in the data directory.
pub(crate) const LOCK_FILE: &str = "eventgate.lock";

#[derive(Debug, Error)]
pub enum LockError {
    #[error(
        "data directory {} is in use by another eventgate ({holder}, lock {})",
        dir.display(),
        path.display()
    )]
    Held {
        dir: PathBuf,
        path: PathBuf,
        /// "pid 1234 on host node-1", or why that is not known.
        holder: String,
    },
    #[error("cannot lock the data directory {} (lock file {})", dir.display(), path.display())]
    Io {
        dir: PathBuf,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// Held for the life of the process; dropping it releases the lock.
#[derive(Debug)]
pub(crate) struct DataDirLock {
    _file: File,
}

impl DataDirLock {
    /// Takes the lock without waiting: a second gateway is refused at once, naming the
    /// first. Writes this process's pid and host name into the file.
    pub(crate) fn acquire(dir: &Path) -> Result<Self, LockError> {
        let path = dir.join(LOCK_FILE);
        let io_error = |source| LockError::Io {
            dir: dir.to_path_buf(),
            path: path.clone(),
            source,
        };
        let mut file = crate::fsmode::open(
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false),
            &path,
        )
        .map_err(io_error)?;
        // SAFETY: flock(2) takes a file descriptor owned by `file`, alive for the call.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let error = io::Error::last_os_error();
            if error.raw_os_error() == Some(libc::EWOULDBLOCK) {
                return Err(LockError::Held {
                    dir: dir.to_path_buf(),
                    path: path.clone(),
                    holder: holder(&mut file),
                });
            }
            return Err(io_error(error));
        }
        let identity = format!("pid {}\nhost {}\n", std::process::id(), host_name());
        file.set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| file.write_all(identity.as_bytes()))
            .map_err(io_error)?;
        Ok(Self { _file: file })
    }
}

/// "pid 1234 on host node-1", from what the holder wrote.
fn holder(file: &mut File) -> String {
    let mut text = String::new();
    if file.read_to_string(&mut text).is_err() {
        return "its pid could not be read".into();
    }
    let field = |key: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(key))
            .map(str::trim)
            .filter(|v| !v.is_empty())
    };
    match (field("pid "), field("host ")) {
        (Some(pid), Some(host)) => format!("pid {pid} on host {host}"),
        (Some(pid), None) => format!("pid {pid}"),
        // Between its lock and its write, or an older file.
        _ => "its pid is not written yet".into(),
    }
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_owned())
        .ok()
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_on_the_same_directory_is_refused_naming_the_first() {
        let dir = tempfile::tempdir().unwrap();
        let first = DataDirLock::acquire(dir.path()).unwrap();
        // flock locks belong to the open file description, so a second open in the
        // same process conflicts just as another process would.
        let error = DataDirLock::acquire(dir.path()).unwrap_err();
        let text = error.to_string();
        assert!(
            text.starts_with(&format!(
                "data directory {} is in use by another eventgate (pid {} on host ",
                dir.path().display(),
                std::process::id()
            )),
            "{text}"
        );
        assert!(
            text.ends_with(&format!("lock {})", dir.path().join(LOCK_FILE).display())),
            "{text}"
        );
        drop(first);
        let _again = DataDirLock::acquire(dir.path()).unwrap();
        let written = std::fs::read_to_string(dir.path().join(LOCK_FILE)).unwrap();
        assert!(written.starts_with(&format!("pid {}\n", std::process::id())));
    }
}
