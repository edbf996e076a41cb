//! Configuration: built-in defaults, then the TOML file, then command-line flags, then
//! validation. Every key is documented in `deploy/eventgate.example.toml`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use thiserror::Error;

use crate::admin::AdminSettings;
use crate::exchange::{ExchangeConfig, LimitSettings};
use crate::filter::Filter;
use crate::forward::{Kinds, Options};
use crate::pipeline::settings::{BatchSettings, CheckpointSettings, QueueSettings, RetrySettings};
use crate::spool::SpoolSettings;
use crate::tls::TlsSettings;
use crate::units::duration_text;
use crate::upstream::UpstreamSpec;

#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("cannot read config file {path:?}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The TOML parser's error is not kept as the source: its text quotes the
    /// offending line, which may hold a secret (`"sasl.password" = "...`). `detail`
    /// says where and what, with secret values masked (see [`describe_toml_error`]).
    #[error("invalid config {origin}: {detail}")]
    Parse { origin: String, detail: String },
    #[error("invalid config: `{key}` {problem}")]
    Invalid { key: &'static str, problem: String },
    /// A `[spool]` problem; the text names the key.
    #[error("invalid config: {0}")]
    Spool(String),
    #[error("invalid config: forwarder {name:?}: {problem}")]
    Forwarder { name: String, problem: String },
    #[error("invalid config: upstream {name:?}: {problem}")]
    Upstream { name: String, problem: String },
}

/// The whole configuration file.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Where eventgate keeps its socket, audit store and logs.
    pub data_dir: PathBuf,
    pub exchange: ExchangeSection,
    /// `[[forwarder]]` tables. Absent means the embedded default (a JSON-lines file
    /// and the SQLite audit store under the data directory); `forwarder = []` means none.
    #[serde(rename = "forwarder")]
    pub forwarders: Vec<ForwarderSpec>,
    pub pipeline: PipelineSection,
    /// `[spool]`: the durable on-disk log under `<data_dir>/spool`.
    pub spool: SpoolSettings,
    /// `[[upstream]]` tables: Events endpoints to subscribe to (containerd sockets).
    #[serde(rename = "upstream")]
    pub upstreams: Vec<UpstreamSpec>,
    pub dead_letter: DeadLetterSection,
    /// `[admin]`: the HTTP endpoint for metrics, health and readiness.
    pub admin: AdminSettings,
}

/// `[dead_letter]`: where events forwarders gave up on are kept.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct DeadLetterSection {
    /// The store's SQLite file; a relative path is under `data_dir`.
    pub path: PathBuf,
    /// How often a forwarder's worker looks for entries `eventgate dlq retry` requested.
    #[serde(with = "duration_text")]
    pub poll_interval: Duration,
}

impl Default for DeadLetterSection {
    fn default() -> Self {
        Self {
            path: PathBuf::from("deadletters.db"),
            poll_interval: Duration::from_secs(1),
        }
    }
}

/// `[pipeline]`: settings shared by all forwarders.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct PipelineSection {
    /// At shutdown, how long forwarders get to deliver what is queued.
    #[serde(with = "duration_text")]
    pub drain_timeout: Duration,
}

impl Default for PipelineSection {
    fn default() -> Self {
        Self {
            drain_timeout: Duration::from_secs(30),
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            data_dir: PathBuf::from("./data"),
            exchange: ExchangeSection::default(),
            forwarders: ForwarderSpec::embedded_default(),
            pipeline: PipelineSection::default(),
            spool: SpoolSettings::default(),
            upstreams: Vec::new(),
            dead_letter: DeadLetterSection::default(),
            admin: AdminSettings::default(),
        }
    }
}

/// One `[[forwarder]]` table: the pipeline's keys (`name`, `kind`, `filters`, `queue`,
/// `batch`, `retry`, `checkpoint`) and everything else, which belongs to the kind.
#[derive(Debug, Clone, PartialEq)]
pub struct ForwarderSpec {
    pub name: String,
    pub kind: String,
    /// Route filters in the Subscribe language; empty means every event.
    pub filters: Vec<String>,
    pub queue: QueueSettings,
    pub batch: BatchSettings,
    pub retry: RetrySettings,
    pub checkpoint: CheckpointSettings,
    pub options: Options,
}

impl ForwarderSpec {
    /// The forwarders `serve` runs with no `[[forwarder]]` in the config.
    pub fn embedded_default() -> Vec<Self> {
        let mut file = Options::new();
        file.insert("path".into(), "events.jsonl".into());
        let mut sqlite = Options::new();
        sqlite.insert("path".into(), "audit.db".into());
        vec![
            Self::new("log", "file", file),
            Self::new("audit", "sqlite", sqlite),
        ]
    }

    pub fn new(name: &str, kind: &str, options: Options) -> Self {
        Self {
            name: name.into(),
            kind: kind.into(),
            filters: Vec::new(),
            queue: QueueSettings::default(),
            batch: BatchSettings::default(),
            retry: RetrySettings::default(),
            checkpoint: CheckpointSettings::default(),
            options,
        }
    }

    /// The parsed route filter.
    pub fn filter(&self) -> Result<Filter, crate::filter::ParseError> {
        Filter::parse_all(&self.filters)
    }

    /// Pipeline-level checks; the kind's own options are checked by [`Config::check_kinds`].
    fn validate(&self) -> Result<(), String> {
        if self.name.is_empty()
            || !self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(format!(
                "`name` {:?} must be non-empty letters, digits, '-' or '_' (it labels metrics and logs)",
                self.name
            ));
        }
        self.filter().map_err(|e| format!("`filters`: {e}"))?;
        self.queue.validate()?;
        self.batch.validate()?;
        self.retry.validate()?;
        self.checkpoint.validate()?;
        Ok(())
    }
}

impl<'de> Deserialize<'de> for ForwarderSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let mut table = Options::deserialize(d)?;
        fn take<T: serde::de::DeserializeOwned, E: Error>(
            table: &mut Options,
            key: &str,
        ) -> Result<Option<T>, E> {
            table
                .remove(key)
                .map(|value| {
                    value.try_into().map_err(|e: toml::de::Error| {
                        E::custom(format!("`{key}`: {}", e.message()))
                    })
                })
                .transpose()
        }
        let name: String = take(&mut table, "name")?
            .ok_or_else(|| D::Error::custom("a [[forwarder]] needs a `name`"))?;
        let kind: String = take(&mut table, "kind")?.ok_or_else(|| {
            D::Error::custom(format!(
                "forwarder {name:?} needs a `kind` (file, sqlite or kafka)"
            ))
        })?;
        let in_forwarder = |e: D::Error| D::Error::custom(format!("forwarder {name:?}: {e}"));
        Ok(Self {
            filters: take(&mut table, "filters")
                .map_err(in_forwarder)?
                .unwrap_or_default(),
            queue: take(&mut table, "queue")
                .map_err(in_forwarder)?
                .unwrap_or_default(),
            batch: take(&mut table, "batch")
                .map_err(in_forwarder)?
                .unwrap_or_default(),
            retry: take(&mut table, "retry")
                .map_err(in_forwarder)?
                .unwrap_or_default(),
            checkpoint: take(&mut table, "checkpoint")
                .map_err(in_forwarder)?
                .unwrap_or_default(),
            options: table,
            name,
            kind,
        })
    }
}

impl Serialize for ForwarderSpec {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("name", &self.name)?;
        map.serialize_entry("kind", &self.kind)?;
        map.serialize_entry("filters", &self.filters)?;
        for (key, value) in &self.options {
            map.serialize_entry(key, value)?;
        }
        map.serialize_entry("queue", &self.queue)?;
        map.serialize_entry("batch", &self.batch)?;
        map.serialize_entry("retry", &self.retry)?;
        map.serialize_entry("checkpoint", &self.checkpoint)?;
        map.end()
    }
}

/// `[exchange]`: the containerd-compatible gRPC endpoint.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExchangeSection {
    /// Unix socket path; empty means `<data_dir>/eventgate.sock`.
    pub socket: Option<PathBuf>,
    /// File mode of the socket, as an octal string such as "0660".
    pub socket_mode: String,
    /// Group (name or gid) the socket file is given to; unset keeps the process's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub socket_group: Option<String>,
    /// Optional TCP address, e.g. "127.0.0.1:7338"; beyond loopback it needs `tls`
    /// or `insecure`.
    pub listen: Option<SocketAddr>,
    /// Serve plaintext on a non-loopback `listen` address anyway.
    pub insecure: bool,
    /// `[exchange.tls]`: TLS (and optionally client certificates) on `listen`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsSettings>,
    /// `[exchange.limits]`: what one client may ask of the exchange.
    pub limits: LimitSettings,
    /// Events a subscriber may fall behind before it is cut off.
    pub subscriber_queue: usize,
    /// How long shutdown waits for in-flight calls before giving up on them.
    #[serde(with = "duration_text")]
    pub shutdown_timeout: Duration,
}

impl Default for ExchangeSection {
    fn default() -> Self {
        Self {
            socket: None,
            socket_mode: "0660".into(),
            socket_group: None,
            listen: None,
            insecure: false,
            tls: None,
            limits: LimitSettings::default(),
            subscriber_queue: ExchangeConfig::default().subscriber_queue,
            shutdown_timeout: Duration::from_secs(10),
        }
    }
}

impl Config {
    /// Reads and validates a config file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.into(),
            source,
        })?;
        Self::parse(&text, &format!("in {}", path.display()))
    }

    /// Parses and validates TOML text; `origin` says where it came from in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Self, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|error| ConfigError::Parse {
            origin: origin.to_owned(),
            detail: describe_toml_error(text, &error),
        })?;
        config.validate()?;
        Ok(config)
    }

    /// Checks what serde cannot: ranges and cross-field rules. Called again after
    /// command-line overrides.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.data_dir.as_os_str().is_empty() {
            return Err(invalid("data_dir", "must not be empty"));
        }
        self.socket_mode()?;
        if self.exchange.subscriber_queue == 0 {
            return Err(invalid(
                "exchange.subscriber_queue",
                "must be at least 1 (it bounds how far a subscriber may fall behind)",
            ));
        }
        self.spool.validate().map_err(ConfigError::Spool)?;
        let mut names = std::collections::HashSet::new();
        for spec in &self.forwarders {
            spec.validate().map_err(|problem| ConfigError::Forwarder {
                name: spec.name.clone(),
                problem,
            })?;
            if !names.insert(spec.name.as_str()) {
                return Err(ConfigError::Forwarder {
                    name: spec.name.clone(),
                    problem: "two forwarders have this name; names must be unique".into(),
                });
            }
        }
        let mut names = std::collections::HashSet::new();
        for spec in &self.upstreams {
            let name = spec.effective_name();
            spec.validate().map_err(|problem| ConfigError::Upstream {
                name: name.clone(),
                problem,
            })?;
            if !names.insert(name.clone()) {
                return Err(ConfigError::Upstream {
                    name,
                    problem: "two upstreams have this name; give each a unique `name` (with --upstream: NAME=ADDRESS)".into(),
                });
            }
        }
        if self.dead_letter.path.as_os_str().is_empty() {
            return Err(invalid("dead_letter.path", "must not be empty"));
        }
        if self.dead_letter.poll_interval.is_zero() {
            return Err(invalid(
                "dead_letter.poll_interval",
                "must be more than 0s (it is how often workers look for requested redeliveries)",
            ));
        }
        self.validate_tcp()?;
        if self
            .exchange
            .socket_group
            .as_deref()
            .is_some_and(|g| g.trim().is_empty())
        {
            return Err(invalid(
                "exchange.socket_group",
                "must be a group name or a numeric gid (leave it out to keep the process's group)",
            ));
        }
        self.exchange
            .limits
            .validate()
            .map_err(|(key, problem)| invalid(key, problem))?;
        self.admin
            .validate()
            .map_err(|(key, problem)| invalid(key, problem))?;
        Ok(())
    }

    /// The TCP listener's protection: TLS, or plaintext on loopback, or plaintext
    /// beyond it only with an explicit `insecure`; beyond loopback, TLS requires
    /// client certificates unless `allow_anonymous_clients` says otherwise.
    fn validate_tcp(&self) -> Result<(), ConfigError> {
        let exchange = &self.exchange;
        match (exchange.listen, &exchange.tls) {
            (None, Some(_)) => Err(invalid(
                "exchange.tls",
                "is set but `exchange.listen` is not: TLS applies to the TCP listener (the unix socket is protected by its mode and group)",
            )),
            (Some(_), Some(_)) if exchange.insecure => Err(invalid(
                "exchange.insecure",
                "contradicts [exchange.tls]: with TLS the listener is not insecure; remove one",
            )),
            (Some(_), Some(tls)) if tls.client_ca.is_some() && tls.allow_anonymous_clients => {
                Err(invalid(
                    "exchange.tls.allow_anonymous_clients",
                    "contradicts `exchange.tls.client_ca`: with client certificates required no client is anonymous; remove one",
                ))
            }
            (Some(addr), Some(tls))
                if !addr.ip().is_loopback()
                    && tls.client_ca.is_none()
                    && !tls.allow_anonymous_clients =>
            {
                Err(invalid(
                    "exchange.tls.client_ca",
                    format!(
                        "is not set, and {addr} is not a loopback address: without client certificates anyone who can reach it can publish (forge audit events) and subscribe; set `exchange.tls.client_ca` (serve --tls-client-ca) to require them, use 127.0.0.1 or [::1], or set `exchange.tls.allow_anonymous_clients = true` (serve --tls-allow-anonymous) to serve anonymous clients anyway"
                    ),
                ))
            }
            (Some(addr), None) if !addr.ip().is_loopback() && !exchange.insecure => Err(invalid(
                "exchange.listen",
                format!(
                    "{addr} is not a loopback address: configure [exchange.tls] (cert, key, and client_ca for client certificates), use 127.0.0.1 or [::1], or set `exchange.insecure = true` (serve --insecure) to serve plaintext to the network anyway"
                ),
            )),
            _ => Ok(()),
        }
    }

    /// Checks each forwarder's kind-specific options against the registry of kinds.
    pub fn check_kinds(&self, kinds: &Kinds) -> Result<(), ConfigError> {
        for spec in &self.forwarders {
            kinds
                .get(&spec.kind)
                .and_then(|kind| kind.check(&spec.options))
                .map_err(|e| ConfigError::Forwarder {
                    name: spec.name.clone(),
                    problem: e.to_string(),
                })?;
        }
        Ok(())
    }

    /// Where the spool keeps its segments and cursors.
    pub fn spool_dir(&self) -> PathBuf {
        self.data_dir.join("spool")
    }

    /// The dead-letter store's file: `dead_letter.path`, relative to `data_dir`.
    pub fn dead_letter_path(&self) -> PathBuf {
        self.data_dir.join(&self.dead_letter.path)
    }

    /// The unix socket path, defaulting to `<data_dir>/eventgate.sock`.
    pub fn socket_path(&self) -> PathBuf {
        match &self.exchange.socket {
            Some(path) if !path.as_os_str().is_empty() => path.clone(),
            _ => self.data_dir.join("eventgate.sock"),
        }
    }

    pub fn socket_mode(&self) -> Result<u32, ConfigError> {
        let text = self.exchange.socket_mode.trim_start_matches("0o");
        u32::from_str_radix(text, 8)
            .ok()
            .filter(|mode| *mode <= 0o777)
            .ok_or_else(|| {
                invalid(
                    "exchange.socket_mode",
                    format!(
                        "{:?} is not an octal file mode such as \"0660\"",
                        self.exchange.socket_mode
                    ),
                )
            })
    }

    pub fn exchange_config(&self) -> ExchangeConfig {
        ExchangeConfig {
            subscriber_queue: self.exchange.subscriber_queue,
            limits: self.exchange.limits.clone(),
        }
    }

    /// The effective configuration as TOML, for `check-config`. Forwarder options
    /// that hold secrets (passwords, private keys) are shown as "***".
    pub fn to_toml(&self) -> String {
        let mut shown = self.clone();
        for spec in &mut shown.forwarders {
            crate::forward::kafka::redact(&mut spec.options);
        }
        toml::to_string_pretty(&shown).unwrap_or_else(|e| format!("# cannot render: {e}\n"))
    }
}

fn invalid(key: &'static str, problem: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key,
        problem: problem.into(),
    }
}

/// Where a TOML error is and what it says, without quoting a secret: the line
/// (with the values of secret keys masked), its key (`[table]` headers included),
/// and the parser's message with any value assigned to a secret key anywhere in the
/// file masked too (a type error quotes the value it did not expect).
pub fn describe_toml_error(text: &str, error: &toml::de::Error) -> String {
    let message = error.message().trim_end();
    let detail = match error.span() {
        Some(span) => {
            let start = span.start.min(text.len());
            let before = text.get(..start).unwrap_or_default();
            let number = before.matches('\n').count() + 1;
            let line_start = before.rfind('\n').map_or(0, |at| at + 1);
            let column = before[line_start..].chars().count() + 1;
            let line = text[line_start..].lines().next().unwrap_or_default();
            let key = match key_at(text, line_start, line) {
                Some(key) => format!(" (`{key}`)"),
                None => String::new(),
            };
            format!(
                "line {number}, column {column}{key}: {message}\n  {number} | {}",
                crate::redact::by_key(line)
            )
        }
        None => message.to_owned(),
    };
    crate::redact::values(&detail, &crate::redact::assigned_secrets(text))
}

/// The dotted key a line assigns, under the last `[table]` or `[[array]]` header
/// above it; `None` when the line assigns nothing.
fn key_at(text: &str, line_start: usize, line: &str) -> Option<String> {
    let bare = |key: &str| key.trim().trim_matches(['"', '\'']).to_owned();
    let (key, _) = line.split_once('=')?;
    let key = bare(key);
    if key.is_empty() || key.starts_with('[') {
        return None;
    }
    let table = text[..line_start].lines().rev().find_map(|l| {
        let l = l.trim();
        let header = l.strip_prefix("[[").and_then(|h| h.split_once("]]"));
        let header = header.or_else(|| l.strip_prefix('[').and_then(|h| h.split_once(']')));
        header.map(|(name, _)| bare(name))
    });
    Some(match table {
        Some(table) if !table.is_empty() => format!("{table}.{key}"),
        _ => key,
    })
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
