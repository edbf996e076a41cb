//! One forwarder's worker: a loop that takes batches from its intake (`intake`:
//! queue or backlog), hands each to its delivery (`delivery`: isolation, retries,
//! dead letters), and then moves its cursor (`cursor`: acknowledgement, checkpoints),
//! one batch at a time, so order holds and a failed batch is retried before
//! anything behind it.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt as _;
use tokio_util::sync::CancellationToken;

use super::common::Common;
use super::cursor::{Checkpoint, Cursor};
use super::delivery::{Delivery, Report};
use super::health::{CloseOnDrop, Health};
use super::intake::{FromBacklog, Intake, Next, Wait};
use super::meters::{GaugeKey, LazyCounter, LazyHistogram};

pub(super) struct Worker {
    name: Arc<str>,
    intake: Intake,
    delivery: Delivery,
    cursor: Cursor,
    health: Arc<Health>,
    stop: CancellationToken,
    meters: WorkerMeters,
    /// The backlog batch after the one being delivered, read while it was.
    prefetched: Option<Next>,
}

/// The worker's own series, looked up once per forwarder.
struct WorkerMeters {
    batch_events: LazyHistogram,
    batch_bytes: LazyHistogram,
    queue_events: GaugeKey,
    queue_bytes: GaugeKey,
    restarts: LazyCounter,
    dropped_at_shutdown: LazyCounter,
}

impl WorkerMeters {
    fn new(name: &str) -> Self {
        Self {
            batch_events: LazyHistogram::new("eventgate_forwarder_batch_events", name),
            batch_bytes: LazyHistogram::new("eventgate_forwarder_batch_bytes", name),
            queue_events: GaugeKey::new("eventgate_forwarder_queue_events", name),
            queue_bytes: GaugeKey::new("eventgate_forwarder_queue_bytes", name),
            restarts: LazyCounter::new("eventgate_forwarder_restarts_total", name),
            dropped_at_shutdown: LazyCounter::with_reason(
                "eventgate_forwarder_dropped_total",
                name,
                "shutdown",
            ),
        }
    }
}

/// How long an idle worker waits before moving its cursor past events it did not
/// match, so a forwarder with a narrow filter does not pin the spool.
const IDLE_CURSOR_INTERVAL: Duration = Duration::from_secs(1);

impl Worker {
    pub(super) fn new(common: &Common, intake: Intake, delivery: Delivery, cursor: Cursor) -> Self {
        Self {
            name: Arc::clone(&common.name),
            intake,
            delivery,
            cursor,
            health: Arc::clone(&common.health),
            stop: common.stop.clone(),
            meters: WorkerMeters::new(&common.name),
            prefetched: None,
        }
    }

    pub(super) async fn run(mut self) -> Report {
        let _closed = CloseOnDrop(Arc::clone(&self.health));
        let mut report = Report {
            forwarder: self.name.to_string(),
            delivered: 0,
            failed: 0,
            undelivered: 0,
            kept_in_spool: self.cursor.spooled(),
        };
        self.cursor.load();
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
            self.meters.restarts.increment(1);
            let cursor = self.cursor.position();
            // What was sent since the last checkpoint is sent again from the spool.
            self.cursor.forget_pending();
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

    /// Takes batches and delivers them until shutdown (queue closed and drained, or
    /// the deadline).
    async fn deliver_until_closed(&mut self, report: &mut Report) {
        while let Some(next) = self.next().await {
            let (batch, from_backlog) = match next {
                Next::Queued(batch) => (batch, None),
                Next::Backlog(batch, position) => (batch, Some(position)),
                Next::Skipped(position) => {
                    self.cursor.advance(position);
                    self.checkpoint_if_due().await;
                    continue;
                }
                Next::Idle => {
                    // The wait ends when the checkpoint is due, traffic or not.
                    self.checkpoint_if_due().await;
                    let position = self
                        .intake
                        .position_after(self.cursor.position().saturating_sub(1));
                    self.cursor.advance(position);
                    continue;
                }
            };
            let (_, last) = batch.seq_range();
            if from_backlog.is_none() {
                match self.intake.until_durable(last).await {
                    Ok(true) => {}
                    Ok(false) => {
                        report.undelivered += batch.len() as u64;
                        break;
                    }
                    Err(error) => {
                        // Not acknowledged to anyone, and never will be: the events
                        // are not handed on. What was durable stays in the spool.
                        tracing::error!(forwarder = %self.name, %error, first_seq = batch.seq_range().0, "events taken from the queue will never be durable; not delivering them");
                        report.undelivered += batch.len() as u64;
                        break;
                    }
                }
            }
            let batch_bytes = batch.bytes();
            self.meters.batch_events.record(batch.len() as f64);
            self.meters.batch_bytes.record(batch.bytes() as f64);
            self.health
                .batch_started(batch.events().first().map(|e| e.identity.received_at));
            let delivered_before = report.delivered;
            let finished = if from_backlog.is_some() {
                // Reading and decoding the next batch from the spool overlaps this
                // one's delivery instead of following it: the sink is not kept
                // waiting between batches while the worker catches up.
                let forwarder = self.delivery.forwarder();
                let (finished, read) =
                    tokio::join!(self.delivery.deliver_isolating(batch, report), async {
                        let read = self.intake.read_backlog().await;
                        if let FromBacklog::Read(Next::Backlog(next, _)) = &read {
                            // Skipped if it panics: `send` renders what it needs under
                            // the delivery's isolation anyway.
                            let _ = std::panic::catch_unwind(AssertUnwindSafe(|| {
                                forwarder.prepare(next);
                            }));
                        }
                        read
                    },);
                if let FromBacklog::Read(next) = read {
                    self.prefetched = Some(next);
                }
                finished
            } else {
                self.delivery.deliver_isolating(batch, report).await
            };
            let (depth, bytes) = self.intake.depth();
            self.meters.queue_events.set(depth as f64);
            self.meters.queue_bytes.set(bytes as f64);
            if !finished {
                break;
            }
            // The forwarder is done with these events either way.
            self.cursor.acked(last);
            let position = match from_backlog {
                Some(position) => position,
                None => self.intake.position_after(last),
            };
            if report.delivered > delivered_before {
                self.cursor.sent(position, batch_bytes);
            } else {
                // All dead-lettered: the dead-letter store holds them, the sink nothing.
                self.cursor.advance(position);
            }
            self.checkpoint_if_due().await;
        }
        // Closing: what was sent becomes durable before the cursor says so.
        self.checkpoint_now().await;
    }

    /// The next batch: from the backlog while spilled, else from the queue, with
    /// dead letters due for redelivery sent first. `None` at shutdown (queue closed
    /// and drained) or at the deadline.
    async fn next(&mut self) -> Option<Next> {
        if let Some(next) = self.prefetched.take() {
            return Some(next);
        }
        match self.intake.read_backlog().await {
            FromBacklog::Read(next) => return Some(next),
            FromBacklog::Closed => return None,
            FromBacklog::NotSpilled => {}
        }
        loop {
            if let Some(redelivered) = self.delivery.redeliver_if_due().await {
                // Removed from the store only once the sink holds them durably.
                let position = self.cursor.position();
                self.cursor.sent(position, redelivered.bytes);
                if self.checkpoint_now().await {
                    self.delivery.resolve(redelivered).await;
                } else {
                    // They stay queued in the store, for the next start. A failed
                    // checkpoint sent the worker back to the spool: read it first.
                    return Some(Next::Idle);
                }
            }
            match self.intake.wait(self.idle_wait()).await {
                Wait::Stop => return None,
                Wait::Idle => return Some(Next::Idle),
                Wait::Ready => {}
            }
            if let Some(batch) = self.intake.take_batch().await {
                return Some(Next::Queued(batch));
            }
        }
    }

    /// How long to wait for events before looking at the cursor and at dead letters
    /// due for redelivery again.
    fn idle_wait(&self) -> Duration {
        [self.delivery.until_due(), self.cursor.until_checkpoint()]
            .into_iter()
            .flatten()
            .fold(IDLE_CURSOR_INTERVAL, Duration::min)
    }

    /// Takes the checkpoint if it is due by time or bytes.
    async fn checkpoint_if_due(&mut self) {
        if self.cursor.checkpoint_due() {
            self.checkpoint_now().await;
        }
    }

    /// Makes what was sent durable and persists the cursor after it. False when it
    /// failed (everything since the last checkpoint is sent again from the spool) or
    /// the shutdown deadline passed.
    async fn checkpoint_now(&mut self) -> bool {
        let pause = match self.cursor.checkpoint().await {
            Checkpoint::Taken => return true,
            Checkpoint::Stopped => return false,
            Checkpoint::Failed { pause } => pause,
        };
        // The sink is back at its last checkpoint: read everything after it from the
        // spool again, after the pause.
        self.restart_from(self.cursor.position());
        tokio::select! {
            biased;
            () = self.stop.cancelled() => return false,
            () = tokio::time::sleep(pause) => {}
        }
        self.resume().await;
        false
    }

    /// Reads on from `cursor` (in the spool): nothing read past it before is kept,
    /// the prefetched batch included. Returns the events dropped from memory.
    fn restart_from(&mut self, cursor: u64) -> usize {
        self.prefetched = None;
        self.intake.restart_from(cursor)
    }

    /// Asks the sink where to send from, now that everything from the cursor on will
    /// be sent again; a sink with a later checkpoint of its own moves the route and
    /// the cursor to it.
    async fn resume(&mut self) {
        if !self.cursor.spooled() {
            return;
        }
        let end = self.intake.next_to_route();
        if let Some(next) = self.cursor.resume(end).await {
            self.intake.skip_to(next);
            self.cursor.persist(next);
        }
    }

    /// Closes the forwarder and says what was left undelivered.
    async fn finish(self, mut report: Report) -> Report {
        let cursor = self.cursor.position();
        report.undelivered += self.intake.drain() as u64;
        if let Err(error) = self.delivery.close().await {
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
            self.meters
                .dropped_at_shutdown
                .increment(report.undelivered);
            tracing::error!(
                forwarder = %self.name,
                undelivered = report.undelivered,
                "shutdown deadline passed with events not delivered"
            );
        }
        report
    }
}
