//! The worker's side of dead letters, kept here so the worker itself only calls two
//! methods: [`Hook::bury_until_recorded`] when it gives up on events (before
//! acknowledging them) and [`Hook::redeliver_if_due`] between batches.
//!
//! Redelivery: entries `eventgate dlq retry` marked as requested are taken (marked
//! queued), sent as one batch through the forwarder's own retry stack, deleted once
//! delivered and made durable by a checkpoint (the worker calls [`Hook::resolve`]),
//! and recorded dead again (attempts added) when they fail again. The
//! worker looks at most every `poll_interval`, and goes on looking at once while it
//! finds full batches, interleaved with the live queue so neither starves.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use prost::Message;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower::BoxError;

use super::health::Health;
use super::meters::LazyCounter;
use super::retry::{self, Attempts, DeliveryStack, is_retryable};
use crate::deadletter::{Failure, Reason, Store};
use crate::errors::chain;
use crate::forward::Batch;

/// Backoff between attempts to record dead letters the store refused: short at
/// first (a locked database), at most this long (a full disk waits for an operator).
const BURY_RETRY_MIN: Duration = Duration::from_millis(100);
const BURY_RETRY_MAX: Duration = Duration::from_secs(10);

/// The dead-letter store as the pipeline uses it.
#[derive(Clone)]
pub struct DeadLetters {
    pub store: Store,
    /// How often a worker looks for entries requested for redelivery.
    pub poll_interval: Duration,
}

/// Dead letters sent again, to be removed from the store once the sink holds them
/// durably.
#[must_use = "redelivered entries stay in the store until resolved"]
pub(super) struct Redelivered {
    ids: Vec<i64>,
    /// Their encoded size.
    pub bytes: usize,
}

/// One forwarder's dead-letter hook. Without a store both methods do nothing: the
/// worker's own error log is then the only trace of a batch given up on.
pub(super) struct Hook {
    forwarder: Arc<str>,
    dead_letters: Option<DeadLetters>,
    batch_events: usize,
    /// When to look for requested entries next; at once after a start, so requests
    /// made while no gateway ran are served.
    due: Instant,
    recorded: ByReason,
    redelivered: LazyCounter,
}

impl Hook {
    pub(super) fn new(
        forwarder: Arc<str>,
        dead_letters: Option<DeadLetters>,
        batch_events: usize,
    ) -> Self {
        Self {
            recorded: ByReason::new("eventgate_dead_letters_total", &forwarder),
            redelivered: LazyCounter::new("eventgate_dead_letter_redelivered_total", &forwarder),
            forwarder,
            dead_letters,
            batch_events: batch_events.max(1),
            due: Instant::now(),
        }
    }

    /// How long the worker may wait for its queue before it should call
    /// [`Hook::redeliver_if_due`]; `None`: as long as it likes.
    pub(super) fn until_due(&self) -> Option<Duration> {
        self.dead_letters
            .as_ref()
            .map(|_| self.due.saturating_duration_since(Instant::now()))
    }

    /// Records the batch's events as dead; true once they are recorded (or there is
    /// no store). False when the store cannot be written (see [`Hook::bury_with`]).
    pub(super) async fn bury(&self, batch: &Batch, error: &BoxError, attempts: Attempts) -> bool {
        self.bury_with(batch, reason_of(error), chain(&**error), attempts)
            .await
    }

    /// [`Hook::bury`] with the reason and error text given (an event set aside after
    /// a panic or a crash, which never produced a forwarder error). If the store
    /// cannot be written (a full disk, typically the same one the sinks are on) the
    /// error is logged and counted and false returned: the worker must then hold the
    /// events rather than acknowledge them, or the spool would forget events that
    /// are nowhere.
    pub(super) async fn bury_with(
        &self,
        batch: &Batch,
        reason: Reason,
        error: String,
        attempts: Attempts,
    ) -> bool {
        let Some(dead_letters) = &self.dead_letters else {
            return true;
        };
        let now = SystemTime::now();
        let failure = Failure {
            reason,
            error: error.clone(),
            attempts: attempts.count,
            first_attempt_at: attempts.first.unwrap_or(now),
            last_attempt_at: attempts.last.unwrap_or(now),
        };
        let events = batch.events().to_vec();
        match dead_letters
            .store
            .record(&self.forwarder, events, failure)
            .await
        {
            Ok(recorded) => {
                self.recorded.get(reason).increment(recorded as u64);
                tracing::info!(
                    forwarder = %self.forwarder,
                    events = recorded,
                    reason = reason.as_str(),
                    attempts = attempts.count,
                    store = %dead_letters.store.path().display(),
                    "events recorded as dead letters"
                );
                true
            }
            Err(write_error) => {
                metrics::counter!("eventgate_dead_letter_write_failures_total").increment(1);
                let (first_seq, last_seq) = batch.seq_range();
                tracing::error!(
                    forwarder = %self.forwarder,
                    first_seq,
                    last_seq,
                    events = batch.len(),
                    reason = reason.as_str(),
                    error = %error,
                    write_error = %chain(&write_error),
                    store = %dead_letters.store.path().display(),
                    "cannot record dead letters; the events are held (not acknowledged) and recording is tried again"
                );
                false
            }
        }
    }

    /// [`Hook::bury_with`] until it succeeds, with backoff; the forwarder reports
    /// itself failing meanwhile. False if `stop` came first: the events were not
    /// acknowledged, so the spool keeps them for the next start.
    pub(super) async fn bury_until_recorded(
        &self,
        batch: &Batch,
        reason: Reason,
        error: String,
        attempts: Attempts,
        health: &Health,
        stop: &CancellationToken,
    ) -> bool {
        let mut tries = 0u32;
        while !self.bury_with(batch, reason, error.clone(), attempts).await {
            tries += 1;
            health.attempt_failed(
                tries,
                format!(
                    "gave up on {} event(s) but cannot record them as dead letters; holding them",
                    batch.len()
                ),
            );
            let delay = BURY_RETRY_MIN
                .saturating_mul(1 << tries.min(8))
                .min(BURY_RETRY_MAX);
            tokio::select! {
                biased;
                () = stop.cancelled() => return false,
                () = tokio::time::sleep(delay) => {}
            }
        }
        true
    }

    /// Between batches: when due, redelivers one batch of this forwarder's requested
    /// entries through `stack`; what was delivered is returned, for the worker to
    /// resolve after its checkpoint. Entries still in flight when `stop` fires, or
    /// never resolved, stay queued; the next start requests them again.
    pub(super) async fn redeliver_if_due(
        &mut self,
        stack: &mut DeliveryStack,
        stop: &CancellationToken,
    ) -> Option<Redelivered> {
        let dead_letters = self.dead_letters.clone()?;
        if Instant::now() < self.due || stop.is_cancelled() {
            return None;
        }
        self.due = Instant::now() + dead_letters.poll_interval;
        let store = &dead_letters.store;
        let entries = match store.take(&self.forwarder, self.batch_events as u64).await {
            Ok(entries) => entries,
            Err(error) => {
                tracing::warn!(forwarder = %self.forwarder, error = %chain(&error), "cannot look for dead letters to redeliver");
                return None;
            }
        };
        let full = entries.len() >= self.batch_events;
        let mut ids = Vec::with_capacity(entries.len());
        let mut events = Vec::with_capacity(entries.len());
        let mut bytes = 0;
        for entry in entries {
            match entry.to_event() {
                Ok(event) => {
                    bytes += event.envelope.encoded_len();
                    ids.push(entry.id);
                    events.push(Arc::new(event));
                }
                Err(error) => {
                    let message = format!("cannot be redelivered: {}", chain(&error));
                    tracing::error!(forwarder = %self.forwarder, entry = entry.id, event_id = %entry.event_id, %message, "damaged dead letter");
                    if let Err(error) = store.release(entry.id, message).await {
                        tracing::warn!(forwarder = %self.forwarder, entry = entry.id, error = %chain(&error), "cannot mark a damaged dead letter");
                    }
                }
            }
        }
        if events.is_empty() {
            return None;
        }
        let batch = Batch::new(events, bytes);
        let outcome = tokio::select! {
            biased;
            outcome = retry::deliver(stack, batch.clone()) => outcome,
            () = stop.cancelled() => return None,
        };
        if full {
            // More may be waiting: look again at the next gap between batches.
            self.due = Instant::now();
        }
        match outcome {
            (Ok(()), attempts) => {
                self.redelivered.increment(batch.len() as u64);
                tracing::info!(forwarder = %self.forwarder, events = batch.len(), attempts = attempts.count, "dead letters redelivered");
                Some(Redelivered {
                    ids,
                    bytes: batch.bytes(),
                })
            }
            (Err(error), attempts) => {
                tracing::warn!(forwarder = %self.forwarder, events = batch.len(), attempts = attempts.count, error = %error, "redelivering dead letters failed; recorded dead again");
                // If even that fails the entries stay queued in the store, and the
                // next start requests them again: not lost either way.
                self.bury(&batch, &error, attempts).await;
                None
            }
        }
    }

    /// Removes redelivered entries from the store: the sink holds them durably.
    pub(super) async fn resolve(&self, redelivered: Redelivered) {
        let Some(dead_letters) = &self.dead_letters else {
            return;
        };
        if let Err(error) = dead_letters.store.delete(redelivered.ids).await {
            // They stay queued and go out again after the next start: a duplicate,
            // never a loss.
            tracing::error!(forwarder = %self.forwarder, error = %chain(&error), "cannot remove redelivered dead letters");
        }
    }
}

/// The dead-letter reason for a batch the retry stack gave up on.
pub(crate) fn reason_of(error: &BoxError) -> Reason {
    if is_retryable(error) {
        Reason::RetriesExhausted
    } else {
        Reason::Permanent
    }
}

/// One counter per dead-letter reason, labelled `reason`.
pub(super) struct ByReason([LazyCounter; 4]);

impl ByReason {
    pub(super) fn new(name: &'static str, forwarder: &str) -> Self {
        let counter = |reason: Reason| LazyCounter::with_reason(name, forwarder, reason.as_str());
        Self([
            counter(Reason::Permanent),
            counter(Reason::RetriesExhausted),
            counter(Reason::Panicked),
            counter(Reason::Crashed),
        ])
    }

    pub(super) fn get(&self, reason: Reason) -> &LazyCounter {
        let index = match reason {
            Reason::Permanent => 0,
            Reason::RetriesExhausted => 1,
            Reason::Panicked => 2,
            Reason::Crashed => 3,
        };
        &self.0[index]
    }
}

#[cfg(test)]
mod tests {
    use metrics::Label;

    use super::*;

    #[test]
    fn a_reason_gets_its_own_series() {
        let by_reason = ByReason::new("eventgate_test_total", "log");
        for reason in [
            Reason::Permanent,
            Reason::RetriesExhausted,
            Reason::Panicked,
            Reason::Crashed,
        ] {
            let labels: Vec<_> = by_reason.get(reason).key().labels().cloned().collect();
            assert_eq!(
                labels,
                [
                    Label::new("forwarder", "log"),
                    Label::new("reason", reason.as_str())
                ]
            );
        }
    }
}
