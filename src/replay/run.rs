//! The sending loop: chunks from the store become batches, each goes through the
//! pipeline's retry stack ([`crate::pipeline::retry`]) exactly as the gateway would
//! send it, and the state file moves after each acknowledged batch.

use std::sync::Arc;
use std::time::Duration;

use prost::Message;
use tokio_util::sync::CancellationToken;

use super::progress::Progress;
use super::rate::TokenBucket;
use super::source::Chunks;
use super::state::{State, StateFile};
use super::target::Target;
use super::{ReplayError, Summary};
use crate::event::Event;
use crate::forward::Batch;
use crate::pipeline::retry::{self, DeliveryStack};

/// How long an interrupted replay waits for the batch in flight before abandoning it.
pub(super) const IN_FLIGHT_GRACE: Duration = Duration::from_secs(10);

/// Asks a replay to stop: `interrupt` at the next batch boundary (the batch in flight
/// may finish, for at most [`IN_FLIGHT_GRACE`]), `abandon` at once.
#[derive(Clone, Debug, Default)]
pub(crate) struct Stop {
    pub interrupt: CancellationToken,
    pub abandon: CancellationToken,
}

/// Events gathered for the next batch.
#[derive(Default)]
struct Pending {
    events: Vec<Arc<Event>>,
    /// The row_id of each event.
    rows: Vec<i64>,
    bytes: usize,
    /// Events the forwarder's filters leave out, since the last batch.
    skipped: u64,
    /// eventgate's own events the target refuses, since the last batch.
    own_skipped: u64,
    /// The last row_id the batch covers (sent or skipped).
    last_row: i64,
}

pub(super) struct Engine {
    pub target: Target,
    pub stack: DeliveryStack,
    pub state: StateFile,
    pub bucket: Option<TokenBucket>,
    pub progress: Progress,
    pub stop: Stop,
}

enum Flushed {
    Done,
    Interrupted,
}

/// What a replay's state counted: before a run, to tell what the run itself did.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Counts {
    sent: u64,
    skipped: u64,
    own_skipped: u64,
}

impl Counts {
    fn of(state: &State) -> Self {
        Self {
            sent: state.sent,
            skipped: state.skipped,
            own_skipped: state.own_skipped,
        }
    }
}

impl Engine {
    /// Sends every chunk. Returns how many events this run sent and skipped.
    pub(super) async fn run(&mut self, mut chunks: Chunks) -> Result<Summary, ReplayError> {
        let mut pending = Pending::default();
        let before = Counts::of(&self.state.state);
        let limit = match &self.bucket {
            Some(bucket) => self.target.batch_events.min(bucket.capacity()),
            None => self.target.batch_events,
        }
        .max(1);
        loop {
            let next = tokio::select! {
                biased;
                () = self.stop.interrupt.cancelled() => return Err(self.interrupted()),
                next = chunks.next() => next,
            };
            let Some(chunk) = next else { break };
            for stored in chunk? {
                let event = &stored.event;
                let refused = self.target.refuses_own
                    && crate::markers::is_own(event.namespace(), event.topic());
                let wanted = !refused
                    && match &self.target.filter {
                        Some(filter) => filter.matches(&event.record_fields()),
                        None => true,
                    };
                if refused {
                    pending.own_skipped += 1;
                } else if wanted {
                    let size = stored.event.envelope.encoded_len();
                    let full = pending.events.len() >= limit
                        || (!pending.events.is_empty()
                            && pending.bytes.saturating_add(size) > self.target.batch_bytes);
                    // The event that does not fit opens the next batch.
                    if full && let Flushed::Interrupted = self.flush(&mut pending).await? {
                        return Err(self.interrupted());
                    }
                    pending.bytes += size;
                    pending.events.push(Arc::new(stored.event));
                    pending.rows.push(stored.row_id);
                } else {
                    pending.skipped += 1;
                }
                pending.last_row = stored.row_id;
            }
        }
        if let Flushed::Interrupted = self.flush(&mut pending).await? {
            return Err(self.interrupted());
        }
        Ok(self.summary(before))
    }

    /// What this run did, given what earlier runs had done.
    pub(super) fn summary(&self, before: Counts) -> Summary {
        let state = &self.state.state;
        Summary {
            target: self.target.label.clone(),
            sent: state.sent - before.sent,
            skipped: state.skipped - before.skipped,
            own_skipped: state.own_skipped - before.own_skipped,
            earlier: before.sent + before.skipped + before.own_skipped,
            total: state.total,
            elapsed: self.progress.elapsed(),
            rate: self.progress.rate(),
        }
    }

    fn interrupted(&self) -> ReplayError {
        ReplayError::Interrupted {
            done: self.state.state.done(),
            total: self.state.state.total,
        }
    }

    /// Sends the pending batch (if any) and records it, skipped events included.
    async fn flush(&mut self, pending: &mut Pending) -> Result<Flushed, ReplayError> {
        if self.stop.interrupt.is_cancelled() {
            return Ok(Flushed::Interrupted);
        }
        let events = std::mem::take(&mut pending.events);
        let rows = std::mem::take(&mut pending.rows);
        let count = events.len() as u64;
        let mut interrupted = false;
        if !events.is_empty() {
            if let Some(bucket) = &mut self.bucket {
                tokio::select! {
                    biased;
                    () = self.stop.interrupt.cancelled() => return Ok(Flushed::Interrupted),
                    () = bucket.take(events.len()) => {}
                }
            }
            let batch = Batch::new(events, std::mem::take(&mut pending.bytes));
            let (first_seq, last_seq) = batch.seq_range();
            // `None`: abandoned after an interrupt.
            let finished = {
                let delivery = retry::deliver(&mut self.stack, batch.clone());
                tokio::pin!(delivery);
                tokio::select! {
                    biased;
                    outcome = &mut delivery => Some(outcome),
                    () = self.stop.interrupt.cancelled() => {
                        interrupted = true;
                        self.progress.note(&format!(
                            "interrupted: waiting up to {}s for the batch in flight (interrupt again to abandon it)",
                            IN_FLIGHT_GRACE.as_secs()
                        ));
                        tokio::select! {
                            outcome = &mut delivery => Some(outcome),
                            () = tokio::time::sleep(IN_FLIGHT_GRACE) => None,
                            () = self.stop.abandon.cancelled() => None,
                        }
                    }
                }
            };
            let Some((result, attempts)) = finished else {
                abandoned(first_seq, last_seq);
                self.keep_partial(&batch, &rows).await?;
                return Ok(Flushed::Interrupted);
            };
            if let Err(error) = result {
                self.keep_partial(&batch, &rows).await?;
                return Err(ReplayError::Delivery {
                    target: self.target.label.clone(),
                    first_seq,
                    last_seq,
                    attempts: attempts.count,
                    gave_up: match retry::is_retryable(&error) {
                        true => "retries exhausted",
                        false => "permanent error",
                    },
                    reason: crate::errors::chain(&*error),
                    done: self.state.state.done(),
                    total: self.state.state.total,
                });
            }
        }
        pending.bytes = 0;
        let skipped = std::mem::take(&mut pending.skipped);
        let own_skipped = std::mem::take(&mut pending.own_skipped);
        if count + skipped + own_skipped > 0 {
            let state = &mut self.state.state;
            state.after = pending.last_row;
            state.sent += count;
            state.skipped += skipped;
            state.own_skipped += own_skipped;
            self.save().await?;
            self.progress.advance(count + skipped + own_skipped);
        }
        Ok(match interrupted {
            true => Flushed::Interrupted,
            false => Flushed::Done,
        })
    }
}

fn abandoned(first_seq: u64, last_seq: u64) {
    tracing::warn!(
        first_seq,
        last_seq,
        "abandoned the batch in flight; the target may have part of it, and a resumed replay sends it again"
    );
}

impl Engine {
    /// Records the part of a failed batch that an event-by-event target took, so a
    /// resumed replay does not send it again.
    async fn keep_partial(&mut self, batch: &Batch, rows: &[i64]) -> Result<(), ReplayError> {
        let Some(target) = &self.target.partial else {
            return Ok(());
        };
        let taken = target.taken(batch).min(rows.len());
        if taken == 0 {
            return Ok(());
        }
        let state = &mut self.state.state;
        state.after = rows[taken - 1];
        state.sent += taken as u64;
        self.save().await?;
        self.progress.advance(taken as u64);
        Ok(())
    }

    /// Writes the state file off the async thread (it syncs).
    pub(super) async fn save(&mut self) -> Result<(), ReplayError> {
        let mut file = StateFile {
            path: self.state.path.clone(),
            state: self.state.state.clone(),
        };
        let saved = tokio::task::spawn_blocking(move || file.save().map(|()| file.state))
            .await
            .map_err(ReplayError::Task)??;
        self.state.state = saved;
        Ok(())
    }
}
