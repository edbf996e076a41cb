//! The witness's configuration file (`eventgate witness serve --config FILE`; every
//! key is documented in `deploy/witness.example.toml`):
//!
//! ```toml
//! listen = "127.0.0.1:7380"
//! key = "/etc/eventgate/witness.key"
//! data_dir = "/var/lib/eventgate-witness"
//!
//! [[log]]
//! origin = "web-1/eventgate/5f0c1b8e2d6a4c3f9e7b1a2d3c4e5f60"
//! key = "audit.example.com/web-1+1a2b3c4d+AX..."
//! ```

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use thiserror::Error;

use crate::note::Verifier;

/// The data directory unless told otherwise, relative to the working directory.
pub(crate) const DEFAULT_DATA_DIR: &str = "./witness-data";

/// The most `[[log]]` tables: each costs a metric series or two and a row.
pub(crate) const MAX_LOGS: usize = 10_000;

/// The most keys one log may list (a rotation needs two or three).
pub(crate) const MAX_KEYS_PER_LOG: usize = 16;

#[derive(Debug, Error)]
pub enum WitnessConfigError {
    #[error("cannot read the witness config file {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The TOML parser's message, which names the key and line.
    #[error("invalid witness config {origin}: {detail}")]
    Parse { origin: String, detail: String },
    #[error("invalid witness config {origin}: `{key}` {problem}")]
    Invalid {
        origin: String,
        key: String,
        problem: String,
    },
}

/// The file as written.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub(crate) struct WitnessSettings {
    /// `HOST:PORT` to serve `POST /add-checkpoint` (and `/metrics`, `/healthz`) on.
    #[serde(default = "default_listen")]
    pub(crate) listen: SocketAddr,
    /// The witness's cosigner key file (`eventgate witness keygen`), mode 0600.
    pub(crate) key: PathBuf,
    /// Where `witness.db` is kept.
    #[serde(default = "default_data_dir")]
    pub(crate) data_dir: PathBuf,
    /// `[[log]]` tables: the logs this witness cosigns for.
    #[serde(default, rename = "log")]
    pub(crate) logs: Vec<LogSettings>,
}

/// One `[[log]]` table.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub(crate) struct LogSettings {
    /// The first line of the log's checkpoints.
    pub(crate) origin: String,
    /// The log's verifier key (`NAME+KEY_ID+BASE64`, as `eventgate audit keygen`
    /// printed it).
    #[serde(default)]
    pub(crate) key: Option<String>,
    /// More verifier keys, for a rotation: a checkpoint signed by any one is accepted.
    #[serde(default)]
    pub(crate) keys: Vec<String>,
}

/// Where a witness listens unless told otherwise: loopback (a TLS proxy in front
/// serves it to the logs), on the port Go's litewitness uses, so a witness's address
/// reads the same whichever implementation runs it.
fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 7380))
}

fn default_data_dir() -> PathBuf {
    PathBuf::from(DEFAULT_DATA_DIR)
}

/// A log as the witness uses it: its keys parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Log {
    pub(crate) origin: String,
    pub(crate) keys: Vec<Verifier>,
}

impl WitnessSettings {
    /// Reads and parses `path` (not yet validated: flags may still override it).
    pub(crate) fn load(path: &Path) -> Result<WitnessSettings, WitnessConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| WitnessConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text, &format!("in {}", path.display()))
    }

    /// Parses TOML text; `origin` says where it came from in errors.
    pub(crate) fn parse(text: &str, origin: &str) -> Result<WitnessSettings, WitnessConfigError> {
        toml::from_str(text).map_err(|error| WitnessConfigError::Parse {
            origin: origin.to_owned(),
            detail: crate::config::describe_toml_error(text, &error),
        })
    }

    /// Checks what serde cannot and parses the logs' keys; every error names its
    /// key (`log[2].keys[0]`). `origin` says where the settings came from.
    pub(crate) fn validate(&self, origin: &str) -> Result<Vec<Log>, WitnessConfigError> {
        let invalid = |key: String, problem: String| WitnessConfigError::Invalid {
            origin: origin.to_owned(),
            key,
            problem,
        };
        if self.data_dir.as_os_str().is_empty() {
            return Err(invalid("data_dir".into(), "must not be empty".into()));
        }
        if self.key.as_os_str().is_empty() {
            return Err(invalid(
                "key".into(),
                "must name the witness's key file (`eventgate witness keygen NAME` writes one)"
                    .into(),
            ));
        }
        if self.logs.is_empty() {
            return Err(invalid(
                "log".into(),
                "has no table: a witness cosigns only for the logs it is given, each as \
                 [[log]] with its origin and verifier key"
                    .into(),
            ));
        }
        if self.logs.len() > MAX_LOGS {
            return Err(invalid(
                "log".into(),
                format!(
                    "has {} tables, more than the {MAX_LOGS} a witness serves",
                    self.logs.len()
                ),
            ));
        }
        let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
        let mut logs = Vec::with_capacity(self.logs.len());
        for (i, log) in self.logs.iter().enumerate() {
            let at = |key: &str| format!("log[{i}].{key}");
            if let Some(problem) = origin_problem(&log.origin) {
                return Err(invalid(at("origin"), problem.into()));
            }
            if let Some(first) = seen.insert(&log.origin, i) {
                return Err(invalid(
                    at("origin"),
                    format!(
                        "{:?} is also log[{first}]'s: give each log one table, with all its keys",
                        log.origin
                    ),
                ));
            }
            let mut texts: Vec<(String, &str)> = Vec::new();
            if let Some(key) = &log.key {
                texts.push((at("key"), key));
            }
            for (j, key) in log.keys.iter().enumerate() {
                texts.push((format!("log[{i}].keys[{j}]"), key));
            }
            if texts.is_empty() {
                return Err(invalid(
                    format!("log[{i}]"),
                    format!(
                        "({:?}) has no `key` (or `keys`): the log's verifier key, as `eventgate \
                         audit keygen` printed it",
                        log.origin
                    ),
                ));
            }
            if texts.len() > MAX_KEYS_PER_LOG {
                return Err(invalid(
                    at("keys"),
                    format!(
                        "lists {} keys, more than the {MAX_KEYS_PER_LOG} a log may have",
                        texts.len()
                    ),
                ));
            }
            let mut keys: Vec<Verifier> = Vec::with_capacity(texts.len());
            for (key, text) in texts {
                let verifier =
                    Verifier::from_text(text).map_err(|e| invalid(key.clone(), e.to_string()))?;
                // Two keys of one name and id would make every note they sign
                // ambiguous (`note::open` refuses it).
                if keys
                    .iter()
                    .any(|k| k.name() == verifier.name() && k.key_id() == verifier.key_id())
                {
                    return Err(invalid(
                        key,
                        format!(
                            "is given twice for this log (name {:?}, key id {:08x})",
                            verifier.name(),
                            verifier.key_id()
                        ),
                    ));
                }
                keys.push(verifier);
            }
            logs.push(Log {
                origin: log.origin.clone(),
                keys,
            });
        }
        Ok(logs)
    }

    /// Where the state is kept.
    pub(crate) fn state_path(&self) -> PathBuf {
        self.data_dir.join(super::state::FILE_NAME)
    }
}

/// Why `origin` cannot be a checkpoint's first line, `None` when it can.
fn origin_problem(origin: &str) -> Option<&'static str> {
    if origin.is_empty() {
        Some("is empty: give the log's origin, the first line of its checkpoints")
    } else if origin.chars().any(char::is_control) {
        Some("holds a control character or a newline: it is one line of a checkpoint")
    } else if origin.len() > crate::tlog::tree_head::MAX_TEXT {
        Some("is longer than any checkpoint's text")
    } else {
        None
    }
}

#[cfg(test)]
#[path = "settings_tests.rs"]
mod tests;
