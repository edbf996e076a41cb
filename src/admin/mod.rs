//! The admin endpoint: a small HTTP/1 listener beside the gateway (loopback by
//! default, `[admin] listen`) serving
//! - `/metrics`: every metric in Prometheus's text format ([`metrics`]);
//! - `/healthz`: 200 while the process runs its event loop;
//! - `/readyz`: 200 when upstreams, forwarders and the spool are fine, else 503
//!   naming each part that is not and why ([`readiness`]);
//! - `/status`: a JSON summary for `eventgate status` and `top` ([`status`]);
//! - `/ui`: the read-only history page and its API ([`crate::ui`]).
//!
//! It binds before the gateway serves anything (a busy port stops the start) and
//! stops last, so health and metrics stay visible while forwarders drain.

pub(crate) mod client;
mod http;
pub(crate) mod metric_table;
pub(crate) mod metrics;
pub(crate) mod readiness;
pub(crate) mod settings;
pub(crate) mod status;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::SystemTime;

use thiserror::Error;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::exchange::Exchange;
use crate::pipeline::Forwarders;
use crate::reload::Reloader;
use crate::spool::Spool;
use crate::upstream::UpstreamWatch;

#[derive(Debug, Error)]
pub enum AdminError {
    #[error(
        "cannot listen for the admin endpoint on {addr} (`admin.listen`, or `serve --admin`; \"\" turns it off)"
    )]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// What the endpoint reports on: views of the running gateway's parts.
#[derive(Clone)]
pub(crate) struct Observed {
    /// The forwarders running now (follows reloads).
    pub forwarders: Forwarders,
    /// Serves `POST /reload`; `None`: the endpoint answers that it cannot reload.
    pub reload: Option<Arc<Reloader>>,
    /// What `POST /reload` must carry (`admin.reload_token_file`); `None`: it is
    /// refused.
    pub reload_token: Option<settings::ReloadToken>,
    pub upstreams: UpstreamWatch,
    /// What each `[[source]]` has done.
    pub sources: Vec<Arc<crate::source::SourceStats>>,
    /// Where each audit store's checkpoint signer stands (`[signing]`).
    pub signers: Vec<tokio::sync::watch::Receiver<crate::signer::SignerStatus>>,
    pub spool: Option<Spool>,
    pub exchange: Exchange,
    pub readiness: readiness::Rules,
    /// Open client connections per exchange listener.
    pub connections: Vec<crate::connections::OpenConnections>,
    pub started: SystemTime,
    /// Serves `/ui`; `None` when `admin.ui` is off.
    pub ui: Option<Arc<crate::ui::Ui>>,
}

/// A bound, not yet serving, admin listener.
pub(crate) struct Bound {
    listener: TcpListener,
    addr: SocketAddr,
}

impl Bound {
    /// Installs the metrics recorder (so everything recorded from now on is kept) and
    /// binds `addr`.
    pub(crate) async fn bind(addr: SocketAddr) -> Result<Self, AdminError> {
        metrics::install();
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| AdminError::Bind { addr, source })?;
        let addr = listener.local_addr().unwrap_or(addr);
        Ok(Self { listener, addr })
    }

    /// Starts answering requests.
    pub(crate) fn serve(self, observed: Observed) -> Admin {
        let cancel = CancellationToken::new();
        let task = tokio::spawn(http::serve(
            self.listener,
            Arc::new(observed),
            cancel.clone(),
        ));
        tracing::info!(
            addr = %self.addr,
            "admin endpoint serving /metrics, /healthz, /readyz and /status"
        );
        Admin {
            addr: self.addr,
            cancel,
            task,
        }
    }
}

/// The running endpoint.
pub(crate) struct Admin {
    addr: SocketAddr,
    cancel: CancellationToken,
    task: JoinHandle<()>,
}

impl Admin {
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, lets requests in flight finish, and waits for that.
    pub(crate) async fn stop(mut self) {
        self.cancel.cancel();
        if let Err(error) = (&mut self.task).await {
            tracing::warn!(%error, "the admin endpoint task died");
        }
    }
}

/// A gateway dropped without `stop` must not leave its port taken.
impl Drop for Admin {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}
