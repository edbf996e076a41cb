//! Taking a place in the order without waiting for the disk: [`Exchange::append`]
//! sequences an event, appends it to the spool and hands it to subscribers and
//! forwarders, and gives back a [`Durable`] to await separately. A caller that has
//! to keep its own order (an upstream's stream) appends the next event while earlier
//! ones are still being synced, and they share the spool's fdatasyncs as concurrent
//! publishers do; Publish and Forward wait for it ([`Appended::acknowledged`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};

use prost::Message;

use super::{AcceptError, Exchange, Incoming, rejected};
use crate::event::{Event, EventId, Source};
use crate::spool::Ticket;

/// An event that has its place in the gateway's order: numbered, in the spool's
/// buffer, offered to every subscriber and forwarder. It is not acknowledged until
/// `durable` resolves.
#[derive(Debug)]
#[must_use = "an appended event is acknowledged only once `durable` resolves"]
pub struct Appended {
    pub event: Arc<Event>,
    pub durable: Durable,
}

/// Resolves once the appended event is durable per `spool.fsync` (at once without a
/// spool), and counts it as accepted then. Cancel-safe: polling it again after a
/// `select!` dropped the wait picks it up where it was. Dropping it undoes nothing:
/// the event keeps its place and is written all the same, nobody hears when.
#[must_use = "the event is not durable until this resolves"]
pub struct Durable {
    ticket: Option<Ticket>,
    accepted: Option<metrics::Counter>,
}

impl Future for Durable {
    type Output = Result<(), AcceptError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let Some(ticket) = &mut self.ticket {
            let synced = std::task::ready!(Pin::new(ticket).poll(cx));
            self.ticket = None;
            if let Err(error) = synced {
                self.accepted = None;
                return Poll::Ready(Err(rejected(AcceptError::Spool(error))));
            }
        }
        // Counted once, however often a resolved wait is polled.
        if let Some(accepted) = self.accepted.take() {
            accepted.increment(1);
        }
        Poll::Ready(Ok(()))
    }
}

// By hand: `metrics::Counter` has no `Debug`.
impl std::fmt::Debug for Durable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Durable")
            .field("ticket", &self.ticket)
            .finish_non_exhaustive()
    }
}

impl Appended {
    /// Waits until the event is durable, then gives it back: the acknowledgement a
    /// Publish or Forward returns.
    pub async fn acknowledged(self) -> Result<Arc<Event>, AcceptError> {
        self.durable.await?;
        Ok(self.event)
    }
}

impl Exchange {
    /// The one way in: `incoming` is checked as the way it came requires (Publish and
    /// Forward as containerd checks them), then takes its place in the order and is
    /// handed to every subscriber and forwarder whose filter matches, without
    /// waiting for the disk: await the returned [`Durable`] (or
    /// [`Appended::acknowledged`]) before acknowledging the event to anyone.
    /// Everything that can refuse the event (closed, a full `block` queue, a full
    /// spool, a disk below `spool.min_free`, a spool that cannot append) refuses it
    /// here, before it is numbered, so a caller that retries keeps its own order.
    /// Only a failed write or sync comes later, from `Durable`.
    pub async fn append(&self, incoming: Incoming) -> Result<Appended, AcceptError> {
        let admitted = incoming.admit(self)?;
        let event = Event::from_identity(0, admitted.identity, admitted.envelope)
            .with_kafka_position(admitted.kafka);
        self.append_event(event).await
    }

    /// `event` (whose seq is not assigned yet, nor its id unless it was accepted by
    /// another gateway first) takes its place.
    ///
    /// First, outside the lock, refuses if free disk space is below the spool's
    /// reserve (`spool.min_free`), makes room in the spool (waiting, or dropping the
    /// oldest records, per its `full` policy) and waits until every `block` forwarder
    /// queue the event is routed to has room (refusing it with RESOURCE_EXHAUSTED
    /// after the respective timeout).
    async fn append_event(&self, mut event: Event) -> Result<Appended, AcceptError> {
        let inner = &self.inner;
        if inner.closed.load(Ordering::Acquire) {
            return Err(AcceptError::Closed);
        }
        // Before admission: route filters on `node` decide which `block` queues
        // the event waits for.
        // An event taken in from another gateway whose node is unknown stays so:
        // it was not captured here.
        if event.identity.node.is_none() && !matches!(event.identity.source, Source::Kafka(_)) {
            event.identity.node = Some(Arc::clone(&inner.node));
        }
        let mut dropped = Vec::new();
        if let Some(spool) = &inner.spool {
            spool
                .check_space()
                .map_err(|low| rejected(AcceptError::DiskLow(low)))?;
            dropped = spool
                .reserve(
                    event.envelope.encoded_len()
                        + event
                            .identity
                            .workload
                            .as_ref()
                            .map_or(0, |w| w.encoded_len())
                        + event.identity.node.as_ref().map_or(0, |n| n.len()),
                )
                .await
                .map_err(|full| rejected(AcceptError::SpoolFull(full)))?;
        }
        if let Err(full) = inner.router.admit(&event).await {
            return Err(rejected(AcceptError::QueueFull(full)));
        }
        let (event, ticket) = {
            let mut state = self.lock();
            if inner.closed.load(Ordering::Acquire) {
                return Err(AcceptError::Closed);
            }
            // Sequence and id are taken together under the lock, so id order (UUIDv7
            // is time-ordered) follows sequence order for this gateway's own events,
            // and the spool holds events in the order everyone sees them.
            event.seq = state.next_seq;
            // An event taken in from another gateway keeps the id it was given there:
            // it is the same event, and stores drop repeats by id.
            if event.identity.id == EventId::unassigned() {
                event.identity.id = EventId::generate();
            }
            let ticket = match &inner.spool {
                Some(spool) => Some(
                    spool
                        .append(&event)
                        .map_err(|e| rejected(AcceptError::Spool(e)))?,
                ),
                None => None,
            };
            state.next_seq += 1;
            let event = Arc::new(event);
            inner.counters.received[event.identity.source.index()].increment(1);
            inner.router.route(&event);
            self.fan_out(&mut state, &event);
            (event, ticket)
        };
        if !dropped.is_empty() {
            self.record_dropped(dropped);
        }
        let accepted = inner.counters.accepted[event.identity.source.index()].clone();
        Ok(Appended {
            event,
            durable: Durable {
                ticket,
                accepted: Some(accepted),
            },
        })
    }
}
