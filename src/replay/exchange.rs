//! `--to-address`: stored events sent again with containerd's Forward RPC, which
//! keeps the envelope as it is (timestamp, namespace, topic, payload); the receiving
//! exchange gives each one its own new sequence number and id.
//!
//! One Forward at a time: calls in flight together on one HTTP/2 connection may be
//! taken by the server in any order, and the order is the point of a replay.
//!
//! This is a [`Forwarder`], so a batch goes through the pipeline's retry stack like
//! any other. A retried batch must not forward again the events the exchange already
//! took (they would be there twice: an exchange does not deduplicate), so the
//! forwarder remembers how far into the batch it got.

use std::sync::Mutex;

use futures::future::BoxFuture;
use tonic::Code;
use tonic::metadata::MetadataValue;
use tonic::transport::Channel;

use crate::event::{Event, EventId};
use crate::exchange::NAMESPACE_HEADER;
use crate::forward::{Batch, ForwardError, Forwarder};
use crate::proto::containerd::services::events::v1::ForwardRequest;
use crate::proto::containerd::services::events::v1::events_client::EventsClient;

pub struct ExchangeTarget {
    address: String,
    client: EventsClient<Channel>,
    /// The first event of the batch last tried, and how many of its events the
    /// exchange took.
    progress: Mutex<Option<(EventId, usize)>>,
}

impl ExchangeTarget {
    pub fn new(address: String, client: EventsClient<Channel>) -> Self {
        Self {
            address,
            client,
            progress: Mutex::new(None),
        }
    }

    /// How many events of `batch`, from its start, the exchange has taken.
    pub fn taken(&self, batch: &Batch) -> usize {
        self.resume_at(batch)
    }

    fn resume_at(&self, batch: &Batch) -> usize {
        let first = batch.events().first().map(|e| e.id);
        match *self.progress.lock().unwrap_or_else(|e| e.into_inner()) {
            Some((id, taken)) if Some(id) == first => taken,
            _ => 0,
        }
    }

    fn record(&self, batch: &Batch, taken: usize) {
        if let Some(first) = batch.events().first() {
            *self.progress.lock().unwrap_or_else(|e| e.into_inner()) = Some((first.id, taken));
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
        event.id,
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
            let start = self.resume_at(batch);
            for (i, event) in batch.events().iter().enumerate().skip(start) {
                if let Err(error) = self.forward(event).await {
                    self.record(batch, i);
                    return Err(error);
                }
                // Kept after each event: an attempt cut off by the timeout is not
                // resumed from the start either.
                self.record(batch, i + 1);
            }
            Ok(())
        })
    }
}
