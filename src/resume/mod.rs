//! `eventgate.services.events.v1.Events/Subscribe`: containerd's Subscribe that can
//! resume. A client names the last seq it received (or a time); it gets every event
//! it missed from the spool or the audit store, then the live events, without a gap
//! or a repeat (see [`catchup`] for how the hand-over is exact). Served next to
//! containerd's Events service, on the same listeners and connection limits.
//!
//! History comes from the spool while it still holds the position, else from the
//! audit store of the first `sqlite` forwarder without route filters. Without such
//! a store, only what the spool holds can be resumed. Seqs continue across
//! restarts because the exchange continues the spool's sequence; an exchange without
//! a spool (library use) has no history and does not serve this service.

mod catchup;
mod history;
pub(crate) mod metric_table;
mod metrics;
pub(crate) mod position;
pub(crate) mod record;

use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::SystemTime;

use futures::Stream;
use tokio::sync::mpsc;
use tonic::{Request, Response, Status};

use crate::exchange::{Exchange, compile_filters};
use crate::pipeline::ForwarderSpec;
use crate::proto::eventgate::services::events::v1::events_server::{Events, EventsServer};
use crate::proto::eventgate::services::events::v1::{Record, SubscribeRequest, subscribe_request};
use crate::spool::Spool;
use history::History;
use metrics::Metrics;
pub(crate) use metrics::active;
use position::{Kept, Start};

/// Records a resumer's task may have ready ahead of the client.
const AHEAD: usize = 64;

#[derive(Clone)]
pub(crate) struct ResumeService {
    exchange: Exchange,
    spool: Spool,
    store: Option<PathBuf>,
    metrics: Arc<Metrics>,
    /// Resumers still reading history: not yet the exchange's subscribers, but they
    /// count against `exchange.limits.max_subscribers` all the same, so that many
    /// catch-ups cannot start at once past the limit.
    chasing: Arc<AtomicUsize>,
}

/// One resumer counted as reading history until it goes live or ends.
pub(crate) struct Chasing(Arc<AtomicUsize>);

impl Drop for Chasing {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl ResumeService {
    /// `None` when the exchange keeps no spool: there is no history to resume from.
    pub(crate) fn new(exchange: Exchange, store: Option<PathBuf>) -> Option<Self> {
        let spool = exchange.spool()?.clone();
        Some(Self {
            exchange,
            spool,
            store,
            metrics: Arc::new(Metrics::new()),
            chasing: Arc::default(),
        })
    }

    pub(crate) fn into_server(self) -> EventsServer<Self> {
        EventsServer::new(self)
    }

    async fn plan(
        &self,
        request: SubscribeRequest,
    ) -> Result<(History, catchup::Plan, Chasing), Status> {
        let (start, until) = bounds(&request)?;
        let filter = compile_filters(&self.exchange, request.filters).await?;
        let limit = self.exchange.limits().max_subscribers;
        let chasing = Chasing(Arc::clone(&self.chasing));
        let others = self.chasing.fetch_add(1, Ordering::Relaxed);
        if self.exchange.subscriber_count() + others >= limit {
            return Err(crate::exchange::SubscribeError::TooMany { limit }.status());
        }
        let mut history = History::new(self.spool.clone(), self.store.clone());
        let from = match start {
            Start::Live => self.exchange.next_seq(),
            _ => {
                let oldest = history.oldest().await.map_err(unavailable)?;
                let first_since = match start {
                    Start::Since(since) => history.first_since(since).await.map_err(unavailable)?,
                    _ => None,
                };
                let kept = Kept {
                    oldest_seq: oldest.seq,
                    oldest_time: oldest.time,
                    next_seq: self.exchange.next_seq(),
                    now: SystemTime::now(),
                };
                position::resolve(start, &kept, |_| first_since).map_err(|e| {
                    Metrics::refused(e.reason());
                    e.status()
                })?
            }
        };
        let since = match start {
            Start::Since(since) => Some(since),
            _ => None,
        };
        Ok((
            history,
            catchup::Plan {
                filter,
                from,
                since,
                until,
            },
            chasing,
        ))
    }
}

/// Where a request starts and where it stops, refusing times that are not times and
/// an `until` before `since`.
pub(crate) fn bounds(request: &SubscribeRequest) -> Result<(Start, Option<SystemTime>), Status> {
    let start = match request.start {
        None => Start::Live,
        Some(subscribe_request::Start::AfterSeq(after)) => Start::After(after),
        Some(subscribe_request::Start::Since(since)) => Start::Since(
            SystemTime::try_from(since)
                .map_err(|_| refuse("since is not a valid time: invalid argument"))?,
        ),
    };
    let until = match request.until {
        None => None,
        Some(until) => Some(
            SystemTime::try_from(until)
                .map_err(|_| refuse("until is not a valid time: invalid argument"))?,
        ),
    };
    if let (Start::Since(since), Some(until)) = (start, until)
        && until < since
    {
        return Err(refuse("until is before since: invalid argument"));
    }
    Ok((start, until))
}

fn refuse(message: &'static str) -> Status {
    Metrics::refused("invalid_argument");
    Status::invalid_argument(message)
}

fn unavailable(error: history::HistoryError) -> Status {
    Status::unavailable(format!(
        "cannot read what eventgate keeps: {}",
        crate::errors::chain(&error)
    ))
}

/// The audit store a resumer can read: the first `sqlite` forwarder's, if it takes
/// every event (a store with route filters lacks what they skipped).
pub(crate) fn store_path(
    forwarders: &[ForwarderSpec],
    data_dir: &std::path::Path,
) -> Option<PathBuf> {
    let spec = forwarders
        .iter()
        .find(|f| f.kind == "sqlite" && f.filters.is_empty())?;
    let path = spec
        .options
        .get("path")
        .and_then(|p| p.as_str())
        .map_or_else(|| PathBuf::from("audit.db"), PathBuf::from);
    Some(if path.is_absolute() {
        path
    } else {
        data_dir.join(path)
    })
}

type RecordStream = Pin<Box<dyn Stream<Item = Result<Record, Status>> + Send>>;

#[tonic::async_trait]
impl Events for ResumeService {
    type SubscribeStream = RecordStream;

    async fn subscribe(
        &self,
        request: Request<SubscribeRequest>,
    ) -> Result<Response<RecordStream>, Status> {
        let (history, plan, chasing) = self.plan(request.into_inner()).await?;
        let (tx, rx) = mpsc::channel(AHEAD);
        let exchange = self.exchange.clone();
        let metrics = Arc::clone(&self.metrics);
        tracing::debug!(from = plan.from, "resumer subscribed");
        let active = metrics::Active::open();
        tokio::spawn(async move {
            let result = catchup::run(
                exchange,
                history,
                plan,
                chasing,
                tx.clone(),
                Arc::clone(&metrics),
            )
            .await;
            drop(active);
            if let Err(status) = result {
                let _ = tx.send(Err(status)).await;
            }
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }
}

#[cfg(test)]
mod tests;
