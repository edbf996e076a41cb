//! Configuration: built-in defaults, then the TOML file, then command-line flags, then
//! validation. Every key is documented in `deploy/eventgate.example.toml`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use thiserror::Error;

use crate::exchange::ExchangeConfig;

#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("cannot read config file {path:?}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid config {origin}: {source}")]
    Parse {
        origin: String,
        #[source]
        source: toml::de::Error,
    },
    #[error("invalid config: `{key}` {problem}")]
    Invalid { key: &'static str, problem: String },
}

/// The whole configuration file.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Where eventgate keeps its socket, audit store and logs.
    pub data_dir: PathBuf,
    pub exchange: ExchangeSection,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            data_dir: PathBuf::from("./data"),
            exchange: ExchangeSection::default(),
        }
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
    /// Optional loopback TCP address, e.g. "127.0.0.1:7338".
    pub listen: Option<SocketAddr>,
    /// Events a subscriber may fall behind before it is cut off.
    pub subscriber_queue: usize,
    /// How long shutdown waits for in-flight calls before giving up on them.
    #[serde(
        serialize_with = "serialize_duration",
        deserialize_with = "deserialize_duration"
    )]
    pub shutdown_timeout: Duration,
}

impl Default for ExchangeSection {
    fn default() -> Self {
        Self {
            socket: None,
            socket_mode: "0660".into(),
            listen: None,
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
        let config: Config = toml::from_str(text).map_err(|source| ConfigError::Parse {
            origin: origin.to_owned(),
            source,
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
        if let Some(addr) = self.exchange.listen
            && !addr.ip().is_loopback()
        {
            return Err(invalid(
                "exchange.listen",
                format!(
                    "{addr} is not a loopback address; the exchange has no TLS, so only 127.0.0.1 or [::1] are allowed"
                ),
            ));
        }
        Ok(())
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
        }
    }

    /// The effective configuration as TOML, for `check-config`.
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_else(|e| format!("# cannot render: {e}\n"))
    }
}

fn invalid(key: &'static str, problem: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key,
        problem: problem.into(),
    }
}

/// Parses "250ms", "10s", "5m", "1h 30m" (humantime syntax).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text)
        .map_err(|e| format!("{text:?} is not a duration like \"500ms\", \"10s\" or \"5m\": {e}"))
}

fn deserialize_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(d)?;
    parse_duration(&text).map_err(serde::de::Error::custom)
}

fn serialize_duration<S: Serializer>(value: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&humantime::format_duration(*value).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_socket_lives_in_data_dir() {
        let config = Config::parse("", "test").unwrap();
        assert_eq!(config, Config::default());
        assert_eq!(config.socket_path(), PathBuf::from("./data/eventgate.sock"));
        assert_eq!(config.socket_mode().unwrap(), 0o660);
        // What check-config prints parses back to the same thing.
        assert_eq!(
            Config::parse(&config.to_toml(), "round trip").unwrap(),
            config
        );
    }

    #[test]
    fn keys_are_read() {
        let config = Config::parse(
            r#"
            data_dir = "/var/lib/eventgate"
            [exchange]
            socket = "/run/eventgate.sock"
            socket_mode = "0600"
            listen = "127.0.0.1:7338"
            subscriber_queue = 16
            shutdown_timeout = "250ms"
            "#,
            "test",
        )
        .unwrap();
        assert_eq!(config.socket_path(), PathBuf::from("/run/eventgate.sock"));
        assert_eq!(config.socket_mode().unwrap(), 0o600);
        assert_eq!(config.exchange.subscriber_queue, 16);
        assert_eq!(config.exchange.shutdown_timeout, Duration::from_millis(250));
    }

    #[test]
    fn bad_keys_are_named() {
        let cases = [
            ("[exchange]\nsubscriber_queu = 3", "subscriber_queu"),
            (
                "[exchange]\nsubscriber_queue = 0",
                "exchange.subscriber_queue",
            ),
            ("[exchange]\nsubscriber_queue = \"x\"", "subscriber_queue"),
            ("[exchange]\nsocket_mode = \"rw\"", "exchange.socket_mode"),
            ("[exchange]\nlisten = \"0.0.0.0:1\"", "exchange.listen"),
            ("[exchange]\nlisten = \"nonsense\"", "listen"),
            (
                "[exchange]\nshutdown_timeout = \"soon\"",
                "shutdown_timeout",
            ),
            ("data_dir = \"\"", "data_dir"),
            ("[exchnage]", "exchnage"),
        ];
        for (text, key) in cases {
            let message = Config::parse(text, "test").unwrap_err().to_string();
            assert!(message.contains(key), "{text:?} -> {message}");
        }
    }
}
