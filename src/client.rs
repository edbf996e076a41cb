//! Connecting to an Events endpoint (eventgate or containerd) by socket path or address.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use thiserror::Error;
use tonic::transport::{Channel, Endpoint, Uri};

use crate::proto::containerd::services::events::v1::events_client::EventsClient;

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
}

/// Where an Events endpoint listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Address {
    Unix(PathBuf),
    /// An `http://host:port` URI.
    Tcp(String),
}

impl Address {
    /// Accepts what containerd's tools accept (a socket path, `unix://PATH`) and TCP
    /// forms (`HOST:PORT`, `tcp://HOST:PORT`, `http://HOST:PORT`).
    pub fn parse(text: &str) -> Result<Self, ConnectError> {
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
    let connect_error = |source| ConnectError::Connect {
        address: address.to_owned(),
        source,
    };
    let attempt = async {
        match Address::parse(address)? {
            Address::Unix(path) => {
                let path = Arc::new(path);
                // The URI is required by the API but unused: the connector decides.
                Endpoint::from_static("http://localhost")
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
            Address::Tcp(uri) => Endpoint::from_shared(uri)
                .map_err(connect_error)?
                .tcp_nodelay(true)
                .connect()
                .await
                .map_err(connect_error),
        }
    };
    tokio::time::timeout(timeout, attempt)
        .await
        .map_err(|_| ConnectError::Timeout {
            address: address.to_owned(),
            timeout,
        })?
}

pub async fn connect(
    address: &str,
    timeout: Duration,
) -> Result<EventsClient<Channel>, ConnectError> {
    Ok(EventsClient::new(connect_channel(address, timeout).await?))
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
