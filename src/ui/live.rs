//! `/ui/api/live?filter=...`: new events as Server-Sent Events, straight from the
//! exchange. The page subscribes as a Subscribe client does (its filter matched off
//! the publishing path, within the subscriber limits), and its stream is bounded: a
//! page that does not read what it is sent is disconnected and counted, so it never
//! holds back the gateway or grows its memory.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use http::{Response, header};
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use tokio::sync::OwnedSemaphorePermit;
use tokio::sync::mpsc::{self, error::TrySendError};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;

use crate::exchange::{Subscription, SubscriptionEnd};

use super::api::regex_memory;
use super::params::{Params, parse_filters};
use super::{Body, Ui, UiError};

/// Messages waiting to be written to one page; a page this far behind is dropped.
const PAGE_QUEUE: usize = 256;
/// A comment this often keeps proxies and the browser from closing an idle stream.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

pub(super) async fn live(
    ui: &Ui,
    query: &str,
    connection: CancellationToken,
) -> Result<Response<Body>, UiError> {
    let params = Params::parse(query);
    let filters = params.all("filter");
    // A live page is a subscription: it is held to the limits a Subscribe client is.
    crate::exchange::limits::check_filters(ui.exchange.limits(), &filters).map_err(|status| {
        UiError::BadParam {
            param: "filter",
            message: status.message().to_owned(),
        }
    })?;
    let filter = parse_filters(&filters, regex_memory(ui))?;
    let permit = Arc::clone(&ui.live).try_acquire_owned().map_err(|_| {
        UiError::Unavailable(format!(
            "{} live pages are open, as many as /ui serves at once; close one or try again later",
            super::MAX_LIVE
        ))
    })?;
    let subscription = ui
        .exchange
        .subscribe(filter)
        .map_err(|e| UiError::Unavailable(e.to_string()))?;
    let (tx, rx) = mpsc::channel(PAGE_QUEUE);
    tokio::spawn(pump(subscription, tx, permit, connection));
    let frames = ReceiverStream::new(rx).map(|data: Bytes| Ok::<_, Infallible>(Frame::data(data)));
    let mut response = Response::new(BodyExt::boxed(StreamBody::new(frames)));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/event-stream"),
    );
    // Reverse proxies that buffer responses would hold events back.
    headers.insert("x-accel-buffering", header::HeaderValue::from_static("no"));
    Ok(response)
}

/// Moves events from the subscription to the page until either end goes away. A
/// page whose queue is full is cut off: its connection is closed (`connection`), not
/// merely its response ended, since a page that reads nothing would never see the end.
async fn pump(
    mut subscription: Subscription,
    tx: mpsc::Sender<Bytes>,
    _permit: OwnedSemaphorePermit,
    connection: CancellationToken,
) {
    let page = subscription.id();
    // Sent at once, so the page learns the stream is open before the first event.
    let _ = tx.try_send(Bytes::from_static(b": connected\n\n"));
    let mut keep_alive = tokio::time::interval(KEEP_ALIVE);
    keep_alive.tick().await;
    loop {
        let message = tokio::select! {
            () = tx.closed() => break,
            _ = keep_alive.tick() => Bytes::from_static(b": keep-alive\n\n"),
            next = subscription.next() => match next {
                Some(Ok(event)) => {
                    let mut data = b"data: ".to_vec();
                    crate::render::write_event_json(&mut data, &event);
                    data.extend_from_slice(b"\n\n");
                    Bytes::from(data)
                }
                Some(Err(end)) => {
                    if matches!(end, SubscriptionEnd::CutOff { .. } | SubscriptionEnd::FiltersTooSlow { .. }) {
                        dropped(page, &end.to_string(), &connection);
                    }
                    break;
                }
                None => break,
            },
        };
        match tx.try_send(message) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                dropped(
                    page,
                    &format!("{PAGE_QUEUE} messages were waiting to be sent to it"),
                    &connection,
                );
                break;
            }
            Err(TrySendError::Closed(_)) => break,
        }
    }
}

fn dropped(page: u64, why: &str, connection: &CancellationToken) {
    metrics::counter!("eventgate_ui_live_dropped_total").increment(1);
    tracing::info!(
        subscriber = page,
        why,
        "a live /ui page did not keep up and was disconnected"
    );
    connection.cancel();
}
