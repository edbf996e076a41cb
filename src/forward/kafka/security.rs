//! `tls = { ... }` and `sasl = { ... }`: the typed keys for reaching a secured
//! cluster, turned into librdkafka's `security.protocol`, `ssl.*` and `sasl.*`
//! properties.
//!
//! Files are read when the options are parsed, so `check-config` and `serve` both
//! refuse a missing or malformed file by the key that names it, before librdkafka
//! sees anything. Secrets come only from files (`password_file`,
//! `client_secret_file`, `key_password_file`): a config file can then be shown,
//! versioned and templated without holding one. Their values are kept out of
//! `Debug` and handed to the log scrubber.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::forward::BuildError;

/// `tls = { ca, cert, key, key_password_file, verify_hostname }`. An empty table
/// means TLS with the system's CA certificates.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Tls {
    /// PEM file of the CA certificates that signed the brokers' certificates.
    pub ca: Option<PathBuf>,
    /// PEM client certificate, for clusters that authenticate clients by TLS.
    pub cert: Option<PathBuf>,
    /// PEM private key of `cert`.
    pub key: Option<PathBuf>,
    /// File holding the password of an encrypted `key`.
    pub key_password_file: Option<PathBuf>,
    /// Check that a broker's certificate names the host connected to.
    #[serde(default = "default_true")]
    pub verify_hostname: bool,
}

fn default_true() -> bool {
    true
}

/// `sasl.mechanism`, as Kafka spells them.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
pub(crate) enum Mechanism {
    #[serde(rename = "PLAIN")]
    Plain,
    #[serde(rename = "SCRAM-SHA-256")]
    ScramSha256,
    #[serde(rename = "SCRAM-SHA-512")]
    ScramSha512,
    #[serde(rename = "OAUTHBEARER")]
    OauthBearer,
    #[serde(rename = "GSSAPI")]
    Gssapi,
}

impl Mechanism {
    pub(crate) const NAMES: &'static str =
        "\"PLAIN\", \"SCRAM-SHA-256\", \"SCRAM-SHA-512\", \"OAUTHBEARER\" or \"GSSAPI\"";

    fn name(self) -> &'static str {
        match self {
            Mechanism::Plain => "PLAIN",
            Mechanism::ScramSha256 => "SCRAM-SHA-256",
            Mechanism::ScramSha512 => "SCRAM-SHA-512",
            Mechanism::OauthBearer => "OAUTHBEARER",
            Mechanism::Gssapi => "GSSAPI",
        }
    }
}

/// `sasl = { mechanism, username, password_file, oidc, kerberos }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Sasl {
    pub mechanism: Mechanism,
    /// For PLAIN and SCRAM.
    pub username: Option<String>,
    /// For PLAIN and SCRAM: a file holding the password (one trailing newline is
    /// not part of it).
    pub password_file: Option<PathBuf>,
    /// For OAUTHBEARER: the OIDC client-credentials flow managed clusters use.
    pub oidc: Option<Oidc>,
    /// For GSSAPI.
    pub kerberos: Option<Kerberos>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Oidc {
    pub token_endpoint: String,
    pub client_id: String,
    pub client_secret_file: PathBuf,
    pub scope: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Kerberos {
    /// The brokers' Kerberos service name (librdkafka's default: "kafka").
    pub service_name: Option<String>,
    pub principal: Option<String>,
    pub keytab: Option<PathBuf>,
}

/// The librdkafka properties the typed keys set, and the secrets among them.
#[derive(Default)]
pub(crate) struct Security {
    pub properties: Vec<(&'static str, String)>,
    secrets: Vec<String>,
}

impl fmt::Debug for Security {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.properties.iter().map(|(k, v)| {
                let shown = if self.secrets.contains(v) { "***" } else { v };
                (k, shown)
            }))
            .finish()
    }
}

/// librdkafka properties that the typed keys own once either is given, with their
/// aliases: a passthrough property naming one is dropped in their favour.
pub(crate) const OWNED: &[&str] = &[
    "security.protocol",
    "sasl.mechanisms",
    "sasl.mechanism",
    "sasl.username",
    "sasl.password",
    "sasl.oauthbearer.method",
    "sasl.oauthbearer.token.endpoint.url",
    "sasl.oauthbearer.client.id",
    "sasl.oauthbearer.client.secret",
    "sasl.oauthbearer.scope",
    "sasl.kerberos.service.name",
    "sasl.kerberos.principal",
    "sasl.kerberos.keytab",
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.key.password",
    "ssl.endpoint.identification.algorithm",
];

impl Security {
    /// Reads and checks every file the keys name.
    pub(crate) fn resolve(tls: Option<&Tls>, sasl: Option<&Sasl>) -> Result<Self, BuildError> {
        let mut out = Security::default();
        let protocol = match (tls.is_some(), sasl.is_some()) {
            (false, false) => return Ok(out),
            (true, false) => "ssl",
            (false, true) => "sasl_plaintext",
            (true, true) => "sasl_ssl",
        };
        out.properties.push(("security.protocol", protocol.into()));
        if let (None, Some(sasl)) = (tls, sasl)
            && matches!(sasl.mechanism, Mechanism::Plain | Mechanism::OauthBearer)
        {
            // SCRAM and GSSAPI never send the secret itself; these two do.
            tracing::warn!(
                mechanism = sasl.mechanism.name(),
                "kafka `sasl` {} without `tls` sends the credentials in clear text to anyone on the path; \
                 add `tls = {{}}` (the system's CAs) or `tls = {{ ca = \"...\" }}`",
                sasl.mechanism.name()
            );
        }
        if let Some(tls) = tls {
            out.tls(tls)?;
        }
        if let Some(sasl) = sasl {
            out.sasl(sasl)?;
        }
        Ok(out)
    }

    pub(crate) fn secrets(&self) -> &[String] {
        &self.secrets
    }

    /// Whether the typed keys set anything (and so own [`OWNED`]).
    pub(crate) fn is_set(&self) -> bool {
        !self.properties.is_empty()
    }

    fn set(&mut self, key: &'static str, value: impl Into<String>) {
        self.properties.push((key, value.into()));
    }

    fn secret(&mut self, key: &'static str, value: String) {
        self.secrets.push(value.clone());
        self.properties.push((key, value));
    }

    fn tls(&mut self, tls: &Tls) -> Result<(), BuildError> {
        let shown = |path: &Path| path.display().to_string();
        if let Some(ca) = &tls.ca {
            crate::tls::read_certs("`tls.ca`", ca).map_err(tls_error)?;
            self.set("ssl.ca.location", shown(ca));
        }
        match (&tls.cert, &tls.key) {
            (Some(cert), Some(key)) => {
                crate::tls::read_certs("`tls.cert`", cert).map_err(tls_error)?;
                match &tls.key_password_file {
                    // An encrypted key is only readable with its password, which is
                    // librdkafka's to use: here it only has to be a PEM file.
                    Some(file) => {
                        let pem = std::fs::read_to_string(key).map_err(|e| {
                            BuildError::Options(format!("cannot read `tls.key` file {key:?}: {e}"))
                        })?;
                        if !pem.contains("-----BEGIN ") {
                            return Err(BuildError::Options(format!(
                                "`tls.key` file {key:?} holds no PEM private key"
                            )));
                        }
                        let password = secret_file("tls.key_password_file", file)?;
                        self.secret("ssl.key.password", password);
                    }
                    None => {
                        crate::tls::read_key("`tls.key`", key).map_err(tls_error)?;
                    }
                }
                self.set("ssl.certificate.location", shown(cert));
                self.set("ssl.key.location", shown(key));
            }
            (Some(_), None) => {
                return Err(BuildError::Options(
                    "`tls.cert` needs `tls.key` (the certificate's private key)".into(),
                ));
            }
            (None, Some(_)) => {
                return Err(BuildError::Options(
                    "`tls.key` needs `tls.cert` (the certificate it belongs to)".into(),
                ));
            }
            (None, None) if tls.key_password_file.is_some() => {
                return Err(BuildError::Options(
                    "`tls.key_password_file` is only for an encrypted `tls.key`".into(),
                ));
            }
            (None, None) => {}
        }
        let algorithm = if tls.verify_hostname { "https" } else { "none" };
        self.set("ssl.endpoint.identification.algorithm", algorithm);
        Ok(())
    }

    fn sasl(&mut self, sasl: &Sasl) -> Result<(), BuildError> {
        let mechanism = sasl.mechanism;
        let bad = |message: String| Err(BuildError::Options(message));
        let name = mechanism.name();
        self.set("sasl.mechanisms", name);
        let password = matches!(
            mechanism,
            Mechanism::Plain | Mechanism::ScramSha256 | Mechanism::ScramSha512
        );
        if password {
            let Some(username) = sasl.username.as_deref().filter(|u| !u.is_empty()) else {
                return bad(format!(
                    "`sasl.mechanism = \"{name}\"` needs `sasl.username`"
                ));
            };
            let Some(file) = &sasl.password_file else {
                return bad(format!(
                    "`sasl.mechanism = \"{name}\"` needs `sasl.password_file` (a file holding the password)"
                ));
            };
            self.set("sasl.username", username);
            let password = secret_file("sasl.password_file", file)?;
            self.secret("sasl.password", password);
        } else if sasl.username.is_some() || sasl.password_file.is_some() {
            return bad(format!(
                "`sasl.username` and `sasl.password_file` are for PLAIN and SCRAM, not {name}"
            ));
        }
        match (mechanism, &sasl.oidc) {
            (Mechanism::OauthBearer, Some(oidc)) => self.oidc(oidc)?,
            (Mechanism::OauthBearer, None) => {
                return bad(
                    "`sasl.mechanism = \"OAUTHBEARER\"` needs `sasl.oidc = { token_endpoint, client_id, client_secret_file }`"
                        .into(),
                );
            }
            (_, Some(_)) => return bad(format!("`sasl.oidc` is for OAUTHBEARER, not {name}")),
            (_, None) => {}
        }
        match (mechanism, &sasl.kerberos) {
            (Mechanism::Gssapi, Some(kerberos)) => {
                if let Some(service) = &kerberos.service_name {
                    self.set("sasl.kerberos.service.name", service.as_str());
                }
                if let Some(principal) = &kerberos.principal {
                    self.set("sasl.kerberos.principal", principal.as_str());
                }
                if let Some(keytab) = &kerberos.keytab {
                    std::fs::File::open(keytab).map_err(|e| {
                        BuildError::Options(format!(
                            "cannot read `sasl.kerberos.keytab` file {keytab:?}: {e}"
                        ))
                    })?;
                    self.set("sasl.kerberos.keytab", keytab.display().to_string());
                }
            }
            // librdkafka's kinit command names the keytab and principal: without
            // them it refuses to start with a message about `sasl.kerberos.kinit.cmd`.
            (Mechanism::Gssapi, None) => {
                return bad(
                    "`sasl.mechanism = \"GSSAPI\"` needs `sasl.kerberos = { principal, keytab }` (and `service_name` unless the brokers' is \"kafka\")"
                        .into(),
                );
            }
            (_, Some(_)) => return bad(format!("`sasl.kerberos` is for GSSAPI, not {name}")),
            (_, None) => {}
        }
        Ok(())
    }

    fn oidc(&mut self, oidc: &Oidc) -> Result<(), BuildError> {
        let endpoint = oidc.token_endpoint.trim();
        if !(endpoint.starts_with("https://") || endpoint.starts_with("http://"))
            || endpoint.len() <= "https://".len()
        {
            return Err(BuildError::Options(format!(
                "`sasl.oidc.token_endpoint` {endpoint:?} must be an http(s) URL"
            )));
        }
        if oidc.client_id.trim().is_empty() {
            return Err(BuildError::Options(
                "`sasl.oidc.client_id` must not be empty".into(),
            ));
        }
        self.set("sasl.oauthbearer.method", "oidc");
        self.set("sasl.oauthbearer.token.endpoint.url", endpoint);
        self.set("sasl.oauthbearer.client.id", oidc.client_id.trim());
        let secret = secret_file("sasl.oidc.client_secret_file", &oidc.client_secret_file)?;
        self.secret("sasl.oauthbearer.client.secret", secret);
        if let Some(scope) = &oidc.scope {
            self.set("sasl.oauthbearer.scope", scope.as_str());
        }
        Ok(())
    }
}

fn tls_error(error: crate::tls::TlsError) -> BuildError {
    BuildError::Options(crate::errors::chain(&error))
}

/// The most a secret file may hold: a key pointed at a log or a device must be
/// refused, not read into memory.
const SECRET_MAX: u64 = 64 * 1024;

/// A secret from a file: its text without one trailing newline, which editors add.
fn secret_file(key: &str, path: &Path) -> Result<String, BuildError> {
    use std::io::Read as _;
    let cannot =
        |e: std::io::Error| BuildError::Options(format!("cannot read `{key}` file {path:?}: {e}"));
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|file| file.take(SECRET_MAX + 1).read_to_string(&mut text))
        .map_err(cannot)?;
    if text.len() as u64 > SECRET_MAX {
        return Err(BuildError::Options(format!(
            "`{key}` file {path:?} holds more than {SECRET_MAX} bytes: not a secret"
        )));
    }
    let text = text
        .strip_suffix('\n')
        .map(|t| t.strip_suffix('\r').unwrap_or(t))
        .unwrap_or(&text);
    if text.is_empty() {
        return Err(BuildError::Options(format!(
            "`{key}` file {path:?} is empty"
        )));
    }
    Ok(text.to_owned())
}
