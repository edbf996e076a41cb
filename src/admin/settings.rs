//! `[admin]`: where the admin HTTP endpoint listens, and the readiness rule that
//! needs a setting.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The default address: loopback, Prometheus's customary exporter port range.
pub(crate) const DEFAULT_LISTEN: &str = "127.0.0.1:9464";

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdminSettings {
    /// `HOST:PORT` to serve /metrics, /healthz, /readyz and /status on; `""` turns
    /// the endpoint (and metrics recording) off.
    pub listen: String,
    /// Serve on a non-loopback address. Off by default: /metrics and /status name
    /// forwarders, upstream addresses and error texts, and there is no TLS or auth.
    pub allow_remote: bool,
    /// A forwarder that has been delivering from the spool (behind its live queue)
    /// for longer than this is reported not ready.
    #[serde(with = "crate::units::duration_text")]
    pub max_spill: Duration,
    /// A forwarder whose current batch has been failing (retrying) for longer than
    /// this is reported not ready; shorter blips only show in `?verbose`. `0s`: from
    /// the first failed attempt.
    #[serde(with = "crate::units::duration_text")]
    pub max_failing: Duration,
    /// A file holding the token `POST /reload` must carry (`Authorization: Bearer
    /// <token>`). Unset: `POST /reload` is refused, and only SIGHUP reloads.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reload_token_file: Option<PathBuf>,
    /// Serve the history page and its read-only API under `/ui`.
    pub ui: bool,
    /// The `sqlite` or `postgres` forwarder whose store `/ui` reads; unset: the only
    /// `sqlite` one, or with several the first that takes every event.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ui_store: Option<String>,
}

impl Default for AdminSettings {
    fn default() -> Self {
        Self {
            listen: DEFAULT_LISTEN.into(),
            allow_remote: false,
            max_spill: Duration::from_secs(60),
            max_failing: Duration::from_secs(10),
            reload_token_file: None,
            ui: true,
            ui_store: None,
        }
    }
}

impl AdminSettings {
    /// The address to listen on, `None` when turned off. Errors name the key.
    pub fn addr(&self) -> Result<Option<SocketAddr>, (&'static str, String)> {
        let text = self.listen.trim();
        if text.is_empty() {
            return Ok(None);
        }
        let addr: SocketAddr = text.parse().map_err(|_| {
            (
                "admin.listen",
                format!(
                    "{text:?} is not an address like \"127.0.0.1:9464\" or \"[::1]:9464\" (\"\" turns the admin endpoint off)"
                ),
            )
        })?;
        if !addr.ip().is_loopback() && !self.allow_remote {
            return Err((
                "admin.listen",
                format!(
                    "{addr} is not a loopback address; /metrics and /status reveal forwarders, upstream addresses and errors, and the endpoint has no TLS or authentication. Set `admin.allow_remote = true` to serve it there anyway"
                ),
            ));
        }
        Ok(Some(addr))
    }

    /// The token `POST /reload` must carry, read from `reload_token_file`; `None`
    /// when that is unset. Errors name the key and the file, never its contents.
    pub fn reload_token(&self) -> Result<Option<ReloadToken>, (&'static str, String)> {
        let Some(path) = &self.reload_token_file else {
            return Ok(None);
        };
        ReloadToken::read(path)
            .map(Some)
            .map_err(|problem| ("admin.reload_token_file", problem))
    }

    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        self.addr()?;
        self.reload_token()?;
        if self.max_spill.is_zero() {
            return Err((
                "admin.max_spill",
                "must be more than 0s (how long a forwarder may deliver from the spool before it counts as not ready)".into(),
            ));
        }
        Ok(())
    }
}

/// The audit store `/ui` reads: the database of the `postgres` forwarder
/// `admin.ui_store` names, or the file of the `sqlite` forwarder it names, else of the
/// only `sqlite` forwarder, else of the first one with no route filters (it holds
/// every event), else of the first. `None` without any (or with `admin.ui = false`).
/// A file's path is resolved as the forwarder resolves it (relative to `data_dir`).
/// Errors name the key.
pub(crate) fn ui_store(
    admin: &AdminSettings,
    forwarders: &[crate::pipeline::ForwarderSpec],
    data_dir: &std::path::Path,
) -> Result<Option<crate::query::StoreSpec>, (&'static str, String)> {
    let named_postgres = admin.ui_store.as_ref().and_then(|name| {
        forwarders
            .iter()
            .find(|f| &f.name == name && f.kind == "postgres")
    });
    if let Some(spec) = named_postgres {
        let target = crate::forward::postgres::PostgresOptions::parse(&spec.options)
            .map_err(|e| e.to_string())
            .and_then(|options| options.connect.target().map_err(|e| e.to_string()))
            .map_err(|problem| {
                (
                    "admin.ui_store",
                    format!("the postgres forwarder {:?}: {problem}", spec.name),
                )
            })?;
        return Ok(admin
            .ui
            .then(|| crate::query::StoreSpec::Postgres(Box::new(target))));
    }
    let stores: Vec<_> = forwarders.iter().filter(|f| f.kind == "sqlite").collect();
    let chosen = match &admin.ui_store {
        Some(name) => match stores.iter().find(|f| &f.name == name) {
            Some(spec) => Some(*spec),
            None => {
                let names: Vec<String> = stores.iter().map(|f| format!("{:?}", f.name)).collect();
                let known = match names.is_empty() {
                    true => "there is no sqlite forwarder".to_owned(),
                    false => format!("the sqlite forwarders are {}", names.join(", ")),
                };
                return Err((
                    "admin.ui_store",
                    format!("{name:?} is not the name of a sqlite or postgres forwarder; {known}"),
                ));
            }
        },
        None => stores
            .iter()
            .find(|f| f.filters.is_empty())
            .or(stores.first())
            .copied(),
    };
    if !admin.ui {
        return Ok(None);
    }
    Ok(chosen.map(|spec| {
        let path = spec
            .options
            .get("path")
            .and_then(|p| p.as_str())
            .map_or_else(|| PathBuf::from("audit.db"), PathBuf::from);
        crate::query::StoreSpec::Sqlite(data_dir.join(path))
    }))
}

/// The shortest token accepted: long enough that it cannot be guessed online.
const MIN_TOKEN_LEN: usize = 16;

/// What `POST /reload` must carry. Its `Debug` does not show it.
#[derive(Clone, PartialEq, Eq)]
pub struct ReloadToken(String);

impl std::fmt::Debug for ReloadToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReloadToken(***)")
    }
}

impl ReloadToken {
    /// The file's contents without surrounding whitespace (a trailing newline).
    pub fn read(path: &std::path::Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let token = text.trim();
        if token.len() < MIN_TOKEN_LEN || token.chars().any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(format!(
                "{} must hold one token of at least {MIN_TOKEN_LEN} characters without spaces \
                 (for example: head -c 32 /dev/urandom | base64 > {})",
                path.display(),
                path.display()
            ));
        }
        Ok(Self(token.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether an `Authorization` header carries this token, compared in constant
    /// time so that the time taken tells nothing about how much of it was right.
    pub fn authorizes(&self, header: Option<&[u8]>) -> bool {
        use subtle::ConstantTimeEq;
        let Some(presented) = header.and_then(|h| h.strip_prefix(b"Bearer ")) else {
            return false;
        };
        presented.ct_eq(self.0.as_bytes()).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(listen: &str, allow_remote: bool) -> AdminSettings {
        AdminSettings {
            listen: listen.into(),
            allow_remote,
            ..AdminSettings::default()
        }
    }

    #[test]
    fn the_reload_token_is_read_checked_and_compared_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "0123456789abcdef-token\n").unwrap();
        let settings = AdminSettings {
            reload_token_file: Some(path.clone()),
            ..AdminSettings::default()
        };
        let token = settings.reload_token().unwrap().unwrap();
        assert!(token.authorizes(Some(b"Bearer 0123456789abcdef-token")));
        for wrong in [
            &b"Bearer 0123456789abcdef-toke"[..],
            b"Bearer 0123456789abcdef-tokenX",
            b"0123456789abcdef-token",
            b"Basic 0123456789abcdef-token",
        ] {
            assert!(!token.authorizes(Some(wrong)));
        }
        assert!(!token.authorizes(None));
        assert_eq!(format!("{token:?}"), "ReloadToken(***)");

        std::fs::write(&path, "short\n").unwrap();
        let (key, problem) = settings.reload_token().unwrap_err();
        assert_eq!(key, "admin.reload_token_file");
        assert!(problem.contains("at least 16 characters") && !problem.contains("short\n"));
        let missing = AdminSettings {
            reload_token_file: Some(dir.path().join("missing")),
            ..AdminSettings::default()
        };
        assert!(missing.validate().unwrap_err().1.contains("cannot read"));
    }

    #[test]
    fn loopback_by_default_empty_turns_it_off() {
        assert_eq!(
            AdminSettings::default().addr().unwrap(),
            Some(DEFAULT_LISTEN.parse().unwrap())
        );
        assert_eq!(with("", false).addr().unwrap(), None);
        assert!(with("[::1]:0", false).addr().unwrap().is_some());
    }

    #[test]
    fn remote_addresses_need_allow_remote() {
        let (key, problem) = with("0.0.0.0:9464", false).addr().unwrap_err();
        assert_eq!(key, "admin.listen");
        assert!(problem.contains("allow_remote"), "{problem}");
        assert!(with("0.0.0.0:9464", true).addr().unwrap().is_some());
    }

    #[test]
    fn a_bad_address_is_named() {
        let (key, problem) = with("localhost", false).addr().unwrap_err();
        assert_eq!(key, "admin.listen");
        assert!(problem.contains("\"localhost\""), "{problem}");
    }
}
