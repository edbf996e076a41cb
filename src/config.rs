//! Configuration: built-in defaults, then the TOML file, then command-line flags, then
//! validation. Every key is documented in `deploy/eventgate.example.toml`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::forward::Kinds;

// Every table's type, where an embedder building a `Config` in code finds it.
pub use crate::admin::settings::AdminSettings;
pub use crate::correlate::CorrelateSettings;
pub use crate::deadletter::DeadLetterSettings;
pub use crate::exchange::{ExchangeSettings, LimitSettings};
pub use crate::note::SigningSettings;
pub use crate::pipeline::ForwarderSpec;
pub use crate::pipeline::settings::{
    BatchSettings, CheckpointSettings, Overflow, PipelineSettings, QueueSettings, RetrySettings,
};
pub use crate::source::SourceSpec;
pub use crate::spool::{Fsync, FullPolicy, MinFree, SpoolSettings};
pub use crate::tls::TlsSettings;
pub use crate::upstream::{ManagerSetting, UpstreamSpec};

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
    /// says where and what, with secret values masked (see `describe_toml_error`).
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
    #[error("invalid config: source {name:?}: {problem}")]
    Source { name: String, problem: String },
    /// `signing.key` names a file that is not a usable signer key; the source says why.
    #[error("invalid config: `signing.key`")]
    SigningKey(#[source] crate::note::KeyFileError),
}

/// The whole configuration file.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// The node every event this gateway captures is recorded as captured on (this
    /// machine's host name by default); see `node.rs` for what a name may hold.
    pub node: String,
    /// Where eventgate keeps its socket, audit store and logs.
    pub data_dir: PathBuf,
    pub exchange: ExchangeSettings,
    /// `[[forwarder]]` tables. Absent means the embedded default (a JSON-lines file
    /// and the SQLite audit store under the data directory); `forwarder = []` means none.
    #[serde(rename = "forwarder")]
    pub forwarders: Vec<ForwarderSpec>,
    pub pipeline: PipelineSettings,
    /// `[spool]`: the durable on-disk log under `<data_dir>/spool`.
    pub spool: SpoolSettings,
    /// `[[upstream]]` tables: Events endpoints to subscribe to (containerd sockets).
    #[serde(rename = "upstream")]
    pub upstreams: Vec<UpstreamSpec>,
    #[serde(rename = "source")]
    pub sources: Vec<SourceSpec>,
    pub dead_letter: DeadLetterSettings,
    /// `[admin]`: the HTTP endpoint for metrics, health and readiness.
    pub admin: AdminSettings,
    /// `[signing]`: the key that signs checkpoints of the audit store's chain head.
    pub signing: SigningSettings,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            node: crate::node::host_name(),
            data_dir: PathBuf::from("./data"),
            exchange: ExchangeSettings::default(),
            forwarders: ForwarderSpec::embedded_default(),
            pipeline: PipelineSettings::default(),
            spool: SpoolSettings::default(),
            upstreams: Vec::new(),
            sources: Vec::new(),
            dead_letter: DeadLetterSettings::default(),
            admin: AdminSettings::default(),
            signing: SigningSettings::default(),
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
        if let Some(problem) = crate::node::problem(&self.node) {
            return Err(invalid("node", problem));
        }
        if self.data_dir.as_os_str().is_empty() {
            return Err(invalid("data_dir", "must not be empty"));
        }
        self.exchange
            .validate()
            .map_err(|(key, problem)| invalid(key, problem))?;
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
        let mut names = std::collections::HashSet::new();
        for spec in &self.sources {
            let invalid = |problem: String| ConfigError::Source {
                name: spec.name.clone(),
                problem,
            };
            spec.validate(&self.node, &self.forwarders)
                .map_err(invalid)?;
            if !names.insert(spec.name.as_str()) {
                return Err(invalid(
                    "two sources have this name; give each a unique `name`".into(),
                ));
            }
        }
        self.dead_letter
            .validate()
            .map_err(|(key, problem)| invalid(key, problem))?;
        self.admin
            .validate()
            .map_err(|(key, problem)| invalid(key, problem))?;
        crate::admin::settings::ui_store(&self.admin, &self.forwarders, &self.data_dir)
            .map_err(|(key, problem)| invalid(key, problem))?;
        self.signing
            .validate()
            .map_err(|(key, problem)| invalid(key, problem))?;
        // Read now, as `serve` will: a missing, readable-by-others or wrong key file
        // stops check-config and serve, not the first checkpoint.
        self.signing.signer().map_err(ConfigError::SigningKey)?;
        Ok(())
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
        self.exchange
            .socket_mode()
            .map_err(|(key, problem)| invalid(key, problem))
    }

    /// The effective configuration as TOML, for `check-config`. Forwarder options
    /// that hold secrets (passwords, private keys) are shown as "***", by each kind's
    /// own rule (the generic one for a kind `kinds` does not know).
    pub fn to_toml(&self, kinds: &Kinds) -> String {
        let mut shown = self.clone();
        for spec in &mut shown.sources {
            crate::redact::table(&mut spec.options);
        }
        for spec in &mut shown.forwarders {
            match kinds.get(&spec.kind) {
                Ok(kind) => kind.redact(&mut spec.options),
                Err(_) => crate::redact::table(&mut spec.options),
            }
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
pub(crate) fn describe_toml_error(text: &str, error: &toml::de::Error) -> String {
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
