//! One forwarder's worker: takes batches off its queue and pushes each through the
//! delivery stack, one at a time, so order holds and a failed batch is retried
//! before anything behind it.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use prost::Message;

use futures::FutureExt as _;
use std::panic::AssertUnwindSafe;

use super::backlog::{Backlog, BacklogReader};
use super::checkpoint::Pending;
use super::deadletter::Hook;
use super::health::{CloseOnDrop, Health};
use super::inflight::Inflight;
use super::queue::Queue;
use super::retry::DeliveryStack;
use super::route::RouteState;
use super::settings::{BatchSettings, CheckpointSettings};
use crate::event::Event;
use crate::filter::Filter;
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
    /// Whether those stay in the spool for the next start (a pipeline with a
    /// backlog) rather than being lost.
    pub kept_in_spool: bool,
}

pub(super) struct Worker {
    pub name: Arc<str>,
    pub queue: Arc<Queue>,
    pub state: Arc<RouteState>,
    pub filter: Filter,
    pub backlog: Option<Arc<dyn Backlog>>,
    pub stack: DeliveryStack,
    pub forwarder: Arc<dyn Forwarder>,
    pub batch: BatchSettings,
    pub acked: watch::Sender<u64>,
    /// Cancelled when shutdown begins: stop reading the backlog (it keeps).
    pub closing: CancellationToken,
    /// Cancelled when the shutdown deadline passes: abandon what is left.
    pub stop: CancellationToken,
    pub dead_letters: Hook,
    pub health: Arc<Health>,
    /// What this forwarder is delivering, for the next start if the process dies.
    pub inflight: Inflight,
    /// The pause before calling the forwarder again after its next panic.
    pub panic_backoff: Duration,
    pub checkpoint: CheckpointSettings,
    /// The next sequence number not processed as far as the spool knows: persisted,
    /// and never past what the sink holds durably.
    pub cursor: u64,
    /// Sent since the last checkpoint.
    pub pending: Option<Pending>,
    pub checkpoint_failures: u32,
    /// Reading the backlog: the reader and its position.
    pub reader: Option<(Box<dyn BacklogReader>, u64)>,
}

/// Where the next events come from.
enum Next {
    /// A batch from the queue.
    Queued(Batch),
    /// A batch read from the backlog; `next` is the reader's position after it.
    Backlog(Batch, u64),
    /// Backlog records read that this forwarder's filter does not want.
    Skipped(u64),
    /// Nothing arrived for a while: a chance to move the cursor past unmatched events.
    Idle,
}

/// How long an idle worker waits before moving its cursor past events it did not
/// match, so a forwarder with a narrow filter does not pin the spool.
const IDLE_CURSOR_INTERVAL: Duration = Duration::from_secs(1);

impl Worker {
    pub(super) async fn run(mut self) -> Report {
        let _closed = CloseOnDrop(Arc::clone(&self.health));
        let mut report = Report {
            forwarder: self.name.to_string(),
            delivered: 0,
            failed: 0,
            undelivered: 0,
            kept_in_spool: self.backlog.is_some(),
        };
        self.cursor = self
            .backlog
            .as_ref()
            .map_or(1, |backlog| backlog.cursor(&self.name));
        self.resume().await;
        let mut restarts: u32 = 0;
        // Panics in the forwarder's own code are isolated per event (`isolate`); one
        // anywhere else in this loop restarts it, with backoff, from the cursor.
        loop {
            let pass = AssertUnwindSafe(self.deliver_until_closed(&mut report))
                .catch_unwind()
                .await;
            let Err(panic) = pass else { break };
            restarts += 1;
            let pause = Duration::from_millis(100 * 2u64.pow(restarts.min(7)));
            metrics::counter!("eventgate_forwarder_restarts_total", "forwarder" => self.name.to_string())
                .increment(1);
            let cursor = self.cursor;
            // What was sent since the last checkpoint is sent again from the spool.
            self.pending = None;
            self.reader = None;
            let lost = self.restart_from(cursor);
            self.health
                .attempt_failed(restarts, "the worker panicked; restarting".to_owned());
            tracing::error!(
                forwarder = %self.name,
                resume_from = cursor,
                restarts,
                retry_in = ?pause,
                lost_from_memory = lost,
                panic = ?panic.downcast_ref::<&str>().copied().or_else(|| panic.downcast_ref::<String>().map(String::as_str)),
                "the forwarder's worker panicked; restarting it"
            );
            tokio::select! {
                biased;
                () = self.stop.cancelled() => break,
                () = tokio::time::sleep(pause) => {}
            }
            self.resume().await;
        }
        self.finish(report).await
    }

    /// After a panic outside a delivery: the events it had taken from its queue are
    /// read again from the backlog at the cursor (the queue is emptied, as they all
    /// come after it). Without a backlog they are lost; returns how many.
    pub(super) fn restart_from(&self, cursor: u64) -> usize {
        if self.backlog.is_some() {
            self.state.resume_at(cursor);
            self.queue.drain_all();
            self.health.spilling();
            0
        } else {
            self.queue.depth().0
        }
    }

    /// Takes batches and delivers them until shutdown (queue closed and drained, or
    /// the deadline).
    async fn deliver_until_closed(&mut self, report: &mut Report) {
        let label = self.name.to_string();
        while let Some(next) = self.next().await {
            let (batch, from_backlog) = match next {
                Next::Queued(batch) => (batch, None),
                Next::Backlog(batch, position) => (batch, Some(position)),
                Next::Skipped(position) => {
                    self.advance(position);
                    self.checkpoint_if_due().await;
                    continue;
                }
                Next::Idle => {
                    // The wait ends when the checkpoint is due, traffic or not.
                    self.checkpoint_if_due().await;
                    let position = self
                        .state
                        .cursor_after(self.cursor.saturating_sub(1), &self.queue);
                    self.advance(position);
                    continue;
                }
            };
            let (_, last) = batch.seq_range();
            let batch_bytes = batch.bytes();
            metrics::histogram!("eventgate_forwarder_batch_events", "forwarder" => label.clone())
                .record(batch.len() as f64);
            metrics::histogram!("eventgate_forwarder_batch_bytes", "forwarder" => label.clone())
                .record(batch.bytes() as f64);
            self.health
                .batch_started(batch.events().first().map(|e| e.received_at));
            let delivered_before = report.delivered;
            let finished = self.deliver_isolating(batch, report).await;
            let (depth, bytes) = self.queue.depth();
            metrics::gauge!("eventgate_forwarder_queue_events", "forwarder" => label.clone())
                .set(depth as f64);
            metrics::gauge!("eventgate_forwarder_queue_bytes", "forwarder" => label.clone())
                .set(bytes as f64);
            if !finished {
                break;
            }
            // The forwarder is done with these events either way.
            self.acked.send_replace(last);
            let position = match from_backlog {
                Some(position) => position,
                None => self.state.cursor_after(last, &self.queue),
            };
            if report.delivered > delivered_before {
                self.sent(position, batch_bytes);
            } else {
                // All dead-lettered: the dead-letter store holds them, the sink nothing.
                self.advance(position);
            }
            self.checkpoint_if_due().await;
        }
        // Closing: what was sent becomes durable before the cursor says so.
        self.checkpoint_now().await;
    }

    /// Closes the forwarder and says what was left undelivered.
    async fn finish(self, mut report: Report) -> Report {
        let cursor = self.cursor;
        report.undelivered += self.queue.drain_all().len() as u64;
        let close = tokio::select! {
            biased;
            result = self.forwarder.close() => result,
            () = self.stop.cancelled() => Ok(()),
        };
        if let Err(error) = close {
            tracing::warn!(forwarder = %self.name, %error, "closing the forwarder failed");
        }
        if report.undelivered > 0 && report.kept_in_spool {
            tracing::warn!(
                forwarder = %self.name,
                undelivered = report.undelivered,
                resume_from = cursor,
                "shutdown deadline passed; undelivered events stay in the spool for the next start"
            );
        } else if report.undelivered > 0 {
            metrics::counter!("eventgate_forwarder_dropped_total", "forwarder" => self.name.to_string(), "reason" => "shutdown")
                .increment(report.undelivered);
            tracing::error!(
                forwarder = %self.name,
                undelivered = report.undelivered,
                "shutdown deadline passed with events not delivered"
            );
        }
        report
    }

    /// How long to wait for events before looking at the cursor and at dead letters
    /// due for redelivery again.
    fn idle_wait(&self) -> Duration {
        [self.dead_letters.until_due(), self.until_checkpoint()]
            .into_iter()
            .flatten()
            .fold(IDLE_CURSOR_INTERVAL, Duration::min)
    }

    /// The queue first: while spilled it only holds events from before the spill
    /// point. Once it is empty, a spilled forwarder reads the backlog until it can
    /// rejoin. `None` at shutdown (queue closed and drained) or at the deadline.
    async fn next(&mut self) -> Option<Next> {
        loop {
            if let Some(backlog) = &self.backlog
                && self.queue.depth().0 == 0
                && let Some(from) = self.state.spilled_from()
            {
                if self.closing.is_cancelled() {
                    // The rest stays in the spool; the cursor says where to resume.
                    return None;
                }
                let (backlog_reader, position) = self
                    .reader
                    .get_or_insert_with(|| (backlog.reader(from), from));
                if self.state.try_rejoin(*position) {
                    self.health.rejoined();
                    tracing::info!(forwarder = %self.name, at_seq = *position, "caught up with the spool; back on the live queue");
                    self.reader = None;
                    continue;
                }
                let max_events = self.batch.events.max(1);
                let read = tokio::select! {
                    biased;
                    () = self.closing.cancelled() => return None,
                    read = backlog_reader.next(max_events, self.batch.bytes.get()) => read,
                };
                match read {
                    Ok(read) => {
                        *position = read.next;
                        if let Some((first, count)) = read.lost {
                            metrics::counter!("eventgate_forwarder_dropped_total", "forwarder" => self.name.to_string(), "reason" => "spool_full")
                                .increment(count);
                            self.health.dropped(count);
                            tracing::error!(forwarder = %self.name, first_seq = first, count, "events were discarded from the full spool before this forwarder read them");
                        }
                        let mut bytes = 0;
                        let events: Vec<Arc<Event>> = read
                            .events
                            .into_iter()
                            .filter(|event| self.filter.matches(&event.record_fields()))
                            .inspect(|event| bytes += event.envelope.encoded_len())
                            .collect();
                        if events.is_empty() {
                            return Some(Next::Skipped(read.next));
                        }
                        return Some(Next::Backlog(Batch::new(events, bytes), read.next));
                    }
                    Err(error) => {
                        tracing::error!(forwarder = %self.name, %error, "cannot read the spool; trying again in a second");
                        tokio::select! {
                            () = self.closing.cancelled() => return None,
                            () = tokio::time::sleep(Duration::from_secs(1)) => {}
                        }
                        continue;
                    }
                }
            }
            return self.next_queued().await;
        }
    }

    /// The next batch from the queue: waits for a first event, then lingers up to
    /// `linger` for more until the batch is full.
    async fn next_queued(&mut self) -> Option<Next> {
        let max_events = self.batch.events.max(1);
        let max_bytes = self.batch.bytes.get();
        let mut events: Vec<Arc<Event>> = Vec::new();
        let mut bytes = 0;
        while events.is_empty() {
            if let Some(redelivered) = self
                .dead_letters
                .redeliver_if_due(&mut self.stack, &self.stop)
                .await
            {
                // Removed from the store only once the sink holds them durably.
                self.sent(self.cursor, redelivered.bytes);
                if self.checkpoint_now().await {
                    self.dead_letters.resolve(redelivered).await;
                } else {
                    // They stay queued in the store, for the next start. A failed
                    // checkpoint sent the worker back to the spool: read it first.
                    return Some(Next::Idle);
                }
            }
            tokio::select! {
                biased;
                () = self.stop.cancelled() => return None,
                ready = self.queue.wait_ready(Some(self.idle_wait())) => {
                    if !ready {
                        return None;
                    }
                    if self.queue.depth().0 == 0 {
                        return Some(Next::Idle);
                    }
                }
                () = self.state.spilled.notified(), if self.backlog.is_some() => return Some(Next::Idle),
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
        Some(Next::Queued(Batch::new(events, bytes)))
    }
}
