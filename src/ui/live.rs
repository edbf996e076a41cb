//! `/ui/api/live?filter=...`: new events as Server-Sent Events, straight from the
//! exchange. The page subscribes as a Subscribe client does (its filter matched off
//! the publishing path, within the subscriber limits), and its stream is bounded: a
//! page that does not read what it is sent is disconnected and counted, so it never
//! holds back the gateway or grows its memory.
//!
//! Each event goes out with its seq as the SSE `id`. A browser whose stream broke
//! (a network blip, a gateway restart) reconnects by itself and sends the last one
//! as `Last-Event-ID`; the page is then first sent what it missed, read back from the
//! spool with its filter, up to where its new subscription starts, so its list has
//! no hole. What the spool no longer holds is announced as a `missed` event naming
//! the seqs, for the page to point at search.

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

use crate::event::Event;
use crate::exchange::{Subscription, SubscriptionEnd};
use crate::filter::Filter;
use crate::spool::Spool;

use super::api::regex_memory;
use super::params::{Params, parse_filters};
use super::{Body, Ui, UiError};

/// Messages waiting to be written to one page; a page this far behind is dropped.
const PAGE_QUEUE: usize = 256;
/// A comment this often keeps proxies and the browser from closing an idle stream.
const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// Events a reconnecting page is sent back at most; older ones are announced missed.
const MAX_CATCH_UP: u64 = 10_000;
/// How long catching up may wait for the spool, or for the page to take a message.
const CATCH_UP_WAIT: Duration = Duration::from_secs(5);

pub(super) async fn live(
    ui: &Ui,
    query: &str,
    last_event_id: Option<&str>,
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
    let kept = filter.clone();
    let subscription = ui
        .exchange
        .subscribe(filter)
        .map_err(|e| UiError::Unavailable(e.to_string()))?;
    // Read after subscribing: everything before `to` that the subscription may not
    // deliver is in the spool, and what both deliver is sent once (by seq).
    let catch_up = last_event_id
        .and_then(|id| id.trim().parse::<u64>().ok())
        .and_then(|last| {
            let spool = ui.exchange.spool()?.clone();
            let to = ui.exchange.next_seq();
            let from = last.checked_add(1)?;
            (from < to).then_some(CatchUp {
                spool,
                filter: kept,
                from,
                to,
            })
        });
    let (tx, rx) = mpsc::channel(PAGE_QUEUE);
    tokio::spawn(pump(subscription, catch_up, tx, permit, connection));
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
    catch_up: Option<CatchUp>,
    tx: mpsc::Sender<Bytes>,
    _permit: OwnedSemaphorePermit,
    connection: CancellationToken,
) {
    let page = subscription.id();
    // Sent at once, so the page learns the stream is open before the first event.
    let _ = tx.try_send(Bytes::from_static(b": connected\n\n"));
    let mut sent_through = 0;
    if let Some(catch_up) = catch_up {
        match catch_up.send(&tx).await {
            Ok(through) => sent_through = through,
            Err(Gone::Slow) => {
                dropped(page, "it did not take what it had missed", &connection);
                return;
            }
            Err(Gone::Closed) => return,
        }
    }
    let mut keep_alive = tokio::time::interval(KEEP_ALIVE);
    keep_alive.tick().await;
    loop {
        let message = tokio::select! {
            () = tx.closed() => break,
            _ = keep_alive.tick() => Bytes::from_static(b": keep-alive\n\n"),
            next = subscription.next() => match next {
                Some(Ok(event)) if event.seq <= sent_through => continue,
                Some(Ok(event)) => event_message(&event),
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

/// One event as an SSE message, its seq as the id the browser sends back.
fn event_message(event: &Event) -> Bytes {
    let mut data = format!("id: {}\ndata: ", event.seq).into_bytes();
    crate::render::write_event_json(&mut data, event);
    data.extend_from_slice(b"\n\n");
    Bytes::from(data)
}

/// Seqs `from..=to` that a reconnected page cannot be sent (no longer in the spool,
/// or beyond what it is sent back), as a `missed` event.
fn missed_message(from: u64, to: u64, why: &str) -> Bytes {
    let body = serde_json::json!({ "from_seq": from, "to_seq": to, "why": why });
    Bytes::from(format!("event: missed\ndata: {body}\n\n"))
}

/// What a reconnected page missed: seqs `from..to` through its filter.
struct CatchUp {
    spool: Spool,
    filter: Filter,
    from: u64,
    /// Where the new subscription starts at the latest.
    to: u64,
}

impl CatchUp {
    /// Sends the missed events; returns the last seq covered.
    async fn send(self, tx: &mpsc::Sender<Bytes>) -> Result<u64, Gone> {
        let through = self.to - 1;
        let mut from = self.from;
        let first_kept = self.spool.stats().first_seq.max(from);
        if first_kept > from {
            let last = first_kept.min(self.to) - 1;
            give(
                tx,
                missed_message(from, last, "no longer in the spool; search the store"),
            )
            .await?;
            from = last + 1;
        }
        if self.to.saturating_sub(from) > MAX_CATCH_UP {
            let last = self.to - MAX_CATCH_UP - 1;
            let why = format!("more than {MAX_CATCH_UP} events were missed; search the store");
            give(tx, missed_message(from, last, &why)).await?;
            from = last + 1;
        }
        let mut reader = self.spool.reader(from);
        while from < self.to {
            let read = tokio::time::timeout(CATCH_UP_WAIT, reader.next(256, 1 << 20)).await;
            let Ok(Ok(batch)) = read else {
                let why = "the spool could not be read back; search the store";
                give(tx, missed_message(from, through, why)).await?;
                break;
            };
            if let Some(gap) = batch.gap {
                let why = "no longer in the spool; search the store";
                give(tx, missed_message(gap.first, gap.last.min(through), why)).await?;
            }
            for event in batch.events.iter().filter(|e| e.seq < self.to) {
                if self.filter.matches(&event.record_fields()) {
                    give(tx, event_message(event)).await?;
                }
            }
            from = batch.next_seq;
        }
        Ok(through)
    }
}

/// Why a page is no longer sent anything.
enum Gone {
    /// Its connection closed.
    Closed,
    /// It did not take a message within `CATCH_UP_WAIT`.
    Slow,
}

/// Queues `message` for the page, waiting for room a bounded time.
async fn give(tx: &mpsc::Sender<Bytes>, message: Bytes) -> Result<(), Gone> {
    match tokio::time::timeout(CATCH_UP_WAIT, tx.send(message)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(_)) => Err(Gone::Closed),
        Err(_) => Err(Gone::Slow),
    }
}
