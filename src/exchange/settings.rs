//! `[exchange]`: the containerd-compatible gRPC endpoint: where it listens, how it is
//! protected, how far a subscriber may fall behind, and what one client may ask
//! (`[exchange.limits]`). The exchange and the listeners read the same table.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::LimitSettings;
use crate::tls::TlsSettings;

/// `[exchange]`: the containerd-compatible gRPC endpoint.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExchangeSettings {
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
    #[serde(with = "crate::units::duration_text")]
    pub shutdown_timeout: Duration,
}

impl Default for ExchangeSettings {
    fn default() -> Self {
        Self {
            socket: None,
            socket_mode: "0660".into(),
            socket_group: None,
            listen: None,
            insecure: false,
            tls: None,
            limits: LimitSettings::default(),
            subscriber_queue: 4096,
            shutdown_timeout: Duration::from_secs(10),
        }
    }
}

impl ExchangeSettings {
    /// Ranges and cross-key rules; errors name the key.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        self.socket_mode()?;
        if self.subscriber_queue == 0 {
            return Err(invalid(
                "exchange.subscriber_queue",
                "must be at least 1 (it bounds how far a subscriber may fall behind)",
            ));
        }
        self.validate_tcp()?;
        if self
            .socket_group
            .as_deref()
            .is_some_and(|g| g.trim().is_empty())
        {
            return Err(invalid(
                "exchange.socket_group",
                "must be a group name or a numeric gid (leave it out to keep the process's group)",
            ));
        }
        self.limits.validate()
    }

    /// The socket's file mode, from its octal text.
    pub fn socket_mode(&self) -> Result<u32, (&'static str, String)> {
        let text = self.socket_mode.trim_start_matches("0o");
        u32::from_str_radix(text, 8)
            .ok()
            .filter(|mode| *mode <= 0o777)
            .ok_or_else(|| {
                invalid(
                    "exchange.socket_mode",
                    format!(
                        "{:?} is not an octal file mode such as \"0660\"",
                        self.socket_mode
                    ),
                )
            })
    }

    /// The TCP listener's protection: TLS, or plaintext on loopback, or plaintext
    /// beyond it only with an explicit `insecure`; beyond loopback, TLS requires
    /// client certificates unless `allow_anonymous_clients` says otherwise.
    fn validate_tcp(&self) -> Result<(), (&'static str, String)> {
        let exchange = self;
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
}

fn invalid(key: &'static str, problem: impl Into<String>) -> (&'static str, String) {
    (key, problem.into())
}
