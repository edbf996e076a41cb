//! Opening the gateway's listeners safely: a unix socket that never steals a live
//! gateway's path, and a TCP listener that stays on loopback.

use std::io;
use std::net::SocketAddr;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use thiserror::Error;
use tokio::net::{TcpListener, UnixListener};

/// `sun_path` holds 108 bytes including the terminating NUL.
const MAX_SOCKET_PATH: usize = 107;

#[derive(Debug, Error)]
pub enum ListenError {
    #[error(
        "socket path {path:?} is {len} bytes; unix sockets allow at most {MAX_SOCKET_PATH}: \
         choose a shorter --socket or --data-dir"
    )]
    PathTooLong { path: PathBuf, len: usize },
    #[error("cannot create the socket directory {dir:?}")]
    CreateDir {
        dir: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "{path:?} exists and is not a socket; refusing to replace it (remove it or choose another --socket)"
    )]
    NotASocket { path: PathBuf },
    #[error(
        "{path:?} is in use by a running process (another eventgate?); stop it or choose another --socket"
    )]
    InUse { path: PathBuf },
    #[error("cannot probe the existing socket {path:?}")]
    Probe {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot remove the stale socket {path:?}")]
    RemoveStale {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot listen on {path:?}")]
    BindUnix {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot set mode {mode:o} on {path:?}")]
    Chmod {
        path: PathBuf,
        mode: u32,
        #[source]
        source: io::Error,
    },
    #[error(
        "refusing to listen on {addr}: it is not a loopback address and the exchange has no \
         TLS; use 127.0.0.1 or [::1], or the unix socket"
    )]
    NotLoopback { addr: SocketAddr },
    #[error("cannot listen on {addr}")]
    BindTcp {
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
}

/// A bound unix socket that removes its file when dropped, but only if the file is
/// still the one it created (a successor may have replaced it).
pub struct UnixSocket {
    listener: Option<UnixListener>,
    path: PathBuf,
    inode: u64,
}

impl UnixSocket {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Hands out the listener; the file is still cleaned up when `self` drops.
    pub fn take_listener(&mut self) -> Option<UnixListener> {
        self.listener.take()
    }
}

impl Drop for UnixSocket {
    fn drop(&mut self) {
        let ours = std::fs::symlink_metadata(&self.path).is_ok_and(|m| m.ino() == self.inode);
        if ours && let Err(error) = std::fs::remove_file(&self.path) {
            tracing::warn!(path = %self.path.display(), %error, "could not remove socket file");
        }
    }
}

/// Binds a unix socket at `path` with `mode`. A socket file left by a dead process is
/// replaced; one that still accepts connections is left alone and reported.
pub fn bind_unix(path: &Path, mode: u32) -> Result<UnixSocket, ListenError> {
    let len = path.as_os_str().len();
    if len > MAX_SOCKET_PATH {
        return Err(ListenError::PathTooLong {
            path: path.into(),
            len,
        });
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|source| ListenError::CreateDir {
            dir: dir.into(),
            source,
        })?;
    }
    remove_if_stale(path)?;
    let listener = UnixListener::bind(path).map_err(|source| ListenError::BindUnix {
        path: path.into(),
        source,
    })?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(|source| {
        ListenError::Chmod {
            path: path.into(),
            mode,
            source,
        }
    })?;
    let inode = std::fs::metadata(path)
        .map_err(|source| ListenError::BindUnix {
            path: path.into(),
            source,
        })?
        .ino();
    Ok(UnixSocket {
        listener: Some(listener),
        path: path.into(),
        inode,
    })
}

fn remove_if_stale(path: &Path) -> Result<(), ListenError> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(ListenError::Probe {
                path: path.into(),
                source,
            });
        }
    };
    if !meta.file_type().is_socket() {
        return Err(ListenError::NotASocket { path: path.into() });
    }
    match std::os::unix::net::UnixStream::connect(path) {
        Ok(_) => Err(ListenError::InUse { path: path.into() }),
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
            tracing::info!(path = %path.display(), "replacing stale socket from a previous run");
            std::fs::remove_file(path).map_err(|source| ListenError::RemoveStale {
                path: path.into(),
                source,
            })
        }
        Err(source) => Err(ListenError::Probe {
            path: path.into(),
            source,
        }),
    }
}

/// Binds a loopback TCP listener; anything else would expose an unauthenticated,
/// unencrypted exchange to the network.
pub async fn bind_tcp(addr: SocketAddr) -> Result<TcpListener, ListenError> {
    if !addr.ip().is_loopback() {
        return Err(ListenError::NotLoopback { addr });
    }
    TcpListener::bind(addr)
        .await
        .map_err(|source| ListenError::BindTcp { addr, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn stale_sockets_are_replaced_and_live_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");

        let live = bind_unix(&path, 0o660).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o660);
        assert!(matches!(
            bind_unix(&path, 0o660),
            Err(ListenError::InUse { .. })
        ));

        // A socket file with nobody listening, as a killed process leaves it.
        drop(std::os::unix::net::UnixListener::bind(dir.path().join("dead.sock")).unwrap());
        let dead = dir.path().join("dead.sock");
        assert!(dead.exists());
        let replaced = bind_unix(&dead, 0o600).unwrap();
        assert!(dead.exists());
        drop(replaced);
        assert!(!dead.exists(), "our own socket is removed on drop");

        std::fs::write(dir.path().join("file"), b"x").unwrap();
        assert!(matches!(
            bind_unix(&dir.path().join("file"), 0o660),
            Err(ListenError::NotASocket { .. })
        ));
        let long = dir.path().join("x".repeat(120));
        assert!(matches!(
            bind_unix(&long, 0o660),
            Err(ListenError::PathTooLong { .. })
        ));
        drop(live);
        assert!(!path.exists());
    }

    #[tokio::test]
    async fn tcp_stays_on_loopback() {
        assert!(matches!(
            bind_tcp("0.0.0.0:0".parse().unwrap()).await,
            Err(ListenError::NotLoopback { .. })
        ));
        let l = bind_tcp("127.0.0.1:0".parse().unwrap()).await.unwrap();
        assert!(l.local_addr().unwrap().ip().is_loopback());
    }
}
