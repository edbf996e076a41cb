//! Where one forwarder's worker takes its events from: its in-memory queue, or the
//! backlog while its route is spilled (the queue overflowed, a restart left it
//! behind, or it went back to its cursor), and how they become batches.
//!
//! The queue comes first: while spilled it only holds events from before the spill
//! point. Once it is empty the backlog is read until the reader's position meets
//! routing (`RouteState::try_rejoin`), and from then on the queue again.

use std::sync::Arc;
use std::time::Duration;

use prost::Message;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::backlog::{Backlog, BacklogError, BacklogReader};
use super::common::Common;
use super::health::Health;
use super::meters::LazyCounter;
use super::queue::Queue;
use super::route::RouteState;
use super::settings::BatchSettings;
use crate::event::Event;
use crate::filter::Filter;
use crate::forward::Batch;

/// Where the next events come from.
pub(super) enum Next {
    /// A batch from the queue.
    Queued(Batch),
    /// A batch read from the backlog; `next` is the reader's position after it.
    Backlog(Batch, u64),
    /// Backlog records read that this forwarder's filter does not want.
    Skipped(u64),
    /// Nothing arrived for a while: a chance to move the cursor past unmatched events.
    Idle,
}

/// What the backlog gave before the queue is looked at.
pub(super) enum FromBacklog {
    Read(Next),
    /// Shutdown began while spilled: the rest stays in the spool.
    Closed,
    /// Not spilled (or just rejoined): take from the queue.
    NotSpilled,
}

/// What waiting on the queue ended with.
pub(super) enum Wait {
    /// Events are queued.
    Ready,
    /// Nothing came in time, or the route just spilled.
    Idle,
    /// The queue is closed and drained, or the shutdown deadline passed.
    Stop,
}

pub(super) struct Intake {
    name: Arc<str>,
    queue: Arc<Queue>,
    state: Arc<RouteState>,
    filter: Filter,
    backlog: Option<Arc<dyn Backlog>>,
    batch: BatchSettings,
    health: Arc<Health>,
    /// Cancelled when shutdown begins: stop reading the backlog (it keeps).
    closing: CancellationToken,
    /// Cancelled when the shutdown deadline passes.
    stop: CancellationToken,
    /// Reading the backlog: the reader and its position.
    reader: Option<(Box<dyn BacklogReader>, u64)>,
    spool_full: LazyCounter,
}

impl Intake {
    pub(super) fn new(
        common: &Common,
        queue: Arc<Queue>,
        state: Arc<RouteState>,
        filter: Filter,
        batch: BatchSettings,
    ) -> Self {
        Self {
            name: Arc::clone(&common.name),
            queue,
            state,
            filter,
            backlog: common.backlog.clone(),
            batch,
            health: Arc::clone(&common.health),
            closing: common.closing.clone(),
            stop: common.stop.clone(),
            reader: None,
            spool_full: LazyCounter::with_reason(
                "eventgate_forwarder_dropped_total",
                &common.name,
                "spool_full",
            ),
        }
    }

    /// While spilled and with the queue empty: the next read from the backlog, or
    /// the rejoin with the queue once the reader has caught up with routing.
    pub(super) async fn read_backlog(&mut self) -> FromBacklog {
        loop {
            let Some(backlog) = &self.backlog else {
                return FromBacklog::NotSpilled;
            };
            if self.queue.depth().0 != 0 {
                return FromBacklog::NotSpilled;
            }
            let Some(from) = self.state.spilled_from() else {
                return FromBacklog::NotSpilled;
            };
            if self.closing.is_cancelled() {
                // The rest stays in the spool; the cursor says where to resume.
                return FromBacklog::Closed;
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
                () = self.closing.cancelled() => return FromBacklog::Closed,
                read = backlog_reader.next(max_events, self.batch.bytes.get()) => read,
            };
            match read {
                Ok(read) => {
                    *position = read.next;
                    if let Some((first, count)) = read.lost {
                        self.spool_full.increment(count);
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
                        return FromBacklog::Read(Next::Skipped(read.next));
                    }
                    return FromBacklog::Read(Next::Backlog(Batch::new(events, bytes), read.next));
                }
                Err(error) => {
                    tracing::error!(forwarder = %self.name, %error, "cannot read the spool; trying again in a second");
                    tokio::select! {
                        () = self.closing.cancelled() => return FromBacklog::Closed,
                        () = tokio::time::sleep(Duration::from_secs(1)) => {}
                    }
                }
            }
        }
    }

    /// Waits up to `idle` for a first event in the queue. (`&mut`: the backlog
    /// reader is `Send` but not `Sync`, and the worker's future moves between threads.)
    pub(super) async fn wait(&mut self, idle: Duration) -> Wait {
        tokio::select! {
            biased;
            () = self.stop.cancelled() => Wait::Stop,
            ready = self.queue.wait_ready(Some(idle)) => {
                if !ready {
                    Wait::Stop
                } else if self.queue.depth().0 == 0 {
                    Wait::Idle
                } else {
                    Wait::Ready
                }
            }
            () = self.state.spilled.notified(), if self.backlog.is_some() => Wait::Idle,
        }
    }

    /// Waits until the queued events up to `seq` are durable in the backlog, so
    /// that no sink holds an event a crash can still take from the spool. False at
    /// the shutdown deadline; an error if they never will be (the spool failed).
    pub(super) async fn until_durable(&mut self, seq: u64) -> Result<bool, BacklogError> {
        let Some(backlog) = &self.backlog else {
            return Ok(true);
        };
        tokio::select! {
            biased;
            () = self.stop.cancelled() => Ok(false),
            durable = backlog.until_durable(seq) => durable.map(|()| true),
        }
    }

    /// A batch from the queue: what is there, then lingering up to `linger` for more
    /// until the batch is full. `None` if the queue had nothing after all.
    pub(super) async fn take_batch(&mut self) -> Option<Batch> {
        let max_events = self.batch.events.max(1);
        let max_bytes = self.batch.bytes.get();
        let mut events: Vec<Arc<Event>> = Vec::new();
        let mut bytes = self.queue.take(max_events, max_bytes, &mut events);
        if events.is_empty() {
            return None;
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

    /// Back to `cursor` after a panic outside a delivery or a failed checkpoint: the
    /// events taken from the queue are read again from the backlog at the cursor
    /// (the queue is emptied, as they all come after it). Without a backlog they
    /// are lost; returns how many.
    pub(super) fn restart_from(&mut self, cursor: u64) -> usize {
        self.reader = None;
        if self.backlog.is_some() {
            self.state.resume_at(cursor);
            self.queue.drain_all();
            self.health.spilling();
            0
        } else {
            self.queue.depth().0
        }
    }

    /// The cursor once the queue's batches up to `delivered` are done (see
    /// `RouteState::cursor_after`).
    pub(super) fn position_after(&self, delivered: u64) -> u64 {
        self.state.cursor_after(delivered, &self.queue)
    }

    /// The next sequence number routing will see.
    pub(super) fn next_to_route(&self) -> u64 {
        self.state.next_to_route()
    }

    /// The sink holds everything before `next`: a spilled route reads from there.
    pub(super) fn skip_to(&self, next: u64) {
        self.state.skip_to(next);
    }

    /// (events, bytes) queued now.
    pub(super) fn depth(&self) -> (usize, usize) {
        self.queue.depth()
    }

    /// Empties the queue at the end; returns how many events were left in it.
    pub(super) fn drain(&self) -> usize {
        self.queue.drain_all().len()
    }
}
