//! `--to-address`: stored events sent again with containerd's Forward RPC, which
//! keeps the envelope as it is (timestamp, namespace, topic, payload); the receiving
//! exchange gives each one its own new sequence number and id.
//!
//! One Forward at a time by default: calls in flight together on one HTTP/2
//! connection may be taken by the server in any order, and the order is the point of
//! a replay. With `--in-flight N`, up to N calls run together, but only for events
//! about different objects ([`super::order`]): each object's events keep their order.
//!
//! This is a [`Forwarder`], so a batch goes through the pipeline's retry stack like
//! any other. A retried batch must not forward again the events the exchange already
//! took (they would be there twice: an exchange does not deduplicate), so the
//! forwarder remembers which events of the batch were taken.

use std::sync::Mutex;

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use tonic::Code;
use tonic::metadata::MetadataValue;
use tonic::transport::Channel;

use super::order::{self, Slot};
use crate::event::{Event, EventId};
use crate::exchange::NAMESPACE_HEADER;
use crate::forward::{Batch, ForwardError, Forwarder};
use crate::proto::containerd::services::events::v1::ForwardRequest;
use crate::proto::containerd::services::events::v1::events_client::EventsClient;

pub(crate) struct ExchangeTarget {
    address: String,
    client: EventsClient<Channel>,
    /// Forward calls in flight at once.
    in_flight: usize,
    /// The first event of the batch last tried, and which of its events the exchange
    /// took.
    progress: Mutex<Option<(EventId, Vec<bool>)>>,
}

impl ExchangeTarget {
    pub(crate) fn new(address: String, client: EventsClient<Channel>, in_flight: usize) -> Self {
        Self {
            address,
            client,
            in_flight: in_flight.max(1),
            progress: Mutex::new(None),
        }
    }

    /// How many events of `batch`, from its start, the exchange has taken. Events
    /// taken after the first one not taken are not counted (a resumed replay sends
    /// them again).
    pub(crate) fn taken(&self, batch: &Batch) -> usize {
        self.taken_set(batch).iter().take_while(|t| **t).count()
    }

    fn taken_set(&self, batch: &Batch) -> Vec<bool> {
        let events = batch.events();
        let first = events.first().map(|e| e.identity.id);
        match &*self.progress.lock().unwrap_or_else(|e| e.into_inner()) {
            Some((id, taken)) if Some(*id) == first && taken.len() == events.len() => taken.clone(),
            _ => vec![false; events.len()],
        }
    }

    /// Kept after each answer: an attempt cut off by the timeout is not resumed from
    /// the start either.
    fn mark_taken(&self, batch: &Batch, index: usize) {
        let events = batch.events();
        let Some(first) = events.first().map(|e| e.identity.id) else {
            return;
        };
        let mut progress = self.progress.lock().unwrap_or_else(|e| e.into_inner());
        match &mut *progress {
            Some((id, taken)) if *id == first && taken.len() == events.len() => {
                taken[index] = true;
            }
            other => {
                let mut taken = vec![false; events.len()];
                taken[index] = true;
                *other = Some((first, taken));
            }
        }
    }

    async fn forward(&self, event: &Event) -> Result<(), ForwardError> {
        let mut request = tonic::Request::new(ForwardRequest {
            envelope: Some(event.envelope.clone()),
        });
        // Forward reads the namespace from the envelope; containerd's own clients
        // send the header too. A namespace no header can carry is left to the
        // exchange to reject.
        if let Ok(value) = MetadataValue::try_from(event.namespace()) {
            request.metadata_mut().insert(NAMESPACE_HEADER, value);
        }
        match self.client.clone().forward(request).await {
            Ok(_) => Ok(()),
            Err(status) => Err(classify(&self.address, event, status)),
        }
    }
}

/// Codes that say "not now" rather than "not this event": the exchange is
/// restarting, its queues or spool are full, or the call was cut short.
fn is_transient(code: Code) -> bool {
    matches!(
        code,
        Code::Unavailable
            | Code::ResourceExhausted
            | Code::DeadlineExceeded
            | Code::Aborted
            | Code::Cancelled
    )
}

fn classify(address: &str, event: &Event, status: tonic::Status) -> ForwardError {
    let message = format!(
        "{address} answered {:?} to the event seq {} (id {}, namespace {:?}, topic {:?}): {}",
        status.code(),
        event.seq,
        event.identity.id,
        event.namespace(),
        event.topic(),
        status.message()
    );
    let error = match is_transient(status.code()) {
        true => ForwardError::retryable(message),
        false => ForwardError::permanent(message),
    };
    error.with_source(status)
}

impl Forwarder for ExchangeTarget {
    fn send<'a>(&'a self, batch: &'a Batch) -> BoxFuture<'a, Result<(), ForwardError>> {
        Box::pin(async move {
            let events = batch.events();
            let mut slots: Vec<Slot> = self
                .taken_set(batch)
                .iter()
                .map(|t| match t {
                    true => Slot::Done,
                    false => Slot::Waiting,
                })
                .collect();
            // One at a time, every event is a barrier: the store's order exactly, and
            // no payload is decoded.
            let objects: Vec<Option<String>> = match self.in_flight {
                1 => vec![None; events.len()],
                _ => events.iter().map(|e| order::object(e)).collect(),
            };
            let mut calls = FuturesUnordered::new();
            let mut failure = None;
            loop {
                // After a failure only the calls in flight are waited for, so what
                // the exchange took is known before the retry stack decides.
                if failure.is_none() {
                    let room = self.in_flight - calls.len();
                    for i in order::startable(&objects, &slots, room) {
                        slots[i] = Slot::InFlight;
                        let event = &events[i];
                        calls.push(async move { (i, self.forward(event).await) });
                    }
                }
                let Some((i, result)) = calls.next().await else {
                    break;
                };
                match result {
                    Ok(()) => {
                        slots[i] = Slot::Done;
                        self.mark_taken(batch, i);
                    }
                    Err(error) => {
                        slots[i] = Slot::Waiting;
                        failure.get_or_insert(error);
                    }
                }
            }
            match failure {
                Some(error) => Err(error),
                None => Ok(()),
            }
        })
    }
}

#[cfg(test)]
#[path = "exchange_tests.rs"]
mod tests;
