//! Where a PostgreSQL store is and how to reach it: the `url` (a `postgres://` URL or
//! libpq `key=value` words), the password from a file or the environment, and TLS
//! (`verify-full` unless turned off, with a CA file or the system's roots).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use serde::Deserialize;
use tokio_postgres::config::{Host, SslMode};

use super::PostgresError;
use crate::units::duration_text;

/// The connection keys a `postgres` forwarder and `--store postgres://` share.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct ConnectOptions {
    /// `postgres://user@host:port/dbname?...` or `host=... user=... dbname=...`. No
    /// password here (it would be in every copy of the configuration): use
    /// `password_file` or `password_env`.
    pub(crate) url: String,
    /// A file holding the password (one line; a trailing newline is not part of it).
    /// Read at every connection, so a rotated password is picked up.
    #[serde(default)]
    pub(crate) password_file: Option<PathBuf>,
    /// An environment variable holding the password.
    #[serde(default)]
    pub(crate) password_env: Option<String>,
    #[serde(default)]
    pub(crate) tls: TlsMode,
    /// PEM certificates the server's certificate must chain to; the system's roots
    /// when not set.
    #[serde(default)]
    pub(crate) ca_file: Option<PathBuf>,
    #[serde(default = "default_connect_timeout", with = "duration_text")]
    pub(crate) connect_timeout: Duration,
}

fn default_connect_timeout() -> Duration {
    Duration::from_secs(10)
}

/// `tls`: libpq's `sslmode` names for the two modes eventgate offers.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum TlsMode {
    /// Encrypted, the server's certificate checked against the CA and its name
    /// against the host: what stops a man in the middle.
    #[default]
    VerifyFull,
    /// Plain TCP (a unix socket, a loopback-only server, a private network).
    Disable,
}

/// What libpq-style keys in `url` eventgate refuses, and what to use instead.
const REFUSED_KEYS: &[(&str, &str)] = &[
    ("password", "`password_file` or `password_env`"),
    ("sslmode", "`tls` (\"verify-full\" or \"disable\")"),
    ("sslrootcert", "`ca_file`"),
    (
        "sslcert",
        "nothing yet: client certificates are not supported",
    ),
    (
        "sslkey",
        "nothing yet: client certificates are not supported",
    ),
];

/// A checked connection configuration, ready to connect with.
#[derive(Clone)]
pub(crate) struct Target {
    config: tokio_postgres::Config,
    options: ConnectOptions,
    tls: Option<Arc<rustls::ClientConfig>>,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

impl ConnectOptions {
    /// Checks everything that does not need the server: the URL, the password's
    /// source, the CA file. `check-config` runs the same.
    pub(crate) fn target(&self) -> Result<Target, PostgresError> {
        let invalid = |problem: String| PostgresError::Config(problem);
        for (key, instead) in REFUSED_KEYS {
            if mentions(&self.url, key) {
                return Err(invalid(format!("`url` must not set {key}: use {instead}")));
            }
        }
        let config: tokio_postgres::Config = self.url.parse().map_err(|e| {
            invalid(format!(
                "`url` is neither a postgres:// URL nor libpq key=value words: {e}"
            ))
        })?;
        if config.get_password().is_some() {
            return Err(invalid(
                "`url` must not hold the password: use `password_file` or `password_env`".into(),
            ));
        }
        if config.get_user().is_none() {
            return Err(invalid(
                "`url` must name the user (postgres://USER@host/dbname)".into(),
            ));
        }
        if config.get_hosts().is_empty() {
            return Err(invalid(
                "`url` must name the host (postgres://user@HOST/dbname)".into(),
            ));
        }
        if self.password_file.is_some() && self.password_env.is_some() {
            return Err(invalid(
                "give the password once: `password_file` or `password_env`, not both".into(),
            ));
        }
        if let Some(name) = &self.password_env
            && (name.is_empty() || name.contains('='))
        {
            return Err(invalid(format!(
                "`password_env` {name:?} is not an environment variable name"
            )));
        }
        if self.connect_timeout.is_zero() || self.connect_timeout > Duration::from_secs(300) {
            return Err(invalid(
                "`connect_timeout` must be between 1ms and 5m".into(),
            ));
        }
        let tcp = config
            .get_hosts()
            .iter()
            .any(|host| matches!(host, Host::Tcp(_)));
        let tls = match (self.tls, tcp) {
            (TlsMode::VerifyFull, true) => Some(Arc::new(self.tls_config()?)),
            (TlsMode::VerifyFull, false) | (TlsMode::Disable, _) => {
                if self.ca_file.is_some() && self.tls == TlsMode::Disable {
                    return Err(invalid(
                        "`ca_file` is set but `tls` is \"disable\": remove one".into(),
                    ));
                }
                None
            }
        };
        let mut config = config;
        config.connect_timeout(self.connect_timeout);
        config.ssl_mode(match tls {
            Some(_) => SslMode::Require,
            None => SslMode::Disable,
        });
        if config.get_application_name().is_none() {
            config.application_name("eventgate");
        }
        Ok(Target {
            config,
            options: self.clone(),
            tls,
        })
    }

    fn tls_config(&self) -> Result<rustls::ClientConfig, PostgresError> {
        let mut roots = rustls::RootCertStore::empty();
        match &self.ca_file {
            Some(path) => {
                let certificates: Vec<CertificateDer<'static>> =
                    CertificateDer::pem_file_iter(path)
                        .and_then(|certs| certs.collect::<Result<_, _>>())
                        .map_err(|e| {
                            PostgresError::Config(format!(
                                "`ca_file` {}: not readable PEM certificates: {e}",
                                path.display()
                            ))
                        })?;
                if certificates.is_empty() {
                    return Err(PostgresError::Config(format!(
                        "`ca_file` {} holds no certificate (expected a \"BEGIN CERTIFICATE\" block)",
                        path.display()
                    )));
                }
                for certificate in certificates {
                    roots.add(certificate).map_err(|e| {
                        PostgresError::Config(format!(
                            "`ca_file` {}: a certificate cannot be used as a root: {e}",
                            path.display()
                        ))
                    })?;
                }
            }
            None => {
                let found = rustls_native_certs::load_native_certs();
                for certificate in found.certs {
                    // One unusable system certificate is not a reason to refuse.
                    let _ = roots.add(certificate);
                }
                if roots.is_empty() {
                    return Err(PostgresError::Config(
                        "`tls` is \"verify-full\" but the system has no CA certificates: set `ca_file`".into(),
                    ));
                }
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| PostgresError::Config(format!("TLS: {e}")))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(config)
    }
}

/// Whether libpq-style `key` is set in `url` (as a URL query parameter or a word).
fn mentions(url: &str, key: &str) -> bool {
    let query = url.split_once('?').map_or(url, |(_, query)| query);
    query
        .split(['&', ' '])
        .filter_map(|pair| pair.split_once('='))
        .any(|(name, _)| name.trim() == key)
}

impl Target {
    /// How long one connection attempt may take.
    pub(crate) fn connect_timeout(&self) -> Duration {
        self.options.connect_timeout
    }

    /// The server, database and user, for messages (never the password).
    pub(crate) fn describe(&self) -> String {
        let hosts: Vec<String> = self
            .config
            .get_hosts()
            .iter()
            .zip(
                self.config
                    .get_ports()
                    .iter()
                    .chain(std::iter::repeat(&5432)),
            )
            .map(|(host, port)| match host {
                Host::Tcp(name) => format!("{name}:{port}"),
                Host::Unix(path) => format!("{}", path.display()),
            })
            .collect();
        format!(
            "postgres://{}@{}/{}",
            self.config.get_user().unwrap_or_default(),
            hosts.join(","),
            self.config
                .get_dbname()
                .or(self.config.get_user())
                .unwrap_or_default()
        )
    }

    /// Connects (TLS as configured), reading the password now; the connection's
    /// task runs on the runtime until the client is dropped or the server closes it.
    pub(crate) async fn connect(&self) -> Result<tokio_postgres::Client, PostgresError> {
        let mut config = self.config.clone();
        if let Some(password) = self.password()? {
            config.password(password);
        }
        let timeout = self.options.connect_timeout;
        let what = self.describe();
        let failed = |source: tokio_postgres::Error| PostgresError::Connect {
            target: what.clone(),
            source,
        };
        let connected = match &self.tls {
            Some(checked) => {
                // The CA file is read again for each connection, so a corrected file
                // is used without a restart; the one checked at start stands in if
                // it has become unreadable since.
                let roots = match self.options.tls_config() {
                    Ok(roots) => roots,
                    Err(error) => {
                        tracing::warn!(target = %what, %error, "the CA file is unreadable now; using the one read at start");
                        (**checked).clone()
                    }
                };
                let tls = tokio_postgres_rustls::MakeRustlsConnect::new(roots);
                let connecting = config.connect(tls);
                let (client, connection) = tokio::time::timeout(timeout, connecting)
                    .await
                    .map_err(|_| PostgresError::ConnectTimeout {
                        target: what.clone(),
                        timeout,
                    })?
                    .map_err(failed)?;
                tokio::spawn(drive(what.clone(), connection));
                client
            }
            None => {
                let connecting = config.connect(tokio_postgres::NoTls);
                let (client, connection) = tokio::time::timeout(timeout, connecting)
                    .await
                    .map_err(|_| PostgresError::ConnectTimeout {
                        target: what.clone(),
                        timeout,
                    })?
                    .map_err(failed)?;
                tokio::spawn(drive(what.clone(), connection));
                client
            }
        };
        Ok(connected)
    }

    fn password(&self) -> Result<Option<String>, PostgresError> {
        if let Some(path) = &self.options.password_file {
            let text = std::fs::read_to_string(path).map_err(|source| PostgresError::Password {
                what: format!("`password_file` {}", path.display()),
                source,
            })?;
            let password = text.strip_suffix('\n').unwrap_or(&text);
            let password = password.strip_suffix('\r').unwrap_or(password);
            return Ok(Some(password.to_owned()));
        }
        if let Some(name) = &self.options.password_env {
            return match std::env::var(name) {
                Ok(password) => Ok(Some(password)),
                Err(error) => Err(PostgresError::Password {
                    what: format!("`password_env` {name}"),
                    source: std::io::Error::new(std::io::ErrorKind::NotFound, error),
                }),
            };
        }
        // libpq's own variable, for `--store postgres://...` on the command line.
        Ok(std::env::var("PGPASSWORD").ok())
    }
}

/// Runs one connection until it ends; its error reaches the client's next call too,
/// so it is only logged here.
async fn drive<S, T>(target: String, connection: tokio_postgres::Connection<S, T>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    if let Err(error) = connection.await {
        tracing::debug!(target = %target, %error, "postgres connection ended");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(url: &str) -> ConnectOptions {
        ConnectOptions {
            url: url.into(),
            password_file: None,
            password_env: None,
            tls: TlsMode::Disable,
            ca_file: None,
            connect_timeout: default_connect_timeout(),
        }
    }

    #[test]
    fn urls_and_words_are_read_and_secrets_refused() {
        let target = options("postgres://eventgate@db.example:6432/history")
            .target()
            .unwrap();
        assert_eq!(
            target.describe(),
            "postgres://eventgate@db.example:6432/history"
        );
        let words = options("host=/run/postgresql user=eg dbname=h")
            .target()
            .unwrap();
        assert_eq!(words.describe(), "postgres://eg@/run/postgresql/h");
        for (url, expected) in [
            ("postgres://u:secret@h/d", "must not hold the password"),
            ("host=h user=u password=secret", "must not set password"),
            ("postgres://u@h/d?sslmode=require", "use `tls`"),
            ("postgres://u@h/d?sslrootcert=/x", "`ca_file`"),
            ("postgres://h/d", "must name the user"),
            ("mysql://u@h/d", "neither a postgres:// URL"),
        ] {
            let error = options(url).target().unwrap_err().to_string();
            assert!(error.contains(expected), "{url}: {error}");
        }
    }

    #[test]
    fn tls_needs_readable_roots() {
        let mut o = options("postgres://u@h/d");
        o.tls = TlsMode::VerifyFull;
        o.ca_file = Some("/nonexistent/ca.pem".into());
        let error = o.target().unwrap_err().to_string();
        assert!(error.contains("/nonexistent/ca.pem"), "{error}");
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "nothing").unwrap();
        o.ca_file = Some(empty);
        let error = o.target().unwrap_err().to_string();
        assert!(error.contains("holds no certificate"), "{error}");
        let mut plain = options("postgres://u@h/d");
        plain.ca_file = Some("/x".into());
        let error = plain.target().unwrap_err().to_string();
        assert!(error.contains("remove one"), "{error}");
    }

    #[test]
    fn the_password_comes_from_one_place() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pw");
        std::fs::write(&file, "s3cret\n").unwrap();
        let mut o = options("postgres://u@h/d");
        o.password_file = Some(file);
        assert_eq!(
            o.target().unwrap().password().unwrap().as_deref(),
            Some("s3cret")
        );
        o.password_env = Some("X".into());
        assert!(o.target().unwrap_err().to_string().contains("not both"));
        o.password_file = Some(dir.path().join("missing"));
        o.password_env = None;
        let error = o.target().unwrap().password().unwrap_err().to_string();
        assert!(error.contains("missing"), "{error}");
    }
}
