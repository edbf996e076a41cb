//! One forwarder's worker: takes batches off its queue and pushes each through the
//! delivery stack, one at a time, so order holds and a failed batch is retried
//! before anything behind it.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::deadletter::Hook;
use super::queue::Queue;
use super::retry::{self, DeliveryStack, is_retryable};
use super::settings::BatchSettings;
use crate::event::Event;
use crate::forward::{Batch, Forwarder};

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
}

pub(super) struct Worker {
    pub name: Arc<str>,
    pub queue: Arc<Queue>,
    pub stack: DeliveryStack,
    pub forwarder: Arc<dyn Forwarder>,
    pub batch: BatchSettings,
    pub acked: watch::Sender<u64>,
    /// Cancelled when the shutdown deadline passes: abandon what is left.
    pub stop: CancellationToken,
    pub dead_letters: Hook,
}

impl Worker {
    pub async fn run(mut self) -> Report {
        let mut report = Report {
            forwarder: self.name.to_string(),
            delivered: 0,
            failed: 0,
            undelivered: 0,
        };
        let label = self.name.to_string();
        while let Some(batch) = self.next_batch().await {
            let (first, last) = batch.seq_range();
            metrics::histogram!("eventgate_forwarder_batch_events", "forwarder" => label.clone())
                .record(batch.len() as f64);
            let oldest = batch.events().first().map(|e| e.received_at);
            let outcome = tokio::select! {
                biased;
                outcome = retry::deliver(&mut self.stack, batch.clone()) => Some(outcome),
                () = self.stop.cancelled() => None,
            };
            let (depth, bytes) = self.queue.depth();
            metrics::gauge!("eventgate_forwarder_queue_events", "forwarder" => label.clone())
                .set(depth as f64);
            metrics::gauge!("eventgate_forwarder_queue_bytes", "forwarder" => label.clone())
                .set(bytes as f64);
            match outcome {
                Some((Ok(()), _)) => {
                    report.delivered += batch.len() as u64;
                    metrics::counter!("eventgate_forwarder_events_total", "forwarder" => label.clone())
                        .increment(batch.len() as u64);
                    if let Some(age) = oldest.and_then(|t| SystemTime::now().duration_since(t).ok())
                    {
                        metrics::histogram!("eventgate_forwarder_delivery_seconds", "forwarder" => label.clone())
                            .record(age.as_secs_f64());
                    }
                }
                Some((Err(error), attempts)) => {
                    let reason = if is_retryable(&error) {
                        "retries_exhausted"
                    } else {
                        "permanent"
                    };
                    report.failed += batch.len() as u64;
                    metrics::counter!("eventgate_forwarder_failed_total", "forwarder" => label.clone(), "reason" => reason)
                        .increment(batch.len() as u64);
                    tracing::error!(
                        forwarder = %self.name,
                        events = batch.len(),
                        first_seq = first,
                        last_seq = last,
                        reason,
                        error = %error,
                        "gave up delivering a batch"
                    );
                    // Before the acknowledgement below: once acked, the spool forgets.
                    self.dead_letters.bury(&batch, &error, attempts).await;
                }
                None => {
                    report.undelivered += batch.len() as u64;
                    break;
                }
            }
            // The forwarder is done with these events either way; the spool's cursor
            // follows this.
            self.acked.send_replace(last);
        }
        report.undelivered += self.queue.drain_all().len() as u64;
        let close = tokio::select! {
            biased;
            result = self.forwarder.close() => result,
            () = self.stop.cancelled() => Ok(()),
        };
        if let Err(error) = close {
            tracing::warn!(forwarder = %self.name, %error, "closing the forwarder failed");
        }
        if report.undelivered > 0 {
            metrics::counter!("eventgate_forwarder_dropped_total", "forwarder" => label, "reason" => "shutdown")
                .increment(report.undelivered);
            tracing::error!(
                forwarder = %self.name,
                undelivered = report.undelivered,
                "shutdown deadline passed with events not delivered"
            );
        }
        report
    }

    /// The next batch: waits for a first event, then lingers up to `linger` for more
    /// until the batch is full. `None` once the queue is closed and empty, or at the
    /// shutdown deadline.
    async fn next_batch(&mut self) -> Option<Batch> {
        let max_events = self.batch.events.max(1);
        let max_bytes = self.batch.bytes.get();
        let mut events: Vec<Arc<Event>> = Vec::new();
        let mut bytes = 0;
        while events.is_empty() {
            self.dead_letters
                .redeliver_if_due(&mut self.stack, &self.stop)
                .await;
            tokio::select! {
                biased;
                () = self.stop.cancelled() => return None,
                ready = self.queue.wait_ready(self.dead_letters.until_due()) => if !ready { return None },
            }
            bytes = self.queue.take(max_events, max_bytes, &mut events);
        }
        let until = Instant::now() + self.batch.linger;
        while events.len() < max_events && bytes < max_bytes {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            tokio::select! {
                biased;
                () = self.stop.cancelled() => break,
                ready = self.queue.wait_ready(Some(left)) => if !ready { break },
            }
            bytes += self
                .queue
                .take(max_events - events.len(), max_bytes - bytes, &mut events);
        }
        Some(Batch::new(events, bytes))
    }
}

/// Drop logging for one forwarder: at most one line a second, with the count since
/// the last line. A flood of drops must not become a flood of log lines, but no drop
/// goes unmentioned.
#[derive(Default)]
pub(super) struct DropLog {
    state: Mutex<(Option<Instant>, u64)>,
}

impl DropLog {
    pub fn record(&self, forwarder: &str, policy: &'static str, dropped: usize, seq: u64) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.1 += dropped as u64;
        let now = Instant::now();
        if state.0.is_some_and(|at| now - at < Duration::from_secs(1)) {
            return;
        }
        let pending = std::mem::take(&mut state.1);
        state.0 = Some(now);
        drop(state);
        tracing::warn!(
            forwarder,
            policy,
            dropped = pending,
            at_seq = seq,
            "forwarder queue full: events dropped (counted in eventgate_forwarder_dropped_total)"
        );
    }
}
