//! How one forwarder's batches reach its sink: through the retry stack (`retry`:
//! Retry, Timeout, `Forwarder::send`), with what cannot be delivered isolated
//! (`isolate`) and given up on into the dead letters (`deadletter`), which it also
//! redelivers when `eventgate dlq retry` asks.

mod isolate;

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::common::Common;
use super::deadletter::{ByReason, Hook, Redelivered};
use super::health::Health;
use super::inflight::Inflight;
use super::meters::{LazyCounter, LazyHistogram};
use super::retry::DeliveryStack;
use crate::forward::{ForwardError, Forwarder};

use isolate::PANIC_BACKOFF_MIN;

/// What one forwarder did by the time the pipeline stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub forwarder: String,
    /// Events the forwarder acknowledged.
    pub delivered: u64,
    /// Events given up on: rejected permanently or out of retry budget.
    pub failed: u64,
    /// Events still queued or in flight when the shutdown deadline passed.
    pub undelivered: u64,
    /// Whether those stay in the spool for the next start (a pipeline with a
    /// backlog) rather than being lost.
    pub kept_in_spool: bool,
}

pub(super) struct Delivery {
    name: Arc<str>,
    stack: DeliveryStack,
    forwarder: Arc<dyn Forwarder>,
    dead_letters: Hook,
    health: Arc<Health>,
    /// What this forwarder is delivering, for the next start if the process dies.
    inflight: Inflight,
    /// The pause before calling the forwarder again after its next panic.
    panic_backoff: Duration,
    /// Cancelled when the shutdown deadline passes: abandon what is left.
    stop: CancellationToken,
    meters: DeliveryMeters,
}

/// The delivery's series, looked up once per forwarder.
struct DeliveryMeters {
    forwarded: LazyCounter,
    delivery_seconds: LazyHistogram,
    split_batches: LazyCounter,
    failed: ByReason,
    panics: LazyCounter,
    poison: ByReason,
}

impl DeliveryMeters {
    fn new(name: &str) -> Self {
        Self {
            forwarded: LazyCounter::new("eventgate_events_forwarded_total", name),
            delivery_seconds: LazyHistogram::new("eventgate_forwarder_delivery_seconds", name),
            split_batches: LazyCounter::new("eventgate_forwarder_split_batches_total", name),
            failed: ByReason::new("eventgate_forwarder_failed_total", name),
            panics: LazyCounter::new("eventgate_forwarder_panics_total", name),
            poison: ByReason::new("eventgate_forwarder_poison_events_total", name),
        }
    }
}

impl Delivery {
    /// The forwarder the stack calls.
    pub(super) fn forwarder(&self) -> Arc<dyn Forwarder> {
        Arc::clone(&self.forwarder)
    }

    /// `stack` calls `forwarder`; the forwarder itself is closed at the end.
    pub(super) fn new(
        common: &Common,
        forwarder: Arc<dyn Forwarder>,
        stack: DeliveryStack,
        dead_letters: Hook,
        inflight: Inflight,
    ) -> Self {
        Self {
            name: Arc::clone(&common.name),
            stack,
            forwarder,
            dead_letters,
            health: Arc::clone(&common.health),
            inflight,
            panic_backoff: PANIC_BACKOFF_MIN,
            stop: common.stop.clone(),
            meters: DeliveryMeters::new(&common.name),
        }
    }

    /// How long the worker may wait for events before it should call
    /// [`Delivery::redeliver_if_due`]; `None`: as long as it likes.
    pub(super) fn until_due(&self) -> Option<Duration> {
        self.dead_letters.until_due()
    }

    /// Between batches: redelivers dead letters requested for it, when due. What
    /// was delivered is resolved ([`Delivery::resolve`]) once a checkpoint covers it.
    pub(super) async fn redeliver_if_due(&mut self) -> Option<Redelivered> {
        self.dead_letters
            .redeliver_if_due(&mut self.stack, &self.stop)
            .await
    }

    /// Removes redelivered dead letters from the store: the sink holds them durably.
    pub(super) async fn resolve(&self, redelivered: Redelivered) {
        self.dead_letters.resolve(redelivered).await;
    }

    /// Closes the forwarder, unless the shutdown deadline passes first.
    pub(super) async fn close(&self) -> Result<(), ForwardError> {
        tokio::select! {
            biased;
            result = self.forwarder.close() => result,
            () = self.stop.cancelled() => Ok(()),
        }
    }
}
