//! The witness's HTTP/1 server: `POST /add-checkpoint` (the tlog-witness protocol),
//! `GET /metrics` and `GET /healthz`; 404 for other paths, 405 for other methods.
//!
//! Every request is bounded: its headers must arrive within 10 s, its body within
//! 10 s and 64 KiB, and at most 256 connections are served at once (the next wait in
//! the kernel's backlog), so what a client can make the witness hold is bounded
//! whatever it sends.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::cosign::{AddError, Witness};
use super::protocol::{MAX_BODY_BYTES, Refusal, SIZE_CONTENT_TYPE};

/// How long a stop waits for requests in flight.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// How long a client may take to send a request's headers, and then its body.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
const BODY_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once.
const MAX_CONNECTIONS: usize = 256;

/// Serves until `cancel`, then lets requests in flight finish (up to 5 s).
pub(super) async fn serve(listener: TcpListener, witness: Arc<Witness>, cancel: CancellationToken) {
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let slot = tokio::select! {
            () = cancel.cancelled() => break,
            slot = Arc::clone(&slots).acquire_owned() => slot,
        };
        // The semaphore is never closed.
        let Ok(slot) = slot else { break };
        let accepted = tokio::select! {
            () = cancel.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                // Out of file descriptors and the like: pause instead of spinning.
                tracing::warn!(%error, "witness: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let witness = Arc::clone(&witness);
        let service = service_fn(move |request| {
            let witness = Arc::clone(&witness);
            async move { Ok::<_, Infallible>(respond(&witness, request, peer).await) }
        });
        let connection = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(HEADER_TIMEOUT)
            .serve_connection(TokioIo::new(stream), service);
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, %peer, "witness: connection ended with an error");
            }
            drop(slot);
        });
    }
    drop(listener);
    if tokio::time::timeout(STOP_GRACE, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::debug!("witness: connections still open at stop; dropping them");
    }
}

async fn respond(
    witness: &Arc<Witness>,
    request: Request<Incoming>,
    peer: SocketAddr,
) -> Response<Full<Bytes>> {
    let path = request.uri().path();
    match path {
        "/add-checkpoint" => {
            let response = match *request.method() == Method::POST {
                true => add_checkpoint(witness, request, peer).await,
                false => not_allowed("/add-checkpoint", "POST"),
            };
            let code = response.status().as_u16().to_string();
            metrics::counter!("eventgate_witness_requests_total", "code" => code).increment(1);
            response
        }
        "/metrics" | "/healthz" if !matches!(*request.method(), Method::GET | Method::HEAD) => {
            not_allowed(path, "GET")
        }
        "/metrics" => scrape(witness).await,
        "/healthz" => text(StatusCode::OK, "ok\n".into()),
        _ => text(
            StatusCode::NOT_FOUND,
            "not found: this witness answers POST /add-checkpoint (c2sp.org/tlog-witness), GET \
             /metrics and GET /healthz\n"
                .into(),
        ),
    }
}

async fn add_checkpoint(
    witness: &Arc<Witness>,
    request: Request<Incoming>,
    peer: SocketAddr,
) -> Response<Full<Bytes>> {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|length| length > MAX_BODY_BYTES as u64) {
        return too_large(peer);
    }
    let body = Limited::new(request.into_body(), MAX_BODY_BYTES);
    let body = match tokio::time::timeout(BODY_TIMEOUT, body.collect()).await {
        Err(_) => {
            tracing::info!(%peer, "witness: request body not received within {BODY_TIMEOUT:?}");
            return text(
                StatusCode::REQUEST_TIMEOUT,
                format!("the request body did not arrive within {BODY_TIMEOUT:?}\n"),
            );
        }
        Ok(Err(error)) if error.downcast_ref::<LengthLimitError>().is_some() => {
            return too_large(peer);
        }
        Ok(Err(error)) => {
            tracing::debug!(%peer, %error, "witness: cannot read a request body");
            return text(
                StatusCode::BAD_REQUEST,
                format!("cannot read the request body: {error}\n"),
            );
        }
        Ok(Ok(body)) => body.to_bytes(),
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let handler = Arc::clone(witness);
    let outcome = tokio::task::spawn_blocking(move || handler.add_checkpoint(&body, now)).await;
    match outcome {
        Ok(Ok(cosignatures)) => text(StatusCode::OK, cosignatures),
        Ok(Err(AddError::Refused(refusal))) => refused(&refusal, peer),
        Ok(Err(AddError::State(error))) => {
            tracing::error!(%peer, error = %crate::errors::chain(&error), "witness: cannot use its state; nothing cosigned");
            text(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the witness cannot read or record its state; nothing was cosigned\n".into(),
            )
        }
        Err(error) => {
            tracing::error!(%peer, %error, "witness: the request's handler stopped");
            text(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the witness failed to handle the request; nothing was cosigned\n".into(),
            )
        }
    }
}

/// The answer the spec gives each refusal.
fn refused(refusal: &Refusal, peer: SocketAddr) -> Response<Full<Bytes>> {
    let status = StatusCode::from_u16(refusal.status()).unwrap_or(StatusCode::BAD_REQUEST);
    tracing::info!(%peer, code = status.as_u16(), reason = %refusal, "witness: refused a checkpoint");
    match refusal {
        Refusal::Conflict { recorded, .. } => {
            let mut response = text(status, format!("{recorded}\n"));
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(SIZE_CONTENT_TYPE),
            );
            response
        }
        other => text(status, format!("{other}\n")),
    }
}

fn too_large(peer: SocketAddr) -> Response<Full<Bytes>> {
    tracing::info!(%peer, "witness: request body over {MAX_BODY_BYTES} bytes");
    text(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("an add-checkpoint request body is at most {MAX_BODY_BYTES} bytes\n"),
    )
}

/// `/metrics`: the recorder's text, with the per-origin sizes set from the state
/// first (gauges not set for a second are dropped from the output).
async fn scrape(witness: &Arc<Witness>) -> Response<Full<Bytes>> {
    let Some(handle) = crate::admin::metrics::install() else {
        return text(
            StatusCode::SERVICE_UNAVAILABLE,
            "another metrics recorder was installed in this process before eventgate's\n".into(),
        );
    };
    let reader = Arc::clone(witness);
    let sizes = tokio::task::spawn_blocking(move || reader.state().sizes()).await;
    match sizes {
        Ok(Ok(sizes)) => {
            for (origin, size) in sizes {
                if witness.origins().any(|o| o == origin) {
                    metrics::gauge!("eventgate_witness_tree_size", "origin" => origin)
                        .set(size as f64);
                }
            }
        }
        Ok(Err(error)) => {
            tracing::warn!(error = %crate::errors::chain(&error), "witness: cannot read the recorded sizes for /metrics");
        }
        Err(error) => tracing::warn!(%error, "witness: reading the recorded sizes stopped"),
    }
    let mut response = text(StatusCode::OK, handle.render());
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    response
}

fn not_allowed(path: &str, allowed: &'static str) -> Response<Full<Bytes>> {
    let mut response = text(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("{path} only answers {allowed}\n"),
    );
    response
        .headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allowed));
    response
}

fn text(code: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = code;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
