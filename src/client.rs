//! Connecting to an Events endpoint (eventgate or containerd) by socket path or address.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use thiserror::Error;
use tonic::transport::{Channel, Endpoint, Uri};

use crate::proto::containerd::services::events::v1::events_client::EventsClient;
use crate::tls::{ClientTls, TlsError};

#[derive(Debug, Error)]
pub enum ConnectError {
    #[error("{address:?} is not a socket path or an address like 127.0.0.1:7338")]
    BadAddress { address: String },
    #[error("cannot connect to {address}")]
    Connect {
        address: String,
        #[source]
        source: tonic::transport::Error,
    },
    #[error("cannot connect to {address}: no answer within {timeout:?}")]
    Timeout { address: String, timeout: Duration },
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error(
        "{address:?} is a unix socket; --tls-ca, --tls-cert and --tls-key apply to HOST:PORT addresses"
    )]
    TlsOnUnix { address: String },
}

/// `--tls-ca FILE [--tls-cert FILE --tls-key FILE]` for clients of a TCP listener.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TlsArgs {
    /// Connect with TLS, trusting the server certificate this PEM CA signed.
    #[arg(long, value_name = "FILE", env = "EVENTGATE_TLS_CA")]
    pub tls_ca: Option<PathBuf>,
    /// Client certificate (PEM) for a server that requires one (mutual TLS).
    #[arg(
        long,
        value_name = "FILE",
        env = "EVENTGATE_TLS_CERT",
        requires = "tls_key"
    )]
    pub tls_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(
        long,
        value_name = "FILE",
        env = "EVENTGATE_TLS_KEY",
        requires = "tls_cert"
    )]
    pub tls_key: Option<PathBuf>,
}

impl TlsArgs {
    pub fn client_tls(&self) -> ClientTls {
        ClientTls {
            ca: self.tls_ca.clone(),
            cert: self.tls_cert.clone(),
            key: self.tls_key.clone(),
        }
    }
}

/// Where an Events endpoint listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Address {
    Unix(PathBuf),
    /// An `http://host:port` URI.
    Tcp(String),
}

impl Address {
    /// Accepts what containerd's tools accept (a socket path, `unix://PATH`) and TCP
    /// forms (`HOST:PORT`, `tcp://HOST:PORT`, `http://HOST:PORT`).
    pub(crate) fn parse(text: &str) -> Result<Self, ConnectError> {
        if text.is_empty() {
            return Err(ConnectError::BadAddress {
                address: text.to_owned(),
            });
        }
        if let Some(path) = text.strip_prefix("unix://") {
            return Ok(Address::Unix(path.into()));
        }
        if let Some(rest) = text.strip_prefix("tcp://") {
            return Ok(Address::Tcp(format!("http://{rest}")));
        }
        if text.starts_with("http://") {
            return Ok(Address::Tcp(text.to_owned()));
        }
        if text.contains('/') || !text.contains(':') {
            return Ok(Address::Unix(text.into()));
        }
        Ok(Address::Tcp(format!("http://{text}")))
    }
}

/// Opens a channel, failing after `timeout` rather than waiting forever for a socket
/// that is not there.
pub async fn connect_channel(address: &str, timeout: Duration) -> Result<Channel, ConnectError> {
    connect_channel_tls(address, timeout, &ClientTls::default()).await
}

/// [`connect_channel`], with TLS to a `HOST:PORT` address when `tls` asks for it.
pub async fn connect_channel_tls(
    address: &str,
    timeout: Duration,
    tls: &ClientTls,
) -> Result<Channel, ConnectError> {
    let tls_config = tls.config()?;
    let connect_error = |source| ConnectError::Connect {
        address: address.to_owned(),
        source,
    };
    let attempt = async {
        match Address::parse(address)? {
            Address::Unix(_) if tls_config.is_some() => Err(ConnectError::TlsOnUnix {
                address: address.to_owned(),
            }),
            Address::Unix(path) => {
                let path = Arc::new(path);
                // The URI is required by the API but unused: the connector decides.
                windows(Endpoint::from_static("http://localhost"))
                    .connect_with_connector(tower::service_fn(move |_: Uri| {
                        let path = Arc::clone(&path);
                        async move {
                            tokio::net::UnixStream::connect(path.as_path())
                                .await
                                .map(TokioIo::new)
                        }
                    }))
                    .await
                    .map_err(connect_error)
            }
            Address::Tcp(uri) => {
                let endpoint = match tls_config {
                    Some(config) => {
                        let uri = uri.replacen("http://", "https://", 1);
                        Endpoint::from_shared(uri)
                            .map_err(connect_error)?
                            .tls_config(config)
                            .map_err(connect_error)?
                    }
                    None => Endpoint::from_shared(uri).map_err(connect_error)?,
                };
                windows(endpoint)
                    .tcp_nodelay(true)
                    .connect()
                    .await
                    .map_err(connect_error)
            }
        }
    };
    tokio::time::timeout(timeout, attempt)
        .await
        .map_err(|_| ConnectError::Timeout {
            address: address.to_owned(),
            timeout,
        })?
}

/// HTTP/2 flow-control windows for a connection that may carry a long stream of
/// small messages (a subscription: one DATA frame per event) which its reader holds
/// for a while (backpressure: a full spool or queue, a container record being read).
/// The h2 client closes a connection (GOAWAY `ENHANCE_YOUR_CALM`, "too_many_data_frames")
/// once the framing overhead of the small frames it buffers unread exceeds half the
/// connection window; with the defaults (a 2 MiB stream window, a 5 MiB connection
/// window) 100-byte events reach that limit before the stream's window stops the
/// sender, so holding a subscription broke it. A 1 MiB stream window bounds what one
/// stream buffers; a 32 MiB connection window puts the overhead limit (16 MiB) above
/// what a full stream window of 20-byte messages costs (about 12 MiB).
fn windows(endpoint: Endpoint) -> Endpoint {
    endpoint
        .initial_stream_window_size(1 << 20)
        .initial_connection_window_size(32 << 20)
}

pub async fn connect(
    address: &str,
    timeout: Duration,
) -> Result<EventsClient<Channel>, ConnectError> {
    Ok(EventsClient::new(connect_channel(address, timeout).await?))
}

/// [`connect`], with TLS when `tls` asks for it.
pub async fn connect_tls(
    address: &str,
    timeout: Duration,
    tls: &ClientTls,
) -> Result<EventsClient<Channel>, ConnectError> {
    Ok(EventsClient::new(
        connect_channel_tls(address, timeout, tls).await?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        let unix = |p: &str| Address::Unix(p.into());
        let tcp = |u: &str| Address::Tcp(u.into());
        assert_eq!(Address::parse("/run/x.sock").unwrap(), unix("/run/x.sock"));
        assert_eq!(
            Address::parse("unix:///run/x.sock").unwrap(),
            unix("/run/x.sock")
        );
        assert_eq!(
            Address::parse("data/eventgate.sock").unwrap(),
            unix("data/eventgate.sock")
        );
        assert_eq!(Address::parse("sock").unwrap(), unix("sock"));
        assert_eq!(
            Address::parse("127.0.0.1:7338").unwrap(),
            tcp("http://127.0.0.1:7338")
        );
        assert_eq!(
            Address::parse("tcp://[::1]:1").unwrap(),
            tcp("http://[::1]:1")
        );
        assert_eq!(
            Address::parse("localhost:1").unwrap(),
            tcp("http://localhost:1")
        );
        assert!(Address::parse("").is_err());
    }
}
