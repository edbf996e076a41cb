//! Who published an event: the process on the other end of the unix socket, as the
//! kernel reported it when it connected (`SO_PEERCRED`), or the subject of the client
//! certificate a TCP client presented over mutual TLS. Kept with the event everywhere
//! it goes: the spool, the audit store's `publisher_*` columns, the `publisher` field
//! of JSON lines, the Kafka `publisher` header and the dead-letter store.
//!
//! Events that came from no connection of ours (an upstream containerd, eventgate's
//! own markers), and TCP clients without a certificate, have no publisher: the
//! `source` says where they came from.

mod subject;

use std::io::Write as _;
use std::sync::Arc;

use rustls_pki_types::CertificateDer;
use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo, UdsConnectInfo};

pub(crate) use subject::certificate_subject;

/// The identity of the client that published (or forwarded) an event.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Publisher {
    /// A process connected to the unix socket. The kernel vouches for these (they are
    /// the credentials the process had when it connected); `pid` is `None` only
    /// where the platform does not report it.
    Process {
        uid: u32,
        gid: u32,
        pid: Option<u32>,
    },
    /// A TCP client whose certificate the configured `client_ca` verified: the
    /// leaf's subject as an RFC 4514 string (`CN=node-7,O=Example`).
    Certificate { subject: Arc<str> },
}

/// The publisher as stored in the four `publisher_*` columns (audit store and
/// dead-letter store): `uid`, `gid`, `pid`, `subject`, each NULL when absent.
pub(crate) type Columns<'a> = (Option<i64>, Option<i64>, Option<i64>, Option<&'a str>);

impl Publisher {
    /// The publisher of a request, from the connection information tonic puts in its
    /// extensions: the unix peer's credentials, or the verified client certificate.
    pub(crate) fn of_request(extensions: &http::Extensions) -> Option<Self> {
        if let Some(unix) = extensions.get::<UdsConnectInfo>() {
            let cred = unix.peer_cred?;
            return Some(Publisher::Process {
                uid: cred.uid(),
                gid: cred.gid(),
                pid: cred.pid().and_then(|pid| u32::try_from(pid).ok()),
            });
        }
        let tls = extensions.get::<TlsConnectInfo<TcpConnectInfo>>()?;
        Self::of_certificate(tls.peer_certs()?.first()?)
    }

    /// The publisher a client certificate (already verified by the TLS handshake)
    /// names. `None` when its subject cannot be read, which a certificate that
    /// passed verification does not do in practice.
    pub(crate) fn of_certificate(leaf: &CertificateDer<'_>) -> Option<Self> {
        match certificate_subject(leaf) {
            Some(subject) => Some(Publisher::Certificate {
                subject: subject.into(),
            }),
            None => {
                tracing::warn!(
                    "a client certificate's subject cannot be read; its events are stored without a publisher"
                );
                None
            }
        }
    }

    /// The JSON object JSON lines, query output and the Kafka header carry:
    /// `{"gid":0,"pid":123,"uid":0}` or `{"subject":"CN=..."}`, keys in byte order.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        // Writing into a Vec cannot fail.
        match self {
            Publisher::Process { uid, gid, pid } => {
                let _ = write!(out, "{{\"gid\":{gid},\"pid\":");
                match pid {
                    Some(pid) => {
                        let _ = write!(out, "{pid}");
                    }
                    None => out.extend_from_slice(b"null"),
                }
                let _ = write!(out, ",\"uid\":{uid}}}");
            }
            Publisher::Certificate { subject } => {
                out.extend_from_slice(b"{\"subject\":");
                let _ = serde_json::to_writer(&mut *out, &**subject);
                out.push(b'}');
            }
        }
    }

    /// [`Publisher::write_json`] as a string.
    pub fn to_json(&self) -> String {
        let mut out = Vec::with_capacity(48);
        self.write_json(&mut out);
        // Only ASCII and serde_json's output are written.
        String::from_utf8_lossy(&out).into_owned()
    }

    /// The values of the `publisher_uid`, `publisher_gid`, `publisher_pid` and
    /// `publisher_subject` columns.
    pub(crate) fn columns(publisher: Option<&Self>) -> Columns<'_> {
        match publisher {
            None => (None, None, None, None),
            Some(Publisher::Process { uid, gid, pid }) => (
                Some(i64::from(*uid)),
                Some(i64::from(*gid)),
                pid.map(i64::from),
                None,
            ),
            Some(Publisher::Certificate { subject }) => (None, None, None, Some(subject)),
        }
    }

    /// The inverse of [`Publisher::columns`]; an error says what does not fit (a row
    /// edited by hand, or written by something else).
    pub(crate) fn from_columns(
        uid: Option<i64>,
        gid: Option<i64>,
        pid: Option<i64>,
        subject: Option<String>,
    ) -> Result<Option<Self>, String> {
        let id = |name: &str, value: i64| {
            u32::try_from(value).map_err(|_| format!("publisher_{name} {value} is not a valid id"))
        };
        match (uid, gid, pid, subject) {
            (None, None, None, None) => Ok(None),
            (None, None, None, Some(subject)) => Ok(Some(Publisher::Certificate {
                subject: subject.into(),
            })),
            (Some(uid), Some(gid), pid, None) => Ok(Some(Publisher::Process {
                uid: id("uid", uid)?,
                gid: id("gid", gid)?,
                pid: pid.map(|pid| id("pid", pid)).transpose()?,
            })),
            (uid, gid, pid, subject) => Err(format!(
                "publisher columns do not describe one publisher (uid {uid:?}, gid {gid:?}, pid {pid:?}, subject {subject:?})"
            )),
        }
    }
}

#[cfg(test)]
mod tests;
