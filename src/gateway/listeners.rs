//! The gRPC listeners: containerd's Events service (and the resumable Subscribe, when
//! there is a spool) on the unix socket and, when configured, on TCP, each with its
//! connections capped and the same HTTP/2 limits.

use std::net::SocketAddr;

use tokio::task::JoinSet;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::{TcpListenerStream, UnixListenerStream};
use tokio_util::sync::CancellationToken;
use tonic::transport::Server;
use tonic::transport::server::Router;

use super::GatewayError;
use crate::config::Config;
use crate::connections::{Capped, OpenConnections};
use crate::exchange::{EventsService, Exchange, LimitSettings};
use crate::listen::{self, SocketGroup, TcpSecurity, UnixSocket};
use crate::resume::ResumeService;

/// The tasks serving the listeners, one each.
pub(super) type Servers = JoinSet<Result<(), tonic::transport::Error>>;

/// The bound listeners, being served.
pub(super) struct Listeners {
    pub(super) socket: UnixSocket,
    /// The TCP listener's address (useful with port 0), when there is one.
    pub(super) tcp_addr: Option<SocketAddr>,
    pub(super) servers: Servers,
    /// Open client connections per listener, unix first, for the admin endpoint.
    pub(super) connections: Vec<OpenConnections>,
}

/// Binds the unix socket, then the TCP listener when `exchange.listen` is set, and
/// serves each until `cancel`. TLS files are read before either is bound.
pub(super) async fn serve(
    config: &Config,
    exchange: &Exchange,
    cancel: &CancellationToken,
) -> Result<Listeners, GatewayError> {
    let events = EventsService::new(exchange.clone()).into_server();
    let resume = ResumeService::new(
        exchange.clone(),
        crate::resume::store_path(&config.forwarders, &config.data_dir),
    )
    .map(ResumeService::into_server);
    let routes = |mut server: Server| {
        server
            .add_service(events.clone())
            .add_optional_service(resume.clone())
    };
    let limits = &config.exchange.limits;
    // TLS files are read before any listener opens: a bad file stops the start.
    let (tcp_server, security) = tcp_server(config)?;
    let connections = vec![OpenConnections::new("unix"), OpenConnections::new("tcp")];
    let mut serving = Serving {
        limits,
        cancel,
        servers: JoinSet::new(),
    };
    let socket = serving.unix(config, routes(http2_server(limits)), &connections[0])?;
    let tcp_addr = match config.exchange.listen {
        Some(addr) => {
            serving
                .tcp(addr, security, routes(tcp_server), &connections[1])
                .await?
        }
        None => None,
    };
    tracing::info!(
        socket = %socket.path().display(),
        tcp = ?tcp_addr,
        tls = config.exchange.tls.is_some(),
        client_certificates = config.exchange.tls.as_ref().is_some_and(|t| t.client_ca.is_some()),
        "eventgate is serving containerd's Events API"
    );
    Ok(Listeners {
        socket,
        tcp_addr,
        servers: serving.servers,
        connections,
    })
}

/// Every listener's HTTP/2 connections get the same stream limit and pings.
fn http2_server(limits: &LimitSettings) -> Server {
    let keepalive = Some(limits.keepalive_interval).filter(|i| !i.is_zero());
    Server::builder()
        .max_concurrent_streams(Some(limits.max_streams_per_connection))
        .http2_keepalive_interval(keepalive)
        .http2_keepalive_timeout(Some(limits.keepalive_timeout))
}

/// The TCP listener's server (with TLS when `[exchange.tls]` is set, reading its
/// files) and what protects it, for `listen::bind_tcp` to check.
fn tcp_server(config: &Config) -> Result<(Server, TcpSecurity), GatewayError> {
    let limits = &config.exchange.limits;
    Ok(match &config.exchange.tls {
        Some(tls) => (
            tls.apply(http2_server(limits), limits.handshake_timeout)?,
            TcpSecurity::Tls {
                client_certificates: tls.client_ca.is_some(),
                allow_anonymous: tls.allow_anonymous_clients,
            },
        ),
        None => (
            http2_server(limits),
            TcpSecurity::Plaintext {
                insecure: config.exchange.insecure,
            },
        ),
    })
}

/// What binding a listener needs besides the listener's own settings.
struct Serving<'a> {
    limits: &'a LimitSettings,
    cancel: &'a CancellationToken,
    servers: Servers,
}

impl Serving<'_> {
    /// Binds the unix socket (with its mode and group) and serves it.
    fn unix(
        &mut self,
        config: &Config,
        routes: Router,
        open: &OpenConnections,
    ) -> Result<UnixSocket, GatewayError> {
        let group = match &config.exchange.socket_group {
            Some(spec) => Some(SocketGroup::resolve(spec)?),
            None => None,
        };
        let mut socket =
            listen::bind_unix(&config.socket_path(), config.socket_mode()?, group.as_ref())?;
        if let Some(listener) = socket.take_listener() {
            let stop = self.cancel.clone().cancelled_owned();
            let incoming = Capped::new(
                UnixListenerStream::new(listener),
                open.clone(),
                self.limits.max_connections,
                self.limits.handshake_timeout,
            );
            self.servers
                .spawn(routes.serve_with_incoming_shutdown(incoming, stop));
        }
        Ok(socket)
    }

    /// Binds the TCP listener and serves it; answers the bound address.
    async fn tcp(
        &mut self,
        addr: SocketAddr,
        security: TcpSecurity,
        routes: Router,
        open: &OpenConnections,
    ) -> Result<Option<SocketAddr>, GatewayError> {
        let listener = listen::bind_tcp(addr, security).await?;
        let tcp_addr = listener.local_addr().ok();
        let stop = self.cancel.clone().cancelled_owned();
        // Nagle off, as tonic's own TCP incoming sets it (this one is wrapped).
        let incoming = Capped::new(
            TcpListenerStream::new(listener).map(|accepted| {
                let stream = accepted?;
                if let Err(error) = stream.set_nodelay(true) {
                    tracing::debug!(%error, "cannot turn Nagle off on a connection");
                }
                Ok(stream)
            }),
            open.clone(),
            self.limits.max_connections,
            self.limits.handshake_timeout,
        );
        self.servers
            .spawn(routes.serve_with_incoming_shutdown(incoming, stop));
        Ok(tcp_addr)
    }
}
