//! `eventgate serve`: run the gateway until SIGINT or SIGTERM; SIGHUP reloads the
//! configuration.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use std::sync::Arc;

use clap::Args;
use tokio::signal::unix::{Signal, SignalKind, signal};

use super::CliError;
use crate::config::{Config, ConfigError};
use crate::gateway::Gateway;
use crate::reload::Reloader;
use crate::upstream::{ManagerSetting, UpstreamSpec};

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// TOML configuration file (see deploy/eventgate.example.toml); without it the
    /// embedded defaults are used.
    #[arg(long, short = 'c', env = "EVENTGATE_CONFIG")]
    pub config: Option<PathBuf>,
    /// The node this gateway's events are recorded as captured on; overrides `node`
    /// (default: the host name).
    #[arg(long, value_name = "NAME")]
    pub node: Option<String>,
    /// Data directory (socket, stores); overrides `data_dir`.
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Unix socket to serve on; overrides `exchange.socket` (default <data_dir>/eventgate.sock).
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Also serve on this TCP address, e.g. 127.0.0.1:7338; overrides `exchange.listen`.
    /// A non-loopback address needs TLS (--tls-cert/--tls-key or [exchange.tls]) or
    /// --insecure.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Serve plaintext on a non-loopback --listen address (`exchange.insecure`):
    /// anyone who can reach it can publish and subscribe.
    #[arg(long)]
    pub insecure: bool,
    /// TLS certificate (PEM chain) for --listen; overrides `exchange.tls.cert`.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// Its private key (PEM); overrides `exchange.tls.key`.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Require client certificates signed by this PEM CA (mutual TLS); overrides
    /// `exchange.tls.client_ca`.
    #[arg(long, value_name = "FILE")]
    pub tls_client_ca: Option<PathBuf>,
    /// Serve TLS without client certificates on a non-loopback --listen address
    /// (`exchange.tls.allow_anonymous_clients`): anyone who can reach it can publish
    /// and subscribe.
    #[arg(long, conflicts_with = "tls_client_ca")]
    pub tls_allow_anonymous: bool,
    /// Events a subscriber may fall behind before it is cut off; overrides
    /// `exchange.subscriber_queue`.
    #[arg(long, value_name = "N")]
    pub subscriber_queue: Option<usize>,
    /// Subscribe to this containerd socket (or eventgate address) and take in every
    /// event it publishes; repeatable. `NAME=ADDRESS` names it (default: the socket's
    /// file name). Added to the config's `[[upstream]]` tables.
    #[arg(long, value_name = "[NAME=]ADDRESS")]
    pub upstream: Vec<String>,
    /// Where every upstream's reconcile asks the Kubernetes CRI for what containerd
    /// deletes: "auto" (the upstream's own socket, when it serves the CRI), "off", or
    /// a CRI socket. Overrides each `[[upstream]]`'s `cri`.
    #[arg(long, value_name = "auto|off|ADDRESS", value_parser = ManagerSetting::parse)]
    pub cri: Option<ManagerSetting>,
    /// Where every upstream asks dockerd for Docker's names, images and labels and for
    /// what it deletes from containerd: "auto" (/var/run/docker.sock when present and
    /// the upstream has dockerd's namespace), "off", or the Engine API socket.
    /// Overrides each `[[upstream]]`'s `docker`.
    #[arg(long, value_name = "auto|off|PATH", value_parser = ManagerSetting::parse)]
    pub docker: Option<ManagerSetting>,
    /// Serve /metrics, /healthz, /readyz and /status on this address (loopback unless
    /// `admin.allow_remote`); "" turns it off. Overrides `admin.listen`
    /// (default 127.0.0.1:9464).
    #[arg(long, value_name = "ADDR", env = "EVENTGATE_ADMIN")]
    pub admin: Option<String>,
    /// Free space kept on the spool's file system ("256MiB", "5%"): below it,
    /// Publish and Forward are refused so that accepted events can still drain into
    /// sinks on the same disk. "0" turns the reserve off. Overrides `spool.min_free`.
    #[arg(long, value_name = "SIZE", value_parser = crate::spool::MinFree::parse)]
    pub spool_min_free: Option<crate::spool::MinFree>,
    /// Sign checkpoints of the audit store's chain head with this signer key (mode
    /// 0600; `eventgate audit keygen` writes one). Overrides `signing.key`.
    #[arg(long, value_name = "FILE")]
    pub signing_key: Option<PathBuf>,
}

impl ServeArgs {
    /// Defaults, then the file, then these flags; validated again at the end.
    pub fn config(&self) -> Result<Config, CliError> {
        Ok(self.load()?)
    }

    /// The same, as a reload reads it again.
    fn load(&self) -> Result<Config, ConfigError> {
        let mut config = match &self.config {
            Some(path) => Config::load(path)?,
            None => Config::default(),
        };
        if let Some(node) = &self.node {
            config.node = node.clone();
        }
        if let Some(dir) = &self.data_dir {
            config.data_dir = dir.clone();
        }
        if let Some(socket) = &self.socket {
            config.exchange.socket = Some(socket.clone());
        }
        if let Some(listen) = self.listen {
            config.exchange.listen = Some(listen);
        }
        if self.insecure {
            config.exchange.insecure = true;
        }
        if let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) {
            let configured = config.exchange.tls.take();
            config.exchange.tls = Some(crate::tls::TlsSettings {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: configured.as_ref().and_then(|t| t.client_ca.clone()),
                allow_anonymous_clients: configured.is_some_and(|t| t.allow_anonymous_clients),
            });
        }
        if let Some(ca) = &self.tls_client_ca {
            match &mut config.exchange.tls {
                Some(tls) => tls.client_ca = Some(ca.clone()),
                None => {
                    return Err(ConfigError::Invalid {
                        key: "exchange.tls.client_ca",
                        problem: "(--tls-client-ca) needs a server certificate: give \
                                  --tls-cert and --tls-key (or [exchange.tls] in the config)"
                            .into(),
                    });
                }
            }
        }
        if self.tls_allow_anonymous {
            match &mut config.exchange.tls {
                Some(tls) => tls.allow_anonymous_clients = true,
                None => {
                    return Err(ConfigError::Invalid {
                        key: "exchange.tls.allow_anonymous_clients",
                        problem: "(--tls-allow-anonymous) needs a server certificate: give \
                                  --tls-cert and --tls-key (or [exchange.tls] in the config)"
                            .into(),
                    });
                }
            }
        }
        if let Some(admin) = &self.admin {
            config.admin.listen = admin.clone();
        }
        if let Some(min_free) = self.spool_min_free {
            config.spool.min_free = min_free;
        }
        if let Some(key) = &self.signing_key {
            config.signing.key = Some(key.clone());
        }
        if let Some(queue) = self.subscriber_queue {
            config.exchange.subscriber_queue = queue;
        }
        config.upstreams.extend(
            self.upstream
                .iter()
                .map(|flag| UpstreamSpec::from_flag(flag)),
        );
        for spec in &mut config.upstreams {
            if let Some(cri) = &self.cri {
                spec.cri = cri.clone();
            }
            if let Some(docker) = &self.docker {
                spec.docker = docker.clone();
            }
        }
        config.validate()?;
        Ok(config)
    }
}

pub(super) async fn run(args: ServeArgs) -> Result<ExitCode, CliError> {
    let config = args.config()?;
    // Before anything else: the default action of SIGHUP, SIGTERM and SIGINT would end
    // the process, and a stop asked for while starting (socket already bound) should
    // still drain and clean up.
    let hangup = signal(SignalKind::hangup()).map_err(|source| CliError::Io {
        context: "cannot install the SIGHUP handler".into(),
        source,
    })?;
    let stop = shutdown_signal();
    let gateway = Gateway::start(&config).await?;
    let origin = match &args.config {
        Some(path) => path.display().to_string(),
        None => "the built-in defaults (no --config)".into(),
    };
    let source = args.clone();
    gateway
        .reloader()
        .set_source(origin, Arc::new(move || source.load()));
    let reloads = tokio::spawn(reload_on_hangup(hangup, Arc::clone(gateway.reloader())));
    let result = gateway.run_until(stop).await;
    reloads.abort();
    result?;
    Ok(ExitCode::SUCCESS)
}

/// Each SIGHUP reloads the configuration; the outcome goes to the log (`eventgate
/// reload` asks the admin endpoint instead, which answers with it).
async fn reload_on_hangup(mut hangup: Signal, reloader: Arc<Reloader>) {
    while hangup.recv().await.is_some() {
        tracing::info!("SIGHUP received: reloading the configuration");
        reloader.reload().await;
    }
}

/// Installs the SIGINT and SIGTERM handlers now and returns a future that resolves on
/// either. If a handler cannot be installed the gateway still runs; it just cannot be
/// stopped gracefully by that signal.
pub(crate) fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    let install = |kind: SignalKind, name: &'static str| match signal(kind) {
        Ok(signal) => Some(signal),
        Err(error) => {
            tracing::error!(%error, "cannot install the {name} handler");
            None
        }
    };
    let mut term = install(SignalKind::terminate(), "SIGTERM");
    let mut int = install(SignalKind::interrupt(), "SIGINT");
    async move {
        tokio::select! {
            () = received(int.as_mut()) => tracing::info!("SIGINT received"),
            () = received(term.as_mut()) => tracing::info!("SIGTERM received"),
        }
    }
}

/// Resolves when `signal` arrives; never without a handler.
async fn received(signal: Option<&mut Signal>) {
    match signal {
        Some(signal) => {
            signal.recv().await;
        }
        None => std::future::pending().await,
    }
}
