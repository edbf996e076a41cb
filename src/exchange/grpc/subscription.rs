//! One subscriber's end of the exchange.

use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};

use futures::Stream;
use thiserror::Error;
use tokio::sync::mpsc;

use crate::event::Event;
use crate::exchange::Inner;
use crate::exchange::matching::{CutOff, CutOffReason};

/// Why a subscription stopped delivering. Reported once, after the events that were
/// already queued for it.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum SubscriptionEnd {
    #[error(
        "subscriber fell more than {capacity} events behind and was cut off; \
         read faster, subscribe with narrower filters, or raise exchange.subscriber_queue"
    )]
    CutOff { capacity: usize },
    #[error(
        "subscriber's filters could not keep up: {capacity} events were waiting to be \
         matched against them; subscribe with fewer or simpler filters (regular \
         expressions cost the most), or raise exchange.subscriber_queue"
    )]
    FiltersTooSlow { capacity: usize },
    #[error("eventgate is shutting down")]
    Closed,
}

impl SubscriptionEnd {
    pub fn code(&self) -> tonic::Code {
        match self {
            SubscriptionEnd::CutOff { .. } | SubscriptionEnd::FiltersTooSlow { .. } => {
                tonic::Code::ResourceExhausted
            }
            SubscriptionEnd::Closed => tonic::Code::Unavailable,
        }
    }
}

/// A stream of the events that matched the subscriber's filter, in exchange order,
/// ending with one `Err` that says why it ended. Dropping it unsubscribes at once.
pub struct Subscription {
    id: u64,
    rx: mpsc::Receiver<Arc<Event>>,
    cut_off: Arc<CutOff>,
    capacity: usize,
    exchange: Weak<Inner>,
    ended: bool,
    /// Set once the stream has yielded to the scheduler after waking with work; see
    /// `poll_next`.
    primed: bool,
}

impl Subscription {
    pub(in crate::exchange) fn new(
        id: u64,
        rx: mpsc::Receiver<Arc<Event>>,
        cut_off: Arc<CutOff>,
        capacity: usize,
        exchange: Weak<Inner>,
    ) -> Self {
        Self {
            id,
            rx,
            cut_off,
            capacity,
            exchange,
            ended: false,
            primed: false,
        }
    }

    pub fn id(&self) -> u64 {
        self.id
    }
}

impl Stream for Subscription {
    type Item = Result<Arc<Event>, SubscriptionEnd>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.ended {
            return Poll::Ready(None);
        }
        // Write coalescing. tonic encodes every event the stream has ready into one
        // HTTP/2 write and flushes when it sees Pending. Waking with work, the stream
        // first yields to the scheduler once, so publishers that are already runnable
        // add their events and they leave in one write instead of one write (and one
        // syscall) each. Idle, this costs a single extra scheduler pass.
        if !self.primed && !self.rx.is_empty() {
            self.primed = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(event)) => Poll::Ready(Some(Ok(event))),
            Poll::Ready(None) => {
                self.ended = true;
                let capacity = self.capacity;
                let end = match self.cut_off.get() {
                    Some(CutOffReason::SlowReader) => SubscriptionEnd::CutOff { capacity },
                    Some(CutOffReason::SlowFilters) => SubscriptionEnd::FiltersTooSlow { capacity },
                    None => SubscriptionEnd::Closed,
                };
                Poll::Ready(Some(Err(end)))
            }
            Poll::Pending => {
                self.primed = false;
                Poll::Pending
            }
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if let Some(exchange) = self.exchange.upgrade() {
            exchange.remove(self.id);
        }
        tracing::debug!(subscriber = self.id, "subscriber removed");
    }
}
