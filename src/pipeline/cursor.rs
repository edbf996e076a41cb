//! One forwarder's cursor: when its output becomes durable, when its cursor may
//! say so, and what it has acknowledged.
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
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::backlog::Backlog;
use super::common::Common;
use super::health::Health;
use super::meters::{LazyCounter, LazyHistogram};
use super::settings::CheckpointSettings;
use crate::errors::chain;
use crate::forward::{Batch, ForwardError, Forwarder};

/// Sent since the last checkpoint, not yet durable.
struct Pending {
    /// The cursor to persist once it is durable.
    next: u64,
    /// When the first of it was sent.
    since: Instant,
    bytes: usize,
}

/// The longest pause between attempts after failed checkpoints.
const FAILED_PAUSE_MAX: Duration = Duration::from_secs(10);

/// How a checkpoint went.
pub(super) enum Checkpoint {
    /// Durable, and the cursor moved (or there was nothing to make durable).
    Taken,
    /// The shutdown deadline passed first: the cursor stays, the spool keeps the events.
    Stopped,
    /// The sink is back at its last checkpoint: everything from the cursor on must be
    /// read again from the spool, after `pause`.
    Failed { pause: Duration },
}

pub(super) struct Cursor {
    name: Arc<str>,
    backlog: Option<Arc<dyn Backlog>>,
    forwarder: Arc<dyn Forwarder>,
    settings: CheckpointSettings,
    /// The next sequence number not processed as far as the spool knows: persisted,
    /// and never past what the sink holds durably.
    position: u64,
    /// Sent since the last checkpoint.
    pending: Option<Pending>,
    failures: u32,
    /// The highest sequence number the forwarder is done with, for its handle.
    acked: watch::Sender<u64>,
    health: Arc<Health>,
    /// Cancelled when the shutdown deadline passes.
    stop: CancellationToken,
    seconds: LazyHistogram,
    failures_total: LazyCounter,
}

impl Cursor {
    pub(super) fn new(
        common: &Common,
        forwarder: Arc<dyn Forwarder>,
        settings: CheckpointSettings,
        acked: watch::Sender<u64>,
    ) -> Self {
        Self {
            name: Arc::clone(&common.name),
            backlog: common.backlog.clone(),
            forwarder,
            settings,
            position: 1,
            pending: None,
            failures: 0,
            acked,
            health: Arc::clone(&common.health),
            stop: common.stop.clone(),
            seconds: LazyHistogram::new("eventgate_forwarder_checkpoint_seconds", &common.name),
            failures_total: LazyCounter::new(
                "eventgate_forwarder_checkpoint_failures_total",
                &common.name,
            ),
        }
    }

    /// Reads the cursor the backlog persisted, as the worker starts.
    pub(super) fn load(&mut self) {
        self.position = self
            .backlog
            .as_ref()
            .map_or(1, |backlog| backlog.cursor(&self.name));
    }

    /// The next sequence number not processed, as persisted.
    pub(super) fn position(&self) -> u64 {
        self.position
    }

    /// Whether checkpoints are this cursor's to take (with a backlog to send again
    /// from, which also keeps what a shutdown leaves undelivered); without one,
    /// every batch is made durable as it is delivered.
    pub(super) fn spooled(&self) -> bool {
        self.backlog.is_some()
    }

    /// The forwarder is done with everything up to `last`, delivered or given up on.
    pub(super) fn acked(&self, last: u64) {
        self.acked.send_replace(last);
    }

    /// `bytes` were sent, and the cursor may move to `next` once they are durable.
    pub(super) fn sent(&mut self, next: u64, bytes: usize) {
        if !self.spooled() {
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
        if position > self.position {
            self.position = position;
            if let Some(backlog) = &self.backlog {
                backlog.set_cursor(&self.name, position);
            }
        }
    }

    /// What was sent since the last checkpoint will be sent again from the spool.
    pub(super) fn forget_pending(&mut self) {
        self.pending = None;
    }

    /// How long until the pending checkpoint is due; `None` with nothing pending.
    pub(super) fn until_checkpoint(&self) -> Option<Duration> {
        self.pending.as_ref().map(|pending| {
            (pending.since + self.settings.interval).saturating_duration_since(Instant::now())
        })
    }

    /// Whether the checkpoint is due by time or bytes.
    pub(super) fn checkpoint_due(&self) -> bool {
        self.pending.as_ref().is_some_and(|pending| {
            pending.bytes as u64 >= self.settings.bytes.0
                || pending.since.elapsed() >= self.settings.interval
        })
    }

    /// Makes what was sent durable and persists the cursor after it.
    pub(super) async fn checkpoint(&mut self) -> Checkpoint {
        let Some(pending) = self.pending.take() else {
            return Checkpoint::Taken;
        };
        let started = Instant::now();
        let result = tokio::select! {
            biased;
            () = self.stop.cancelled() => {
                // Not made durable: the cursor stays, the spool keeps the events.
                self.pending = Some(pending);
                return Checkpoint::Stopped;
            }
            result = self.forwarder.checkpoint(pending.next) => result,
        };
        self.seconds.record(started.elapsed().as_secs_f64());
        match result {
            Ok(()) => {
                self.failures = 0;
                self.persist(pending.next);
                Checkpoint::Taken
            }
            Err(error) => Checkpoint::Failed {
                pause: self.failed(&error, &pending),
            },
        }
    }

    /// Counts and reports a failed checkpoint; returns the pause before reading the
    /// spool again, which grows while checkpoints keep failing.
    fn failed(&mut self, error: &ForwardError, pending: &Pending) -> Duration {
        self.failures += 1;
        let failures = self.failures;
        self.failures_total.increment(1);
        self.health.attempt_failed(
            failures,
            format!("making its output durable failed: {}", chain(error)),
        );
        let pause = (Duration::from_millis(100) * 2u32.pow(failures.min(7))).min(FAILED_PAUSE_MAX);
        tracing::error!(
            forwarder = %self.name,
            error = %chain(error),
            resend_from = self.position,
            up_to = pending.next,
            failures,
            retry_in = ?pause,
            "a checkpoint failed; what was sent since the last one is sent again from the spool"
        );
        pause
    }

    /// Asks the forwarder where to send from, now that everything from the cursor on
    /// will be sent again (routing has got to `end`). A sink that has a later
    /// checkpoint of its own (persisted before a crash kept the cursor from
    /// following) answers it: returned, for the worker to move the route and then
    /// the cursor there.
    pub(super) async fn resume(&self, end: u64) -> Option<u64> {
        let cursor = self.position;
        let resumed = tokio::select! {
            biased;
            () = self.stop.cancelled() => return None,
            resumed = self.forwarder.resume(cursor, end) => resumed,
        };
        match resumed {
            Ok(next) if next > cursor && next <= end => {
                tracing::info!(forwarder = %self.name, cursor, resume_from = next, "the sink's own checkpoint is ahead of the cursor; resuming from it");
                return Some(next);
            }
            Ok(next) if next > end => {
                tracing::warn!(forwarder = %self.name, cursor, sink_says = next, spool_end = end, "the sink's checkpoint is past the end of the spool (was the spool removed?); resuming from the cursor");
            }
            Ok(_) => {}
            Err(error) => {
                tracing::error!(forwarder = %self.name, cursor, error = %chain(&error), "the sink could not prepare to resume; resuming from the cursor");
            }
        }
        None
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
