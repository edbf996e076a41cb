//! The history UI: `/ui` on the admin listener (timeline, search, live, fleet) and the
//! same timeline picture as one self-contained file (`eventgate timeline --out`).
//! Read-only: every read goes through its own read-only connection to the audit store
//! ([`crate::query::Reader`]), with a deadline and a row cap.
//!
//! The server side: [`serve`] routes `/ui...` requests (GET only) to the embedded page
//! ([`assets`]), the store's endpoints ([`api`], [`export`], [`fleet`], [`timeline`])
//! and the live stream from the exchange ([`live`]). Every answer carries the same security headers
//! (a strict Content-Security-Policy among them): event content is hostile input.

mod api;
mod assets;
pub(crate) mod document;
mod export;
mod fleet;
pub(crate) mod gaps;
mod live;
mod params;
pub(crate) mod picture;
mod reads;
pub(crate) mod svg;
mod timeline;

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use thiserror::Error;
use tokio::sync::Semaphore;

use crate::exchange::Exchange;
use crate::query::StoreSpec;

/// What a `/ui` response's body is: whole, or streamed (live events, exports).
pub(crate) type Body = BoxBody<Bytes, Infallible>;

/// The policy every `/ui` response carries: only the page's own script and styles,
/// no inline code, no framing, fetches to this origin only.
pub(crate) const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; \
     frame-ancestors 'none'";

/// Store reads running at once; more wait briefly (`reads::QUEUE_WAIT`), then get 503.
const MAX_READS: usize = 2;
/// Live pages open at once; more get 503.
const MAX_LIVE: usize = 16;

/// What `/ui` serves from: the audit store it reads and the exchange live pages
/// subscribe to.
pub(crate) struct Ui {
    /// `None`: no `sqlite` forwarder (nor a `postgres` one named by
    /// `admin.ui_store`); the store's endpoints answer 503.
    store: Option<StoreSpec>,
    exchange: Exchange,
    reads: Arc<Semaphore>,
    /// Where reads run; `None` when no thread could be started (reads answer 503).
    threads: Option<reads::threads::ReadThreads>,
    live: Arc<Semaphore>,
}

impl Ui {
    pub(crate) fn new(store: Option<StoreSpec>, exchange: Exchange) -> Self {
        Self {
            store,
            exchange,
            reads: Arc::new(Semaphore::new(MAX_READS)),
            threads: reads::threads::ReadThreads::start(MAX_READS),
            live: Arc::new(Semaphore::new(MAX_LIVE)),
        }
    }
}

/// Why a `/ui` request was not answered with what it asked for. Answered as JSON
/// `{"error": ..., "param": ...}`.
#[derive(Debug, Error)]
pub(crate) enum UiError {
    /// A query parameter (`param`) is wrong; the message says how.
    #[error("{message}")]
    BadParam {
        param: &'static str,
        message: String,
    },
    #[error(
        "no audit store to read: /ui reads the file of a `sqlite` forwarder; add a \
         [[forwarder]] with kind = \"sqlite\" (or name one, or a `postgres` forwarder, \
         with admin.ui_store)"
    )]
    NoStore,
    #[error("{0}")]
    Unavailable(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Internal(String),
}

impl UiError {
    fn code(&self) -> StatusCode {
        match self {
            UiError::BadParam { .. } => StatusCode::BAD_REQUEST,
            UiError::NoStore | UiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            UiError::NotFound(_) => StatusCode::NOT_FOUND,
            UiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    pub(crate) fn response(&self) -> Response<Body> {
        let param = match self {
            UiError::BadParam { param, .. } => Some(*param),
            _ => None,
        };
        let body = serde_json::json!({ "error": self.to_string(), "param": param });
        let mut response = json(body.to_string());
        *response.status_mut() = self.code();
        response
    }
}

/// Answers a request for `/ui` or a path under it. `connection` closes the request's
/// connection when cancelled (a live page that does not keep up).
pub(crate) async fn serve<B>(
    ui: Arc<Ui>,
    request: &Request<B>,
    connection: tokio_util::sync::CancellationToken,
) -> Response<Body> {
    let mut response = route(ui, request, connection).await;
    secure(response.headers_mut());
    response
}

async fn route<B>(
    ui: Arc<Ui>,
    request: &Request<B>,
    connection: tokio_util::sync::CancellationToken,
) -> Response<Body> {
    let path = request.uri().path();
    if request.method() != Method::GET {
        let mut response = UiError::BadParam {
            param: "method",
            message: format!("{path} only answers GET"),
        }
        .response();
        *response.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
        response
            .headers_mut()
            .insert(header::ALLOW, header::HeaderValue::from_static("GET"));
        return response;
    }
    let query = request.uri().query().unwrap_or("");
    let result = match path {
        "/ui" | "/ui/" | "/ui/index.html" => Ok(assets::index()),
        "/ui/app.js" => Ok(assets::script()),
        "/ui/app.css" => Ok(assets::styles()),
        "/ui/api/events" => api::events(&ui, query).await,
        "/ui/api/export" => export::export(&ui, query).await,
        "/ui/api/fleet" => fleet::fleet(&ui, query).await,
        "/ui/api/live" => {
            let last = request
                .headers()
                .get("last-event-id")
                .and_then(|v| v.to_str().ok());
            live::live(&ui, query, last, connection).await
        }
        "/ui/api/timeline.svg" => timeline::svg(&ui, query).await,
        "/ui/api/timeline.html" => timeline::html(&ui, query).await,
        _ => match path.strip_prefix("/ui/api/event/") {
            Some(row) => api::event(&ui, row).await,
            None => Err(UiError::NotFound(format!(
                "{path} is not a page of /ui; the history page is /ui"
            ))),
        },
    };
    result.unwrap_or_else(|error| error.response())
}

/// The headers every `/ui` answer carries (see docs/security.md).
fn secure(headers: &mut http::HeaderMap) {
    use header::HeaderValue;
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers
        .entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
}

/// A whole body with its content type.
pub(crate) fn whole(content_type: &'static str, body: impl Into<Bytes>) -> Response<Body> {
    let mut response = Response::new(Full::new(body.into()).boxed());
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    response
}

pub(crate) fn json(body: String) -> Response<Body> {
    whole("application/json", body)
}
