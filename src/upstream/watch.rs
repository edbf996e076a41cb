//! Noticing a unix-socket upstream come back without waiting out the backoff.
//!
//! A daemon that restarts creates its socket again at bind; the backoff timer alone
//! would find it only at its next tick (seconds later, up to `reconnect.max`). While
//! an upstream task waits, [`SocketWatch`] watches the socket's directory with inotify
//! and wakes it when the socket file is created or moved into place, and
//! [`SocketWake`] turns that into a short burst of quick attempts, since the daemon
//! may answer a moment after its socket appears.
//!
//! When the socket's directory does not exist (containerd's state dir removed while it
//! is down), the nearest existing ancestor is watched instead and the watch follows
//! each missing directory down as it is created. Polling would also work, but its
//! period would be the delay we are trying to remove; inotify costs nothing while
//! nothing happens. An ancestor renamed away under a watched directory is not seen
//! (only the watched directory's own removal or move is); the backoff timer still
//! finds the socket then.

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};
use thiserror::Error;
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::time::Instant;

use crate::client::Address;

/// How often the burst after a wake-up tries, and for how long: a socket that
/// appears has a daemon behind it that is about to answer. The first retries come
/// sooner (1, 2, 4, 8 ms), as the socket usually accepts within a millisecond of
/// its creation; on a busy machine the daemon may take tens of milliseconds.
pub(super) const BURST_FIRST: Duration = Duration::from_millis(1);
pub(super) const BURST_INTERVAL: Duration = Duration::from_millis(10);
pub(super) const BURST_WINDOW: Duration = Duration::from_secs(2);

/// Bounds the walk when directories appear and vanish as fast as we can watch them.
const MAX_REARMS: usize = 64;

#[derive(Debug, Error)]
pub(super) enum WatchError {
    #[error("cannot start an inotify instance")]
    Init(#[source] Errno),
    #[error("cannot register the inotify instance with the runtime")]
    Register(#[source] io::Error),
    #[error("cannot watch {}", path.display())]
    Add {
        path: PathBuf,
        #[source]
        source: Errno,
    },
    #[error("cannot read inotify events")]
    Read(#[source] io::Error),
    #[error("{} has no directory to watch", path.display())]
    NoDirectory { path: PathBuf },
    #[error("the directories above {} kept changing; gave up following them", path.display())]
    Unsettled { path: PathBuf },
}

/// Tokio needs `AsRawFd`; nix's `Inotify` offers `AsFd`.
struct Fd(Inotify);

impl AsRawFd for Fd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

/// Watches for a socket file to be created (or renamed into place) at a path.
pub(super) struct SocketWatch {
    inotify: AsyncFd<Fd>,
    socket: PathBuf,
    /// The socket's directory, or while it does not exist its nearest existing
    /// ancestor.
    watched: PathBuf,
    wd: WatchDescriptor,
}

impl SocketWatch {
    /// Starts watching at once: a socket created after this returns is reported by
    /// the next [`changed`](Self::changed), even if nobody was waiting at the time.
    pub(super) fn new(socket: &Path) -> Result<Self, WatchError> {
        // Absolute, so every ancestor has a name (cwd does not change under us).
        let socket = std::path::absolute(socket).map_err(|_| WatchError::NoDirectory {
            path: socket.to_owned(),
        })?;
        if socket.parent().is_none() || socket.file_name().is_none() {
            return Err(WatchError::NoDirectory { path: socket });
        }
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
            .map_err(WatchError::Init)?;
        // SAFETY: `Fd` owns the inotify descriptor and keeps it open, unchanged, for
        // as long as the `AsyncFd` holds it.
        let inotify = unsafe { AsyncFd::register_with_interest(Fd(inotify), Interest::READABLE) }
            .map_err(|e| WatchError::Register(e.into()))?;
        let (watched, wd) = arm(&inotify.get_ref().0, &socket)?;
        Ok(Self {
            inotify,
            socket,
            watched,
            wd,
        })
    }

    pub(super) fn path(&self) -> &Path {
        &self.socket
    }

    /// Returns once the socket file has been created since the last call (or since
    /// `new`). Each creation is reported once, so a socket that appears and never
    /// answers wakes its waiter once, not in a loop.
    pub(super) async fn changed(&mut self) -> Result<(), WatchError> {
        loop {
            let mut ready = self.inotify.readable().await.map_err(WatchError::Read)?;
            let read = ready.try_io(|fd| fd.get_ref().0.read_events().map_err(io::Error::from));
            drop(ready);
            let events = match read {
                Ok(events) => events.map_err(WatchError::Read)?,
                Err(_would_block) => continue,
            };
            let mut created = false;
            let mut rearm = false;
            for event in events {
                if event.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
                    // Events were lost: look again from the top.
                    rearm = true;
                    continue;
                }
                // Events of a watch we have since replaced say nothing now.
                if event.wd != self.wd {
                    continue;
                }
                if event.mask.intersects(
                    AddWatchFlags::IN_DELETE_SELF
                        | AddWatchFlags::IN_MOVE_SELF
                        | AddWatchFlags::IN_IGNORED
                        | AddWatchFlags::IN_UNMOUNT,
                ) {
                    rearm = true;
                } else if event.name.as_deref() == Some(self.next_name()) {
                    if self.watching_the_directory() {
                        created = true;
                    } else {
                        // A missing directory on the way down appeared.
                        rearm = true;
                    }
                }
            }
            if rearm {
                let (watched, wd) = arm(&self.inotify.get_ref().0, &self.socket)?;
                if wd != self.wd {
                    // Fails harmlessly when the kernel already dropped it with its directory.
                    let _ = self.inotify.get_ref().0.rm_watch(self.wd);
                }
                self.watched = watched;
                self.wd = wd;
                // A socket found in a directory that was just (re)created is new; so,
                // after lost events, is one we cannot tell from new.
                if self.watching_the_directory() && self.socket_exists() {
                    created = true;
                }
            }
            if created {
                return Ok(());
            }
        }
    }

    fn watching_the_directory(&self) -> bool {
        self.socket.parent() == Some(self.watched.as_path())
    }

    /// The name, inside the watched directory, of the next step towards the socket.
    fn next_name(&self) -> &OsStr {
        self.socket
            .strip_prefix(&self.watched)
            .ok()
            .and_then(|rest| rest.components().next())
            .map_or(OsStr::new(""), Component::as_os_str)
    }

    fn socket_exists(&self) -> bool {
        std::fs::symlink_metadata(&self.socket).is_ok()
    }
}

/// Watches the socket's directory, or its nearest existing ancestor.
fn arm(inotify: &Inotify, socket: &Path) -> Result<(PathBuf, WatchDescriptor), WatchError> {
    let mask = AddWatchFlags::IN_CREATE
        | AddWatchFlags::IN_MOVED_TO
        | AddWatchFlags::IN_DELETE_SELF
        | AddWatchFlags::IN_MOVE_SELF
        | AddWatchFlags::IN_ONLYDIR;
    for _ in 0..MAX_REARMS {
        let dir = nearest_directory(socket).ok_or_else(|| WatchError::NoDirectory {
            path: socket.to_owned(),
        })?;
        match inotify.add_watch(dir, mask) {
            // A deeper directory may have appeared between the look and the watch,
            // and its creation event would then be missed: look again.
            Ok(wd) if nearest_directory(socket) == Some(dir) => return Ok((dir.to_owned(), wd)),
            Ok(wd) => {
                let _ = inotify.rm_watch(wd);
            }
            // Removed between the look and the watch.
            Err(Errno::ENOENT | Errno::ENOTDIR) => {}
            Err(source) => {
                return Err(WatchError::Add {
                    path: dir.to_owned(),
                    source,
                });
            }
        }
    }
    Err(WatchError::Unsettled {
        path: socket.to_owned(),
    })
}

fn nearest_directory(socket: &Path) -> Option<&Path> {
    socket.ancestors().skip(1).find(|dir| dir.is_dir())
}

/// One upstream's wake-ups: the watch (for a unix-socket address) and the burst of
/// quick attempts that follows a wake-up until a subscription is established.
pub(super) struct SocketWake {
    socket: Option<PathBuf>,
    watch: Option<SocketWatch>,
    burst_until: Option<Instant>,
    burst_next: Duration,
    /// Whether a failure to watch has been logged (once per upstream, at warn).
    warned: bool,
}

impl SocketWake {
    /// Arms the watch at once for a unix socket, so a daemon that comes back before
    /// the first wait is still noticed; TCP addresses keep the timer only.
    pub(super) fn new(address: &str, upstream: &str) -> Self {
        let socket = match Address::parse(address) {
            Ok(Address::Unix(path)) => Some(path),
            _ => None,
        };
        let mut wake = Self {
            socket,
            watch: None,
            burst_until: None,
            burst_next: BURST_FIRST,
            warned: false,
        };
        wake.ensure_watch(upstream);
        wake
    }

    /// Inside the burst after a wake-up, the delay before the next quick attempt;
    /// `None` when the regular backoff applies.
    pub(super) fn burst_delay(&mut self, upstream: &str) -> Option<Duration> {
        let until = self.burst_until?;
        if Instant::now() < until {
            let delay = self.burst_next;
            self.burst_next = (delay * 2).min(BURST_INTERVAL);
            return Some(delay);
        }
        self.burst_until = None;
        tracing::warn!(
            upstream,
            window = ?BURST_WINDOW,
            "the upstream's socket appeared but nothing answered on it; back to the backoff"
        );
        None
    }

    /// Returns when the socket is created; never, for a TCP upstream or one whose
    /// socket cannot be watched (the timer then decides alone).
    pub(super) async fn socket_created(&mut self, upstream: &str) {
        self.ensure_watch(upstream);
        let Some(watch) = self.watch.as_mut() else {
            return std::future::pending().await;
        };
        match watch.changed().await {
            Ok(()) => {
                tracing::info!(upstream, socket = %watch.path().display(), "the upstream's socket was created; connecting at once");
                self.burst_until = Some(Instant::now() + BURST_WINDOW);
                self.burst_next = BURST_FIRST;
            }
            Err(error) => {
                self.report(upstream, &error);
                // Tried again at the next wait; until then the timer decides.
                self.watch = None;
                std::future::pending().await
            }
        }
    }

    /// A subscription is up: the burst, if any, is over, so a subscription that
    /// breaks at once is retried at the backoff's pace.
    pub(super) fn subscribed(&mut self) {
        self.burst_until = None;
    }

    fn ensure_watch(&mut self, upstream: &str) {
        let Some(socket) = &self.socket else { return };
        if self.watch.is_some() {
            return;
        }
        match SocketWatch::new(socket) {
            Ok(watch) => self.watch = Some(watch),
            Err(error) => self.report(upstream, &error),
        }
    }

    fn report(&mut self, upstream: &str, error: &WatchError) {
        let error = crate::errors::chain(error);
        if self.warned {
            tracing::debug!(upstream, %error, "cannot watch the upstream's socket");
        } else {
            tracing::warn!(upstream, %error, "cannot watch the upstream's socket; reconnecting on the backoff timer only");
            self.warned = true;
        }
    }
}

#[cfg(test)]
#[path = "watch_tests.rs"]
mod tests;
