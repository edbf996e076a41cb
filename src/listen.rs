//! Opening the gateway's listeners safely: a unix socket that never steals a live
//! gateway's path (with the mode and group asked for), and a TCP listener that serves
//! plaintext beyond loopback only when told to.

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
        "refusing to serve plaintext on {addr}: it is not a loopback address, so anyone on the \
         network could publish and subscribe; configure [exchange.tls] (cert, key, and \
         client_ca for client certificates), listen on 127.0.0.1 or [::1], or pass --insecure \
         (exchange.insecure = true) to allow it anyway"
    )]
    NotLoopback { addr: SocketAddr },
    #[error(
        "refusing to serve TLS without client certificates on {addr}: it is not a loopback \
         address, so anyone on the network could publish (forge audit events) and subscribe; \
         set exchange.tls.client_ca (--tls-client-ca), listen on 127.0.0.1 or [::1], or set \
         exchange.tls.allow_anonymous_clients = true (--tls-allow-anonymous) to allow it anyway"
    )]
    AnonymousTls { addr: SocketAddr },
    #[error(
        "`exchange.socket_group` {group:?}: no such group (give a group name from /etc/group \
         or a numeric gid)"
    )]
    NoSuchGroup { group: String },
    #[error("`exchange.socket_group` {group:?}: cannot look the group up")]
    GroupLookup {
        group: String,
        #[source]
        source: io::Error,
    },
    #[error(
        "cannot give {path:?} to group {group:?} (gid {gid}): eventgate must run as root or \
         as a member of that group (`exchange.socket_group`)"
    )]
    Chown {
        path: PathBuf,
        group: String,
        gid: u32,
        #[source]
        source: io::Error,
    },
    #[error("cannot listen on {addr}")]
    BindTcp {
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
}

/// A bound unix socket that removes its file when dropped, but only if the file is
/// still the one it created (a successor may have replaced it).
pub(crate) struct UnixSocket {
    listener: Option<UnixListener>,
    path: PathBuf,
    inode: u64,
}

impl UnixSocket {
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Hands out the listener; the file is still cleaned up when `self` drops.
    pub(crate) fn take_listener(&mut self) -> Option<UnixListener> {
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

/// A group the socket file is given to (`exchange.socket_group`), resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SocketGroup {
    /// As configured, for messages.
    pub name: String,
    pub gid: u32,
}

impl SocketGroup {
    /// A numeric gid is taken as it is (a container may have no /etc/group entry for
    /// it); a name is looked up in the system's group database.
    pub(crate) fn resolve(spec: &str) -> Result<Self, ListenError> {
        if let Ok(gid) = spec.parse::<u32>() {
            return Ok(Self {
                name: spec.to_owned(),
                gid,
            });
        }
        let gid = lookup_group(spec)?.ok_or_else(|| ListenError::NoSuchGroup {
            group: spec.to_owned(),
        })?;
        Ok(Self {
            name: spec.to_owned(),
            gid,
        })
    }
}

/// `getgrnam_r`, growing the buffer while the entry does not fit.
fn lookup_group(name: &str) -> Result<Option<u32>, ListenError> {
    let lookup_error = |source| ListenError::GroupLookup {
        group: name.to_owned(),
        source,
    };
    let c_name = std::ffi::CString::new(name)
        .map_err(|_| lookup_error(io::Error::from(io::ErrorKind::InvalidInput)))?;
    let mut buffer = vec![0u8; 1024];
    loop {
        // SAFETY: every pointer refers to memory owned here that outlives the call;
        // `group` is only read when `result` says the call filled it.
        let mut group: libc::group = unsafe { std::mem::zeroed() };
        let mut result: *mut libc::group = std::ptr::null_mut();
        let code = unsafe {
            libc::getgrnam_r(
                c_name.as_ptr(),
                &mut group,
                buffer.as_mut_ptr().cast(),
                buffer.len(),
                &mut result,
            )
        };
        match code {
            0 if result.is_null() => return Ok(None),
            0 => return Ok(Some(group.gr_gid)),
            libc::ERANGE if buffer.len() < 1 << 20 => buffer.resize(buffer.len() * 2, 0),
            // Some C libraries report "no such group" as an error code.
            libc::ENOENT | libc::ESRCH | libc::EBADF | libc::EPERM => return Ok(None),
            code => return Err(lookup_error(io::Error::from_raw_os_error(code))),
        }
    }
}

/// Binds a unix socket at `path` with `mode` (and `group`, when given). A socket file
/// left by a dead process is replaced; one that still accepts connections is left
/// alone and reported.
pub(crate) fn bind_unix(
    path: &Path,
    mode: u32,
    group: Option<&SocketGroup>,
) -> Result<UnixSocket, ListenError> {
    let len = path.as_os_str().len();
    if len > MAX_SOCKET_PATH {
        return Err(ListenError::PathTooLong {
            path: path.into(),
            len,
        });
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        crate::fsmode::create_dir_all(dir).map_err(|source| ListenError::CreateDir {
            dir: dir.into(),
            source,
        })?;
    }
    remove_if_stale(path)?;
    // Clients may connect the moment the file exists, so it must never exist with the
    // process's umask: bind under a private name beside it, set group and mode there,
    // then rename it into place (a rename keeps the inode the listener is bound to).
    let staging = staging_path(path);
    let bound_at = staging.as_deref().unwrap_or(path);
    let listener = UnixListener::bind(bound_at).map_err(|source| ListenError::BindUnix {
        path: path.into(),
        source,
    })?;
    let finish = || -> Result<(), ListenError> {
        if let Some(group) = group {
            std::os::unix::fs::chown(bound_at, None, Some(group.gid)).map_err(|source| {
                ListenError::Chown {
                    path: path.into(),
                    group: group.name.clone(),
                    gid: group.gid,
                    source,
                }
            })?;
        }
        std::fs::set_permissions(bound_at, std::fs::Permissions::from_mode(mode)).map_err(
            |source| ListenError::Chmod {
                path: path.into(),
                mode,
                source,
            },
        )?;
        if bound_at != path {
            rename_no_replace(bound_at, path)?;
        }
        Ok(())
    };
    if let Err(error) = finish() {
        // The socket must not stay behind with the wrong group or mode.
        let _ = std::fs::remove_file(bound_at);
        return Err(error);
    }
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

/// A name beside `path` to bind under before the socket is renamed into place, or
/// `None` when that name would not fit in a socket address (then the socket is bound
/// in place and is briefly visible with the umask's mode).
fn staging_path(path: &Path) -> Option<PathBuf> {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = format!(".{}-{n}.bind", std::process::id());
    let staging = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.join(name),
        _ => PathBuf::from(name),
    };
    (staging.as_os_str().len() <= MAX_SOCKET_PATH).then_some(staging)
}

/// Renames the staged socket into place unless something took `to` since the stale
/// check (another gateway starting at the same moment keeps its socket).
fn rename_no_replace(from: &Path, to: &Path) -> Result<(), ListenError> {
    use std::os::unix::ffi::OsStrExt;
    let bind_error = |source| ListenError::BindUnix {
        path: to.into(),
        source,
    };
    let c_from = std::ffi::CString::new(from.as_os_str().as_bytes())
        .map_err(|_| bind_error(io::Error::from(io::ErrorKind::InvalidInput)))?;
    let c_to = std::ffi::CString::new(to.as_os_str().as_bytes())
        .map_err(|_| bind_error(io::Error::from(io::ErrorKind::InvalidInput)))?;
    // SAFETY: both pointers are NUL-terminated strings that outlive the call.
    let code = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            c_from.as_ptr(),
            libc::AT_FDCWD,
            c_to.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if code == 0 {
        return Ok(());
    }
    let error = io::Error::last_os_error();
    match error.raw_os_error() {
        Some(libc::EEXIST) => Err(ListenError::InUse { path: to.into() }),
        // File systems without RENAME_NOREPLACE: a plain rename.
        Some(libc::EINVAL | libc::ENOSYS) => std::fs::rename(from, to).map_err(bind_error),
        _ => Err(bind_error(error)),
    }
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

/// How the TCP listener is protected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TcpSecurity {
    Tls {
        /// Clients must present a certificate (`client_ca`).
        client_certificates: bool,
        /// Anonymous clients beyond loopback were explicitly allowed.
        allow_anonymous: bool,
    },
    /// Plaintext; allowed beyond loopback only when explicitly asked for.
    Plaintext { insecure: bool },
}

/// Binds a TCP listener. Plaintext beyond loopback would expose an unauthenticated,
/// unencrypted exchange to the network, so it needs TLS or an explicit `insecure`
/// (logged as a warning); TLS without client certificates authenticates nobody, so
/// beyond loopback it needs an explicit `allow_anonymous_clients` (a warning too).
pub(crate) async fn bind_tcp(
    addr: SocketAddr,
    security: TcpSecurity,
) -> Result<TcpListener, ListenError> {
    match security {
        TcpSecurity::Tls {
            client_certificates: false,
            allow_anonymous,
        } if !addr.ip().is_loopback() => {
            if !allow_anonymous {
                return Err(ListenError::AnonymousTls { addr });
            }
            tracing::warn!(
                %addr,
                "serving TLS without client certificates on a non-loopback address \
                 (exchange.tls.allow_anonymous_clients): anyone who can reach it can \
                 publish and subscribe"
            );
        }
        TcpSecurity::Plaintext { insecure: false } if !addr.ip().is_loopback() => {
            return Err(ListenError::NotLoopback { addr });
        }
        TcpSecurity::Plaintext { insecure: true } if !addr.ip().is_loopback() => {
            tracing::warn!(
                %addr,
                "serving plaintext on a non-loopback address (--insecure): anyone who can \
                 reach it can publish and subscribe, unencrypted"
            );
        }
        _ => {}
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

        let live = bind_unix(&path, 0o660, None).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o660);
        assert!(matches!(
            bind_unix(&path, 0o660, None),
            Err(ListenError::InUse { .. })
        ));

        // A socket file with nobody listening, as a killed process leaves it.
        drop(std::os::unix::net::UnixListener::bind(dir.path().join("dead.sock")).unwrap());
        let dead = dir.path().join("dead.sock");
        assert!(dead.exists());
        let replaced = bind_unix(&dead, 0o600, None).unwrap();
        assert!(dead.exists());
        drop(replaced);
        assert!(!dead.exists(), "our own socket is removed on drop");

        std::fs::write(dir.path().join("file"), b"x").unwrap();
        assert!(matches!(
            bind_unix(&dir.path().join("file"), 0o660, None),
            Err(ListenError::NotASocket { .. })
        ));
        let long = dir.path().join("x".repeat(120));
        assert!(matches!(
            bind_unix(&long, 0o660, None),
            Err(ListenError::PathTooLong { .. })
        ));
        drop(live);
        assert!(!path.exists());
    }

    /// A client that connects the moment the socket appears must find it with its
    /// final mode: a watcher looks at the path as fast as it can while it is bound
    /// again and again, and nothing but the socket is left in the directory.
    #[tokio::test]
    async fn the_socket_never_appears_with_the_umask_mode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let watcher = {
            let (path, done) = (path.clone(), done.clone());
            std::thread::spawn(move || {
                let mut seen = std::collections::BTreeSet::new();
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    if let Ok(meta) = std::fs::symlink_metadata(&path) {
                        seen.insert(meta.permissions().mode() & 0o777);
                    }
                }
                seen
            })
        };
        for _ in 0..2000 {
            drop(bind_unix(&path, 0o600, None).unwrap());
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        let seen = watcher.join().unwrap();
        assert!(seen.iter().all(|m| *m == 0o600), "modes seen: {seen:?}");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);

        std::fs::write(&path, b"taken").unwrap();
        let staged = dir.path().join("staged");
        std::fs::write(&staged, b"ours").unwrap();
        assert!(matches!(
            rename_no_replace(&staged, &path),
            Err(ListenError::InUse { .. })
        ));
        assert_eq!(std::fs::read(&path).unwrap(), b"taken");
    }

    #[tokio::test]
    async fn plaintext_and_anonymous_tls_stay_on_loopback_unless_allowed() {
        let plain = TcpSecurity::Plaintext { insecure: false };
        assert!(matches!(
            bind_tcp("0.0.0.0:0".parse().unwrap(), plain).await,
            Err(ListenError::NotLoopback { .. })
        ));
        let l = bind_tcp("127.0.0.1:0".parse().unwrap(), plain)
            .await
            .unwrap();
        assert!(l.local_addr().unwrap().ip().is_loopback());
        let tls = |client_certificates, allow_anonymous| TcpSecurity::Tls {
            client_certificates,
            allow_anonymous,
        };
        for security in [
            tls(true, false),
            tls(false, true),
            TcpSecurity::Plaintext { insecure: true },
        ] {
            bind_tcp("0.0.0.0:0".parse().unwrap(), security)
                .await
                .unwrap();
        }
        assert!(matches!(
            bind_tcp("0.0.0.0:0".parse().unwrap(), tls(false, false)).await,
            Err(ListenError::AnonymousTls { .. })
        ));
        bind_tcp("127.0.0.1:0".parse().unwrap(), tls(false, false))
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn groups_resolve_by_name_or_number() {
        assert_eq!(SocketGroup::resolve("4242").unwrap().gid, 4242);
        assert!(matches!(
            SocketGroup::resolve("no-such-group-eventgate"),
            Err(ListenError::NoSuchGroup { .. })
        ));
        // The group of the current process exists under some name on any system
        // with a group database; numbers are always accepted.
        let gid = unsafe { libc::getegid() };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("g.sock");
        let group = SocketGroup::resolve(&gid.to_string()).unwrap();
        let socket = bind_unix(&path, 0o660, Some(&group)).unwrap();
        assert_eq!(std::fs::metadata(socket.path()).unwrap().gid(), gid);
    }
}
