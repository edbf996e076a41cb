//! A FUSE file system that keeps only what was synced when the power is cut, after
//! Jepsen's LazyFS: files and directories live in memory in two versions, the one
//! programs see and the one a disk would keep (see `state.rs` for exactly what each
//! sync makes durable). [`Mount::cut`] is the power cut: the mount goes away, the
//! unsynced version is dropped, and the durable one is mounted again at the same place.
//!
//! Needs root (a `mount(2)` of `/dev/fuse`); nothing else, not even `fusermount3`.
//! Whatever uses the mount must be stopped before a cut (a SIGKILL is the honest way:
//! a program that went on running would be a program that survived the power loss).

#![allow(dead_code)]

mod fs;
pub mod state;
#[cfg(test)]
mod tests;

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use state::State;
pub use state::{Stats, Writeback};

/// The file system mounted at a directory, with its state kept across cuts.
pub struct Mount {
    state: Arc<Mutex<State>>,
    at: PathBuf,
    session: Option<fuser::BackgroundSession>,
}

impl Mount {
    /// An empty file system mounted at `at` (an existing, empty directory).
    pub fn new(at: &Path) -> io::Result<Mount> {
        let mut mount = Mount {
            state: Arc::new(Mutex::new(State::new())),
            at: at.to_owned(),
            session: None,
        };
        mount.mount()?;
        Ok(mount)
    }

    fn mount(&mut self) -> io::Result<()> {
        let mut config = fuser::Config::default();
        config.mount_options = vec![
            fuser::MountOption::FSName("lazyfs".into()),
            fuser::MountOption::Subtype("lazyfs".into()),
        ];
        // Two threads: one request that waits (a read of a page under writeback)
        // must not hold up the rest.
        config.n_threads = Some(2);
        let filesystem = fs::LazyFs {
            state: Arc::clone(&self.state),
        };
        self.session = Some(fuser::spawn_mount(filesystem, &self.at, &config)?);
        Ok(())
    }

    pub fn path(&self) -> &Path {
        &self.at
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Unmounts lazily, as a dying machine lets go of its files, and waits for the
    /// session's thread, which ends once nothing refers to the mount any more. A
    /// plain umount fails with EBUSY while, say, a publisher reconnecting is
    /// looking up the socket's path on it.
    pub fn unmount(&mut self) -> io::Result<()> {
        let Some(session) = self.session.take() else {
            return Ok(());
        };
        let path = CString::new(self.at.as_os_str().as_bytes())?;
        // SAFETY: umount2(2) reads a NUL-terminated path that lives for the call.
        if unsafe { libc::umount2(path.as_ptr(), libc::MNT_DETACH) } != 0 {
            return Err(io::Error::last_os_error());
        }
        session.join()
    }

    /// The power cut: unmount, drop everything not synced, mount what is left.
    pub fn cut(&mut self) -> io::Result<()> {
        self.unmount()?;
        self.state().cut();
        self.mount()
    }

    /// The power cut at the boundary [`Mount::freeze_after`] named (or now, if it has
    /// not passed), unsynced data treated as `writeback` says.
    pub fn cut_with(&mut self, writeback: Writeback) -> io::Result<()> {
        self.unmount()?;
        self.state().cut_with(writeback);
        self.mount()
    }

    /// Syncs and renames since the mount (`state/boundary.rs`).
    pub fn boundaries(&self) -> u64 {
        self.state().boundaries()
    }

    /// The next cut restores the moment right after the `n`th boundary from now.
    pub fn freeze_after(&self, n: u64) {
        self.state().freeze_after(n);
    }

    /// When the frozen boundary passed.
    pub fn frozen_at(&self) -> Option<std::time::Instant> {
        self.state().frozen_at()
    }

    /// When a file now in `dir` (relative to the mount) was last synced.
    pub fn last_sync_in(&self, dir: &str) -> Option<std::time::Instant> {
        self.state().last_sync_in(dir)
    }

    pub fn stats(&self) -> Stats {
        self.state().stats
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = self.unmount();
    }
}
