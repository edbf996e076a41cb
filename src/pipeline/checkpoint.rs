//! When a forwarder's output becomes durable, and when its cursor may say so.
//!
//! Batches are sent without waiting for the disk; what was sent since the last
//! checkpoint is `Pending`. A checkpoint asks the forwarder to make it durable
//! ([`Forwarder::checkpoint`]) and only then moves the cursor the spool persists, so
//! the cursor is never ahead of what the sink holds durably: after a power loss the
//! spool still has everything the sink may have lost, and sends it again. One
//! checkpoint covers many batches, so a forwarder pays one fdatasync (or one synced
//! SQLite commit) per `checkpoint.interval` or `checkpoint.bytes`, not one per batch.
//!
//! Without a backlog there is nothing to send again from, so each batch is made
//! durable as part of its delivery ([`SyncEachBatch`]) and a failed sync is a failed
//! attempt, retried like any other.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::time::Instant;

use super::worker::Worker;
use crate::errors::chain;
use crate::forward::{Batch, ForwardError, Forwarder};

/// Sent since the last checkpoint, not yet durable.
pub(super) struct Pending {
    /// The cursor to persist once it is durable.
    next: u64,
    /// When the first of it was sent.
    since: Instant,
    bytes: usize,
}

/// The longest pause between attempts after failed checkpoints.
const FAILED_PAUSE_MAX: Duration = Duration::from_secs(10);

impl Worker {
    /// Whether checkpoints are this worker's to take (with a backlog to send again
    /// from); without one, every batch is made durable as it is delivered.
    fn checkpoints(&self) -> bool {
        self.backlog.is_some()
    }

    /// `bytes` were sent, and the cursor may move to `next` once they are durable.
    pub(super) fn sent(&mut self, next: u64, bytes: usize) {
        if !self.checkpoints() {
            self.persist(next);
            return;
        }
        if let Some(backlog) = &self.backlog {
            backlog.set_delivered(&self.name, next);
        }
        match &mut self.pending {
            Some(pending) => {
                pending.next = pending.next.max(next);
                pending.bytes += bytes;
            }
            None => {
                self.pending = Some(Pending {
                    next,
                    since: Instant::now(),
                    bytes,
                })
            }
        }
    }

    /// The cursor may move to `position` (events there were done without sending
    /// anything): at once if nothing sent waits for a checkpoint, else with it.
    pub(super) fn advance(&mut self, position: u64) {
        match &mut self.pending {
            Some(pending) => pending.next = pending.next.max(position),
            None => self.persist(position),
        }
    }

    /// Moves the cursor forward (never back) and tells the backlog, which persists it.
    pub(super) fn persist(&mut self, position: u64) {
        if position > self.cursor {
            self.cursor = position;
            if let Some(backlog) = &self.backlog {
                backlog.set_cursor(&self.name, position);
            }
        }
    }

    /// How long until the pending checkpoint is due; `None` with nothing pending.
    pub(super) fn until_checkpoint(&self) -> Option<Duration> {
        self.pending.as_ref().map(|pending| {
            (pending.since + self.checkpoint.interval).saturating_duration_since(Instant::now())
        })
    }

    /// Takes the checkpoint if it is due by time or bytes.
    pub(super) async fn checkpoint_if_due(&mut self) {
        let due = self.pending.as_ref().is_some_and(|pending| {
            pending.bytes as u64 >= self.checkpoint.bytes.0
                || pending.since.elapsed() >= self.checkpoint.interval
        });
        if due {
            self.checkpoint_now().await;
        }
    }

    /// Makes what was sent durable and persists the cursor after it. False when it
    /// failed (everything since the last checkpoint is sent again from the spool) or
    /// the shutdown deadline passed.
    pub(super) async fn checkpoint_now(&mut self) -> bool {
        let Some(pending) = self.pending.take() else {
            return true;
        };
        let started = Instant::now();
        let result = tokio::select! {
            biased;
            () = self.stop.cancelled() => {
                // Not made durable: the cursor stays, the spool keeps the events.
                self.pending = Some(pending);
                return false;
            }
            result = self.forwarder.checkpoint(pending.next) => result,
        };
        metrics::histogram!("eventgate_forwarder_checkpoint_seconds", "forwarder" => self.name.to_string())
            .record(started.elapsed().as_secs_f64());
        match result {
            Ok(()) => {
                self.checkpoint_failures = 0;
                self.persist(pending.next);
                true
            }
            Err(error) => {
                self.checkpoint_failed(&error, pending).await;
                false
            }
        }
    }

    /// The sink is back at its last checkpoint: read everything after it from the
    /// spool again, after a pause that grows while checkpoints keep failing.
    async fn checkpoint_failed(&mut self, error: &ForwardError, pending: Pending) {
        self.checkpoint_failures += 1;
        let failures = self.checkpoint_failures;
        metrics::counter!("eventgate_forwarder_checkpoint_failures_total", "forwarder" => self.name.to_string())
            .increment(1);
        self.health.attempt_failed(
            failures,
            format!("making its output durable failed: {}", chain(error)),
        );
        let pause = (Duration::from_millis(100) * 2u32.pow(failures.min(7))).min(FAILED_PAUSE_MAX);
        tracing::error!(
            forwarder = %self.name,
            error = %chain(error),
            resend_from = self.cursor,
            up_to = pending.next,
            failures,
            retry_in = ?pause,
            "a checkpoint failed; what was sent since the last one is sent again from the spool"
        );
        self.restart_from(self.cursor);
        self.reader = None;
        tokio::select! {
            biased;
            () = self.stop.cancelled() => return,
            () = tokio::time::sleep(pause) => {}
        }
        self.resume().await;
    }

    /// Asks the forwarder where to send from, now that everything from the cursor on
    /// will be sent again; a sink that has a later checkpoint of its own (persisted
    /// before a crash kept the cursor from following) moves the cursor to it.
    pub(super) async fn resume(&mut self) {
        if !self.checkpoints() {
            return;
        }
        let end = self.state.next_to_route();
        let cursor = self.cursor;
        let resumed = tokio::select! {
            biased;
            () = self.stop.cancelled() => return,
            resumed = self.forwarder.resume(cursor, end) => resumed,
        };
        match resumed {
            Ok(next) if next > cursor && next <= end => {
                tracing::info!(forwarder = %self.name, cursor, resume_from = next, "the sink's own checkpoint is ahead of the cursor; resuming from it");
                self.state.skip_to(next);
                self.persist(next);
            }
            Ok(next) if next > end => {
                tracing::warn!(forwarder = %self.name, cursor, sink_says = next, spool_end = end, "the sink's checkpoint is past the end of the spool (was the spool removed?); resuming from the cursor");
            }
            Ok(_) => {}
            Err(error) => {
                tracing::error!(forwarder = %self.name, cursor, error = %chain(&error), "the sink could not prepare to resume; resuming from the cursor");
            }
        }
    }
}

/// A forwarder whose every delivered batch is also made durable: for a pipeline
/// without a backlog, where nothing could be sent again after a lost checkpoint.
pub(super) struct SyncEachBatch(pub Arc<dyn Forwarder>);

impl Forwarder for SyncEachBatch {
    fn send<'a>(&'a self, batch: &'a Batch) -> BoxFuture<'a, Result<(), ForwardError>> {
        Box::pin(async move {
            self.0.send(batch).await?;
            // No spool, so no position to record.
            self.0.checkpoint(0).await
        })
    }

    fn close(&self) -> BoxFuture<'_, Result<(), ForwardError>> {
        self.0.close()
    }
}
