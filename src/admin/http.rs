//! The HTTP/1 server: four GET endpoints, `/ui` ([`crate::ui`]) and `POST /reload`, 404 for anything else,
//! 405 for other methods, and a graceful stop (requests in flight finish, keep-alive connections
//! are closed).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::{Observed, metrics, readiness, status};

/// How long a stop waits for requests in flight.
const STOP_GRACE: Duration = Duration::from_secs(2);
/// How often histogram samples are folded in when nobody scrapes.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

pub(super) async fn serve(
    listener: TcpListener,
    observed: Arc<Observed>,
    cancel: CancellationToken,
) {
    let graceful = GracefulShutdown::new();
    let mut upkeep = tokio::time::interval(UPKEEP_EVERY);
    loop {
        let accepted = tokio::select! {
            () = cancel.cancelled() => break,
            _ = upkeep.tick() => {
                if let Some(handle) = metrics::install() {
                    handle.run_upkeep();
                }
                continue;
            }
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                // Out of file descriptors and the like: pause instead of spinning.
                tracing::warn!(%error, "admin endpoint: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let observed = Arc::clone(&observed);
        // Cancelled to close this connection at once (a /ui live page that fell behind).
        let close = CancellationToken::new();
        let closer = close.clone();
        let service = service_fn(move |request| {
            let observed = Arc::clone(&observed);
            let close = closer.clone();
            async move {
                let path = request.uri().path();
                if path == "/reload" {
                    return Ok::<_, Infallible>(
                        reload(&observed, &request, peer).await.map(BodyExt::boxed),
                    );
                }
                if let Some(ui) = &observed.ui
                    && (path == "/ui" || path.starts_with("/ui/"))
                {
                    return Ok(crate::ui::serve(Arc::clone(ui), &request, close).await);
                }
                Ok(respond(&observed, &request).map(BodyExt::boxed))
            }
        });
        let connection = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            tokio::select! {
                ended = connection => if let Err(error) = ended {
                    tracing::debug!(%error, "admin endpoint: connection ended with an error");
                },
                () = close.cancelled() => {}
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(STOP_GRACE, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::debug!("admin endpoint: connections still open at stop; dropping them");
    }
}

fn respond(observed: &Observed, request: &Request<Incoming>) -> Response<Full<Bytes>> {
    let path = request.uri().path();
    if !matches!(path, "/metrics" | "/healthz" | "/readyz" | "/status") {
        return text(
            StatusCode::NOT_FOUND,
            "not found; try /metrics, /healthz, /readyz, /status or POST /reload\n".into(),
        );
    }
    if request.method() != Method::GET {
        let mut response = text(
            StatusCode::METHOD_NOT_ALLOWED,
            format!("{} only answers GET\n", path),
        );
        response
            .headers_mut()
            .insert(header::ALLOW, header::HeaderValue::from_static("GET"));
        return response;
    }
    match path {
        "/healthz" => text(StatusCode::OK, "ok\n".into()),
        "/readyz" => {
            let verbose = request
                .uri()
                .query()
                .is_some_and(|q| q.split('&').any(|p| p == "verbose" || p.starts_with("verbose=")));
            let readiness = readiness::check(observed);
            let code = if readiness.ready() {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            text(code, readiness.render(verbose))
        }
        "/metrics" => match metrics::install() {
            Some(handle) => {
                metrics::refresh(observed);
                let mut response = text(StatusCode::OK, handle.render());
                response.headers_mut().insert(
                    header::CONTENT_TYPE,
                    header::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
                );
                response
            }
            None => text(
                StatusCode::SERVICE_UNAVAILABLE,
                "another metrics recorder was installed in this process before eventgate's; it has the metrics\n".into(),
            ),
        },
        _ => {
            let body = serde_json::to_vec(&status::collect(observed)).unwrap_or_default();
            let mut response = Response::new(Full::new(Bytes::from(body)));
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("application/json"),
            );
            response
        }
    }
}

/// `POST /reload`: reads the configuration again and applies it; 200 with what
/// changed, or 422 with why it was rejected (the running configuration is kept).
/// Only with the token from `admin.reload_token_file`: anything that can reach the
/// endpoint (every process on the host, pods with host networking) could otherwise
/// make the gateway reload, or hold it busy reloading. Without a token file it is
/// refused (403); with a missing or wrong token, 401.
async fn reload(
    observed: &Observed,
    request: &Request<Incoming>,
    peer: std::net::SocketAddr,
) -> Response<Full<Bytes>> {
    if request.method() != Method::POST {
        let mut response = text(
            StatusCode::METHOD_NOT_ALLOWED,
            "/reload only answers POST\n".into(),
        );
        response
            .headers_mut()
            .insert(header::ALLOW, header::HeaderValue::from_static("POST"));
        return response;
    }
    let Some(token) = &observed.reload_token else {
        refused("disabled", peer);
        return text(
            StatusCode::FORBIDDEN,
            "POST /reload is turned off: set admin.reload_token_file to a file holding a token \
             (`eventgate reload` reads it too), or reload with SIGHUP (`systemctl reload \
             eventgate`, `eventgate reload --pid PID`)\n"
                .into(),
        );
    };
    let presented = request.headers().get(header::AUTHORIZATION);
    if !token.authorizes(presented.map(|v| v.as_bytes())) {
        refused("unauthorized", peer);
        let mut response = text(
            StatusCode::UNAUTHORIZED,
            "POST /reload needs the token from admin.reload_token_file, as \
             `Authorization: Bearer <token>` (`eventgate reload --token-file FILE`)\n"
                .into(),
        );
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Bearer realm=\"eventgate reload\""),
        );
        return response;
    }
    let Some(reloader) = &observed.reload else {
        return text(
            StatusCode::SERVICE_UNAVAILABLE,
            "this gateway cannot reload its configuration\n".into(),
        );
    };
    tracing::info!("reload requested on the admin endpoint");
    let outcome = reloader.reload().await;
    let code = if outcome.applied {
        StatusCode::OK
    } else {
        StatusCode::UNPROCESSABLE_ENTITY
    };
    text(code, format!("{}\n", outcome.message))
}

/// Counts and logs a refused `POST /reload`.
fn refused(reason: &'static str, peer: std::net::SocketAddr) {
    ::metrics::counter!("eventgate_reload_refused_total", "reason" => reason).increment(1);
    tracing::warn!(%peer, reason, "POST /reload refused");
}

fn text(code: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = code;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
