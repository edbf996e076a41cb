//! TLS for the exchange's TCP listener (`[exchange.tls]`) and for the clients that
//! connect to it (`--tls-ca`, `--tls-cert`, `--tls-key`), with rustls underneath.
//! PEM files are read and checked here first, so a bad file is reported by name and
//! by the key (or flag) that points at it, not as a generic handshake setup error.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use serde::{Deserialize, Serialize};
use thiserror::Error;
use tonic::transport::{Certificate, ClientTlsConfig, Identity, Server, ServerTlsConfig};

#[derive(Debug, Error)]
pub enum TlsError {
    #[error("cannot read {key} file {path:?}")]
    Read {
        key: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{key} file {path:?} holds no PEM certificate (expected a \"BEGIN CERTIFICATE\" block)"
    )]
    NoCertificate { key: &'static str, path: PathBuf },
    #[error("{key} file {path:?} is not valid PEM: {detail}")]
    BadPem {
        key: &'static str,
        path: PathBuf,
        detail: String,
    },
    #[error(
        "{key} file {path:?} holds no private key (expected a PEM \"PRIVATE KEY\", \
         \"RSA PRIVATE KEY\" or \"EC PRIVATE KEY\" block): {detail}"
    )]
    NoPrivateKey {
        key: &'static str,
        path: PathBuf,
        detail: String,
    },
    #[error("{what} needs both a certificate and its key: give {missing} too")]
    Incomplete {
        what: &'static str,
        missing: &'static str,
    },
    #[error(
        "cannot set up TLS with certificate {cert:?} and key {key:?} (does the key belong to \
         the certificate?)"
    )]
    Setup {
        cert: PathBuf,
        key: PathBuf,
        #[source]
        source: tonic::transport::Error,
    },
}

/// `[exchange.tls]`: the TCP listener's certificate, and optionally the CA its clients'
/// certificates must be signed by (mutual TLS).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TlsSettings {
    /// PEM certificate chain presented to clients (leaf first).
    pub cert: PathBuf,
    /// PEM private key of `cert`.
    pub key: PathBuf,
    /// PEM CA certificate(s); when set, every client must present a certificate
    /// signed by one of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_ca: Option<PathBuf>,
    /// Serve TLS without `client_ca` on a non-loopback address: clients are not
    /// authenticated, so anyone who can reach the port can publish (forge audit
    /// events) and subscribe.
    #[serde(default)]
    pub allow_anonymous_clients: bool,
}

const CERT_KEY: &str = "`exchange.tls.cert`";
const KEY_KEY: &str = "`exchange.tls.key`";
const CA_KEY: &str = "`exchange.tls.client_ca`";

impl TlsSettings {
    /// Applies this TLS configuration to a server builder: the files are read and
    /// checked, and rustls builds its configuration, so every problem shows at start.
    /// A client that has not finished its handshake after `handshake_timeout` is
    /// disconnected.
    pub fn apply(&self, server: Server, handshake_timeout: Duration) -> Result<Server, TlsError> {
        let cert = read_certs(CERT_KEY, &self.cert)?;
        let key = read_key(KEY_KEY, &self.key)?;
        let mut config = ServerTlsConfig::new()
            .identity(Identity::from_pem(cert, key))
            .timeout(handshake_timeout);
        if let Some(ca) = &self.client_ca {
            config = config.client_ca_root(Certificate::from_pem(read_certs(CA_KEY, ca)?));
        }
        server.tls_config(config).map_err(|source| TlsError::Setup {
            cert: self.cert.clone(),
            key: self.key.clone(),
            source,
        })
    }
}

/// A client's TLS files, from `--tls-ca`, `--tls-cert` and `--tls-key`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientTls {
    /// CA that signed the server's certificate.
    pub ca: Option<PathBuf>,
    /// This client's certificate and key, for servers that require one.
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

impl ClientTls {
    pub fn is_enabled(&self) -> bool {
        self.ca.is_some() || self.cert.is_some() || self.key.is_some()
    }

    /// The tonic client configuration; `None` when no TLS was asked for.
    pub fn config(&self) -> Result<Option<ClientTlsConfig>, TlsError> {
        if !self.is_enabled() {
            return Ok(None);
        }
        let mut config = ClientTlsConfig::new();
        if let Some(ca) = &self.ca {
            config = config.ca_certificate(Certificate::from_pem(read_certs("--tls-ca", ca)?));
        }
        match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => {
                config = config.identity(Identity::from_pem(
                    read_certs("--tls-cert", cert)?,
                    read_key("--tls-key", key)?,
                ));
            }
            (Some(_), None) => {
                return Err(TlsError::Incomplete {
                    what: "--tls-cert",
                    missing: "--tls-key",
                });
            }
            (None, Some(_)) => {
                return Err(TlsError::Incomplete {
                    what: "--tls-key",
                    missing: "--tls-cert",
                });
            }
            (None, None) => {}
        }
        Ok(Some(config))
    }
}

fn read(key: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        key,
        path: path.into(),
        source,
    })
}

/// The file's bytes, once it is known to hold at least one well-formed certificate.
pub(crate) fn read_certs(key: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    let pem = read(key, path)?;
    let mut count = 0;
    for cert in CertificateDer::pem_slice_iter(&pem) {
        cert.map_err(|e| TlsError::BadPem {
            key,
            path: path.into(),
            detail: e.to_string(),
        })?;
        count += 1;
    }
    if count == 0 {
        return Err(TlsError::NoCertificate {
            key,
            path: path.into(),
        });
    }
    Ok(pem)
}

/// The file's bytes, once it is known to hold a private key.
pub(crate) fn read_key(key: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    let pem = read(key, path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| TlsError::NoPrivateKey {
        key,
        path: path.into(),
        detail: e.to_string(),
    })?;
    Ok(pem)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_files_are_named_with_their_key() {
        let dir = tempfile::tempdir().unwrap();
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "not pem at all\n").unwrap();
        let settings = TlsSettings {
            cert: dir.path().join("missing.pem"),
            key: junk.clone(),
            client_ca: None,
            allow_anonymous_clients: false,
        };
        let error = settings
            .apply(Server::builder(), Duration::from_secs(1))
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("cannot read `exchange.tls.cert` file") && error.contains("missing.pem"),
            "{error}"
        );
        let settings = TlsSettings {
            cert: junk.clone(),
            ..settings
        };
        let error = settings
            .apply(Server::builder(), Duration::from_secs(1))
            .unwrap_err()
            .to_string();
        assert!(error.contains("holds no PEM certificate"), "{error}");
        let client = ClientTls {
            cert: Some(junk),
            ..ClientTls::default()
        };
        let error = client.config().unwrap_err().to_string();
        assert!(error.contains("give --tls-key too"), "{error}");
    }
}
