//! Wires the gateway together and runs it: exchange, gRPC listeners, and an orderly
//! shutdown. `serve` and the tests start it the same way.

use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use thiserror::Error;
use tokio::task::JoinSet;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::{TcpListenerStream, UnixListenerStream};
use tokio_util::sync::CancellationToken;
use tonic::transport::Server;

use crate::admin::{Admin, AdminError, Observed};
use crate::config::{Config, ConfigError};
use crate::connections::{Capped, OpenConnections};
use crate::deadletter::{DeadLetterError, Store};
/// What [`Gateway::exchange`] takes in, through `Exchange::append`.
pub use crate::exchange::Incoming;
use crate::exchange::{EventsService, Exchange, ExchangeParts};
use crate::forward::Kinds;
use crate::listen::{self, ListenError, SocketGroup, TcpSecurity, UnixSocket};
use crate::lock::{DataDirLock, LockError};
use crate::pipeline::{BacklogStart, DeadLetters, Pipeline, PipelineError, Report};
use crate::reload::Reloader;
use crate::resume::ResumeService;
use crate::spool::{Spool, SpoolError};
use crate::tls::TlsError;
use crate::upstream::Upstreams;

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

/// Opens the spool off the runtime: recovery reads every segment.
async fn open_spool(config: &Config) -> Result<(Spool, crate::spool::Recovery), GatewayError> {
    let dir = config.spool_dir();
    let settings = config.spool.clone();
    // The upstreams' state snapshots hold spool cursors too (see reconcile::snapshot).
    let names: Vec<String> = config
        .forwarders
        .iter()
        .map(|f| f.name.clone())
        .chain(
            config
                .upstreams
                .iter()
                .map(|u| crate::reconcile::snapshot::cursor_name(&u.effective_name())),
        )
        .collect();
    let opened = tokio::task::spawn_blocking(move || {
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        Spool::open(&dir, &settings, &names)
    })
    .await
    .map_err(GatewayError::Task)?;
    Ok(opened?)
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
    servers: JoinSet<Result<(), tonic::transport::Error>>,
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
        crate::fsmode::create_dir_all(&config.data_dir).map_err(|source| {
            GatewayError::DataDir {
                path: config.data_dir.clone(),
                source,
            }
        })?;
        // Before anything in the data directory is opened or written.
        let lock = DataDirLock::acquire(&config.data_dir)?;
        // First: a busy port fails the start before anything is opened, and the
        // metrics recorder is in place before the first metric is recorded.
        let admin = match config.admin.addr() {
            Ok(Some(addr)) => Some(crate::admin::Bound::bind(addr).await?),
            Ok(None) => None,
            Err((key, problem)) => return Err(ConfigError::Invalid { key, problem }.into()),
        };
        let reload_token = config
            .admin
            .reload_token()
            .map_err(|(key, problem)| ConfigError::Invalid { key, problem })?;
        let started = std::time::SystemTime::now();
        let (spool, _recovery) = open_spool(config).await?;
        let backlog = BacklogStart {
            backlog: std::sync::Arc::new(spool.clone()),
            start_seq: spool.next_seq(),
        };
        let dead_letters = open_dead_letters(config).await?;
        let pipeline = std::sync::Arc::new(
            Pipeline::start(
                &config.forwarders,
                kinds,
                &config.data_dir,
                Some(dead_letters.clone()),
                Some(backlog),
            )
            .await?,
        );
        let reloader = std::sync::Arc::new(Reloader::new(
            std::sync::Arc::clone(&pipeline),
            kinds.clone(),
            Some(dead_letters),
            config.clone(),
        ));
        let exchange = Exchange::new(
            config.exchange.clone(),
            ExchangeParts {
                router: pipeline.router(),
                spool: Some(spool.clone()),
                node: Some(std::sync::Arc::from(config.node.as_str())),
            },
        );
        let service = EventsService::new(exchange.clone()).into_server();
        let resume = ResumeService::new(
            exchange.clone(),
            crate::resume::store_path(&config.forwarders, &config.data_dir),
        )
        .map(ResumeService::into_server);
        let cancel = CancellationToken::new();
        let mut servers = JoinSet::new();

        let limits = &config.exchange.limits;
        // Every listener's HTTP/2 connections get the same stream limit and pings.
        let keepalive = Some(limits.keepalive_interval).filter(|i| !i.is_zero());
        let server = || {
            Server::builder()
                .max_concurrent_streams(Some(limits.max_streams_per_connection))
                .http2_keepalive_interval(keepalive)
                .http2_keepalive_timeout(Some(limits.keepalive_timeout))
        };
        // TLS files are read before any listener opens: a bad file stops the start.
        let (mut builder, security) = match &config.exchange.tls {
            Some(tls) => (
                tls.apply(server(), limits.handshake_timeout)?,
                TcpSecurity::Tls {
                    client_certificates: tls.client_ca.is_some(),
                    allow_anonymous: tls.allow_anonymous_clients,
                },
            ),
            None => (
                server(),
                TcpSecurity::Plaintext {
                    insecure: config.exchange.insecure,
                },
            ),
        };
        let connections = vec![OpenConnections::new("unix"), OpenConnections::new("tcp")];
        let group = match &config.exchange.socket_group {
            Some(spec) => Some(SocketGroup::resolve(spec)?),
            None => None,
        };
        let mut socket =
            listen::bind_unix(&config.socket_path(), config.socket_mode()?, group.as_ref())?;
        if let Some(listener) = socket.take_listener() {
            let stop = cancel.clone().cancelled_owned();
            let incoming = Capped::new(
                UnixListenerStream::new(listener),
                connections[0].clone(),
                limits.max_connections,
                limits.handshake_timeout,
            );
            servers.spawn(
                server()
                    .add_service(service.clone())
                    .add_optional_service(resume.clone())
                    .serve_with_incoming_shutdown(incoming, stop),
            );
        }
        let mut tcp_addr = None;
        if let Some(addr) = config.exchange.listen {
            let listener = listen::bind_tcp(addr, security).await?;
            tcp_addr = listener.local_addr().ok();
            let stop = cancel.clone().cancelled_owned();
            // Nagle off, as tonic's own TCP incoming sets it (this one is wrapped).
            let incoming = Capped::new(
                TcpListenerStream::new(listener).map(|accepted| {
                    let stream = accepted?;
                    if let Err(error) = stream.set_nodelay(true) {
                        tracing::debug!(%error, "cannot turn Nagle off on a connection");
                    }
                    Ok(stream)
                }),
                connections[1].clone(),
                limits.max_connections,
                limits.handshake_timeout,
            );
            servers.spawn(
                builder
                    .add_service(service)
                    .add_optional_service(resume)
                    .serve_with_incoming_shutdown(incoming, stop),
            );
        }
        tracing::info!(
            socket = %socket.path().display(),
            tcp = ?tcp_addr,
            tls = config.exchange.tls.is_some(),
            client_certificates = config.exchange.tls.as_ref().is_some_and(|t| t.client_ca.is_some()),
            "eventgate is serving containerd's Events API"
        );
        let upstreams = Upstreams::start(
            &config.upstreams,
            &exchange,
            &config.data_dir,
            Some(spool.clone()),
        );
        let sources = crate::source::Sources::start(&config.sources, &exchange)?;
        // Checked by the config's validation already; read again here so the key in
        // use is the file as it is now.
        let signer = config
            .signing
            .signer()
            .map_err(|e| GatewayError::Signing(crate::errors::chain(&e)))?;
        let signers = crate::signer::Signers::start(
            signer,
            &config.signing,
            &config.forwarders,
            &config.data_dir,
            &config.node,
            &exchange,
        );
        let admin = admin.map(|bound| {
            bound.serve(Observed {
                forwarders: pipeline.view(),
                reload: Some(std::sync::Arc::clone(&reloader)),
                reload_token,
                upstreams: upstreams.watch(),
                sources: sources.views(),
                signers: signers.watch(),
                spool: Some(spool.clone()),
                exchange: exchange.clone(),
                readiness: crate::admin::readiness::Rules::from(&config.admin),
                connections,
                started,
            })
        });
        Ok(Self {
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
            admin,
            _lock: lock,
        })
    }

    pub fn exchange(&self) -> &Exchange {
        &self.exchange
    }

    pub fn pipeline(&self) -> &Pipeline {
        &self.pipeline
    }

    /// Applies a new configuration while running (what SIGHUP does); see
    /// `crate::reload`.
    pub fn reloader(&self) -> &std::sync::Arc<Reloader> {
        &self.reloader
    }

    pub fn spool(&self) -> &Spool {
        &self.spool
    }

    pub fn upstreams(&self) -> &Upstreams {
        &self.upstreams
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

/// Opens (creating) the dead-letter store; redeliveries a previous run left in flight
/// are requested again, so they are not lost.
async fn open_dead_letters(config: &Config) -> Result<DeadLetters, GatewayError> {
    let store = Store::open(config.dead_letter_path(), true)
        .await
        .map_err(GatewayError::DeadLetters)?;
    let requeued = store
        .requeue_interrupted()
        .await
        .map_err(GatewayError::DeadLetters)?;
    tracing::info!(
        path = %store.path().display(),
        requeued,
        poll_interval = ?config.dead_letter.poll_interval,
        "dead-letter store open"
    );
    Ok(DeadLetters {
        store,
        poll_interval: config.dead_letter.poll_interval,
    })
}
