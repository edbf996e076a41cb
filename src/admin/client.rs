//! Fetching from a gateway's admin endpoint (for `eventgate status`, `top` and
//! `reload`).

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use thiserror::Error;

use super::status::Status;

#[derive(Debug, Error)]
pub enum FetchError {
    #[error(
        "cannot connect to the admin endpoint at {addr} (is `eventgate serve` running with `[admin] listen` there?)"
    )]
    Connect {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the admin endpoint at {addr} did not answer within {timeout:?}")]
    Timeout { addr: String, timeout: Duration },
    #[error("HTTP request to the admin endpoint at {addr} failed")]
    Http {
        addr: String,
        #[source]
        source: hyper::Error,
    },
    #[error("the admin endpoint at {addr} answered {path} with HTTP {code}: {body}")]
    Status {
        addr: String,
        path: String,
        code: u16,
        body: String,
    },
    #[error("the admin endpoint at {addr} sent a /status this eventgate cannot read")]
    Decode {
        addr: String,
        #[source]
        source: serde_json::Error,
    },
}

/// `addr` is `HOST:PORT`, optionally with `http://` in front.
pub(crate) fn host_port(addr: &str) -> &str {
    addr.trim_start_matches("http://").trim_end_matches('/')
}

/// GETs `path`; returns the status code and the body.
pub(crate) async fn get(
    addr: &str,
    path: &str,
    timeout: Duration,
) -> Result<(u16, String), FetchError> {
    request(http::Method::GET, addr, path, None, timeout).await
}

/// POSTs to `path` with an empty body, with `token` as `Authorization: Bearer`
/// when given; returns the status code and the body.
pub(crate) async fn post(
    addr: &str,
    path: &str,
    token: Option<&str>,
    timeout: Duration,
) -> Result<(u16, String), FetchError> {
    request(http::Method::POST, addr, path, token, timeout).await
}

async fn request(
    method: http::Method,
    addr: &str,
    path: &str,
    token: Option<&str>,
    timeout: Duration,
) -> Result<(u16, String), FetchError> {
    let target = host_port(addr).to_owned();
    let exchange = async {
        let stream = tokio::net::TcpStream::connect(&target)
            .await
            .map_err(|source| FetchError::Connect {
                addr: target.clone(),
                source,
            })?;
        let http = |source| FetchError::Http {
            addr: target.clone(),
            source,
        };
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(http)?;
        tokio::spawn(connection);
        let mut request = http::Request::builder()
            .method(method)
            .uri(path)
            .header(http::header::HOST, target.as_str());
        if let Some(token) = token {
            request = request.header(http::header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let request = request
            .body(Empty::<Bytes>::new())
            .map_err(|e| FetchError::Connect {
                addr: target.clone(),
                source: std::io::Error::other(e),
            })?;
        let response = sender.send_request(request).await.map_err(http)?;
        let code = response.status().as_u16();
        let body = response.into_body().collect().await.map_err(http)?;
        Ok((code, String::from_utf8_lossy(&body.to_bytes()).into_owned()))
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| FetchError::Timeout {
            addr: target.clone(),
            timeout,
        })?
}

/// GETs and decodes `/status`.
pub(crate) async fn status(addr: &str, timeout: Duration) -> Result<Status, FetchError> {
    let (code, body) = get(addr, "/status", timeout).await?;
    if code != 200 {
        return Err(FetchError::Status {
            addr: host_port(addr).into(),
            path: "/status".into(),
            code,
            body,
        });
    }
    serde_json::from_str(&body).map_err(|source| FetchError::Decode {
        addr: host_port(addr).into(),
        source,
    })
}
