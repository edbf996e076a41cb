//! Wires the gateway together and runs it: exchange, gRPC listeners, and an orderly
//! shutdown. `serve` and the tests start it the same way.
//!
//! `Gateway::start_with` reads as its steps, in the order they must run: each is a
//! function of `wiring.rs` (data directory, admin listener, spool, pipeline,
//! upstreams and sources, signers, serving the admin endpoint) or `listeners.rs`
//! (the gRPC listeners). `Gateway::stop` takes them down in the order
//! docs/architecture.md ("Start and shutdown") gives.

mod listeners;
mod wiring;
pub(crate) use wiring::refuse_newer_state;

use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use thiserror::Error;
use tokio_util::sync::CancellationToken;

use crate::admin::{Admin, AdminError};
use crate::config::{Config, ConfigError};
use crate::deadletter::DeadLetterError;
/// What [`Gateway::exchange`] takes in, through `Exchange::append`.
pub use crate::exchange::Incoming;
use crate::exchange::{Exchange, ExchangeParts};
use crate::forward::Kinds;
use crate::listen::{ListenError, UnixSocket};
use crate::lock::{DataDirLock, LockError};
pub use crate::pipeline::Report;
use crate::pipeline::{Pipeline, PipelineError};
use crate::reload::Reloader;
use crate::spool::{Spool, SpoolError};
use crate::tls::TlsError;
use crate::upstream::Upstreams;
use listeners::{Listeners, Servers};

#[derive(Debug, Error)]
pub enum GatewayError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Listen(#[from] ListenError),
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error(transparent)]
    Admin(#[from] AdminError),
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error(transparent)]
    Source(#[from] crate::source::SourceError),
    #[error("cannot open the spool")]
    Spool(#[from] SpoolError),
    #[error(transparent)]
    NewerSnapshot(#[from] crate::reconcile::snapshot::NewerSnapshot),
    #[error("cannot create the data directory {path:?}")]
    DataDir {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot open the dead-letter store")]
    DeadLetters(#[source] DeadLetterError),
    #[error("cannot read the signing key (`signing.key`): {0}")]
    Signing(String),
    #[error("the gRPC server failed")]
    Serve(#[source] tonic::transport::Error),
    #[error("a gRPC server task died")]
    Task(#[source] tokio::task::JoinError),
    #[error(
        "the spool could not write to disk, so eventgate stopped to be restarted (the next start recovers the spool and delivers every acknowledged event)"
    )]
    SpoolFailed(#[source] std::sync::Arc<std::io::Error>),
}

/// A started gateway. Dropping it without `stop` aborts the server tasks.
pub struct Gateway {
    exchange: Exchange,
    pipeline: std::sync::Arc<Pipeline>,
    reloader: std::sync::Arc<Reloader>,
    spool: Spool,
    upstreams: Upstreams,
    sources: crate::source::Sources,
    /// Signed checkpoints of the audit stores' chain heads (`[signing]`).
    signers: Option<crate::signer::Signers>,
    socket: UnixSocket,
    tcp_addr: Option<SocketAddr>,
    cancel: CancellationToken,
    servers: Servers,
    shutdown_timeout: Duration,
    drain_timeout: Duration,
    admin: Option<Admin>,
    /// Released when the gateway is dropped, after everything is closed.
    _lock: DataDirLock,
}

impl Gateway {
    /// Starts with the built-in forwarder kinds.
    pub async fn start(config: &Config) -> Result<Self, GatewayError> {
        Self::start_with(config, &Kinds::default()).await
    }

    /// Builds every forwarder, binds every listener and starts serving. Errors here
    /// (a bad forwarder option, an unreachable broker, a busy socket) happen before
    /// anything is accepted. `kinds` may include a library user's own forwarder kinds.
    pub async fn start_with(config: &Config, kinds: &Kinds) -> Result<Self, GatewayError> {
        config.validate()?;
        config.check_kinds(kinds)?;
        let lock = wiring::lock_data_dir(config)?;
        // First: a busy port fails the start before anything is opened, and the
        // metrics recorder is in place before the first metric is recorded.
        let admin = wiring::bind_admin(config).await?;
        let started = std::time::SystemTime::now();
        wiring::refuse_newer_state(config)?;
        let (spool, _recovery) = wiring::open_spool(config).await?;
        let (pipeline, reloader) = wiring::start_pipeline(config, kinds, &spool).await?;
        let exchange = Exchange::new(
            config.exchange.clone(),
            ExchangeParts {
                router: pipeline.router(),
                spool: Some(spool.clone()),
                node: Some(std::sync::Arc::from(config.node.as_str())),
            },
        );
        // Before serving: a marker of this start comes before anything published to it.
        let configured: Vec<String> = config
            .upstreams
            .iter()
            .map(|u| u.effective_name())
            .collect();
        crate::upstream::roster::record_removed(&exchange, &config.data_dir, &configured).await;
        let cancel = CancellationToken::new();
        let Listeners {
            servers,
            socket,
            tcp_addr,
            connections,
        } = listeners::serve(config, &exchange, &cancel).await?;
        let (upstreams, sources) = wiring::start_upstreams_and_sources(config, &exchange, &spool)?;
        let signers = wiring::start_signers(config, &exchange)?;
        let mut gateway = Self {
            exchange,
            pipeline,
            reloader,
            spool,
            upstreams,
            sources,
            signers: Some(signers),
            socket,
            tcp_addr,
            cancel,
            servers,
            shutdown_timeout: config.exchange.shutdown_timeout,
            drain_timeout: config.pipeline.drain_timeout,
            admin: None,
            _lock: lock,
        };
        // Last: the admin endpoint reports on every part started above.
        gateway.admin = gateway.serve_admin(admin, config, connections, started);
        Ok(gateway)
    }

    pub fn exchange(&self) -> &Exchange {
        &self.exchange
    }

    pub fn pipeline(&self) -> &Pipeline {
        &self.pipeline
    }

    /// Applies a new configuration while running (what SIGHUP does); see
    /// `crate::reload`.
    pub(crate) fn reloader(&self) -> &std::sync::Arc<Reloader> {
        &self.reloader
    }

    pub fn socket_path(&self) -> &Path {
        self.socket.path()
    }

    /// The bound TCP address (useful with port 0).
    pub fn tcp_addr(&self) -> Option<SocketAddr> {
        self.tcp_addr
    }

    /// The admin endpoint's bound address, when it is on.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin.as_ref().map(Admin::addr)
    }

    /// Serves until `shutdown` resolves, a server fails or the spool cannot write,
    /// then stops gracefully. A spool failure is an error: the caller exits non-zero
    /// so that systemd or Kubernetes restarts it, rather than running on refusing
    /// every event while `/healthz` says it is fine.
    pub async fn run_until(
        mut self,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), GatewayError> {
        let spool = self.spool.clone();
        let outcome = tokio::select! {
            () = shutdown => Ok(()),
            Some(result) = self.servers.join_next() => match result {
                Ok(Ok(())) => {
                    tracing::error!("a gRPC server stopped on its own; shutting down");
                    Ok(())
                }
                Ok(Err(error)) => Err(GatewayError::Serve(error)),
                Err(error) => Err(GatewayError::Task(error)),
            },
            error = spool.failed() => {
                tracing::error!(
                    error = %crate::errors::chain(&*error),
                    drain_timeout = ?self.drain_timeout,
                    "the spool cannot write to disk: stopping; forwarders deliver what is durable until the drain timeout, then eventgate exits with status 1 for its supervisor to restart it"
                );
                Err(GatewayError::SpoolFailed(error))
            }
        };
        self.stop().await;
        outcome
    }

    /// Ends the upstream subscriptions (recording where their record stops) and the
    /// sources (committing what is durable), stops accepting, ends every subscription (clients see UNAVAILABLE), waits up to the
    /// shutdown timeout for in-flight calls, then gives the forwarders up to the drain
    /// timeout to deliver what is queued. Returns what each forwarder did.
    pub async fn stop(mut self) -> Vec<Report> {
        tracing::info!("shutting down");
        // A reload in progress finishes first; none starts after this.
        self.reloader.close().await;
        self.upstreams.stop(self.shutdown_timeout).await;
        // Like upstreams: what they read is made durable and committed before the
        // exchange closes.
        self.sources.stop(self.shutdown_timeout).await;
        // A last signed checkpoint of each audit store, while the exchange still
        // takes it.
        if let Some(signers) = self.signers.take() {
            signers.stop(self.shutdown_timeout).await;
        }
        self.cancel.cancel();
        self.exchange.close();
        let drain = async { while self.servers.join_next().await.is_some() {} };
        if tokio::time::timeout(self.shutdown_timeout, drain)
            .await
            .is_err()
        {
            tracing::warn!(
                timeout = ?self.shutdown_timeout,
                "in-flight calls did not finish in time; closing them"
            );
            self.servers.abort_all();
        }
        let reports = self.pipeline.shutdown(self.drain_timeout).await;
        for report in &reports {
            tracing::info!(
                forwarder = %report.forwarder,
                delivered = report.delivered,
                failed = report.failed,
                undelivered = report.undelivered,
                "forwarder stopped"
            );
        }
        // Cursors are persisted lazily; this writes the final ones, so the next start
        // re-delivers nothing that was delivered.
        if let Err(error) = self.spool.close().await {
            tracing::error!(%error, "closing the spool failed; the next start re-delivers from older cursors");
        }
        // Last: health, readiness and metrics stay visible while forwarders drain.
        if let Some(admin) = self.admin.take() {
            admin.stop().await;
        }
        tracing::info!(next_seq = self.exchange.next_seq(), "stopped");
        reports
    }
}
