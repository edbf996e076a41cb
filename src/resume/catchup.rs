//! One resumed subscription: stored events from its start, then live ones, with the
//! hand-over at an exact seq.
//!
//! 1. **Chase**, without a live subscription: read the spool or store in batches up
//!    to the exchange's head, again and again, until the head is within half a
//!    subscriber queue. A client that reads slowly only slows its own reading here;
//!    nothing is buffered for it.
//! 2. **Boundary**: register the live subscription under the exchange's order lock,
//!    which answers B, the first seq the subscription will see.
//! 3. **Close the gap**: read stored events up to B-1. Meanwhile the live events
//!    from B on wait in the subscription's queue, bounded by
//!    `exchange.subscriber_queue` as any subscriber's; overflowing it cuts the
//!    resumer off (RESOURCE_EXHAUSTED naming the last seq it was sent).
//! 4. **Live**: the subscription's events, from B on.
//!
//! Every seq below B is read from storage, every seq from B on comes live: nothing
//! is skipped or sent twice, and all of it in gateway order.

use std::sync::Arc;
use std::time::SystemTime;

use futures::StreamExt;
use tokio::sync::mpsc;
use tonic::Status;

use super::history::{Batch, History, HistoryError};
use super::metrics::Metrics;
use super::record::to_record;
use crate::event::Event;
use crate::exchange::{Exchange, SubscriptionEnd};
use crate::filter::Filter;
use crate::proto::eventgate::services::events::v1::Record;

/// One resumer's plan, its start already checked against what is kept.
pub(crate) struct Plan {
    pub(crate) filter: Filter,
    /// The first seq to send.
    pub(crate) from: u64,
    /// Stored events older than this are not sent (`since`).
    pub(crate) since: Option<SystemTime>,
    /// Stored events newer than this are not sent; the stream ends once the clock
    /// passes it.
    pub(crate) until: Option<SystemTime>,
}

/// Sends `plan`'s events into `tx` until the client leaves, `until` passes or the
/// subscription ends; the `Err` is the stream's final status.
pub(crate) async fn run(
    exchange: Exchange,
    mut history: History,
    plan: Plan,
    chasing: super::Chasing,
    tx: mpsc::Sender<Result<Record, Status>>,
    metrics: Arc<Metrics>,
) -> Result<(), Status> {
    let mut out = Sender {
        tx,
        plan: &plan,
        // Everything before `from` is the client's already.
        passed: plan.from - 1,
        metrics: &metrics,
    };
    let mut pos = plan.from;
    let margin = (exchange.subscriber_queue() / 2) as u64;
    loop {
        let head = exchange.next_seq();
        if head.saturating_sub(pos) <= margin {
            break;
        }
        while pos < head {
            if out.past_until() {
                return Ok(());
            }
            // Shutting down: a long catch-up must not hold the server's drain.
            if exchange.is_closed() {
                return Err(Status::unavailable(format!(
                    "eventgate is shutting down; resume with after_seq {}",
                    out.passed
                )));
            }
            pos = out.batch(history.read(pos, head).await, pos).await?;
        }
    }
    let (live, boundary) = exchange
        .subscribe_at(plan.filter.clone())
        .map_err(|e| e.status())?;
    // A subscriber of the exchange now, counted there.
    drop(chasing);
    tracing::debug!(from = plan.from, boundary, "resumer joined the live stream");
    while pos < boundary {
        pos = out.batch(history.read(pos, boundary).await, pos).await?;
    }
    metrics.switched.increment(1);
    let mut live = std::pin::pin!(live);
    // Without `until`, a deadline that never comes.
    let left = match plan.until {
        Some(t) => t.duration_since(SystemTime::now()).unwrap_or_default(),
        None => std::time::Duration::from_secs(100 * 365 * 24 * 3600),
    };
    let deadline = tokio::time::Instant::now() + left;
    loop {
        let next = tokio::select! {
            biased;
            () = tokio::time::sleep_until(deadline) => return Ok(()),
            // A client that left is noticed at once, not at the next event: its
            // subscriber slot is freed.
            () = out.tx.closed() => return Err(gone()),
            next = live.next() => next,
        };
        match next {
            Some(Ok(event)) => out.send(&event).await?,
            Some(Err(end)) => return Err(out.ended(&end)),
            None => return Ok(()),
        }
    }
}

struct Sender<'a> {
    tx: mpsc::Sender<Result<Record, Status>>,
    plan: &'a Plan,
    /// The client has every matching event up to here.
    passed: u64,
    metrics: &'a Metrics,
}

/// The client went away: nothing more to do.
fn gone() -> Status {
    Status::cancelled("the subscriber went away")
}

impl Sender<'_> {
    fn past_until(&self) -> bool {
        self.plan.until.is_some_and(|u| SystemTime::now() > u)
    }

    /// Sends a stored batch's matching events; answers where the next read starts.
    async fn batch(&mut self, read: Result<Batch, HistoryError>, from: u64) -> Result<u64, Status> {
        let batch = read.map_err(|e| self.history_failed(&e, from))?;
        if batch.missing > 0 {
            self.metrics.missing.increment(batch.missing);
            tracing::warn!(
                from,
                to = batch.next - 1,
                missing = batch.missing,
                "seqs in this range are in neither the spool nor the audit store (dropped \
                 under drop_oldest, or dead-lettered by the sqlite forwarder); skipped"
            );
        }
        let replayed = self.metrics.replayed(batch.origin);
        for event in &batch.events {
            if self.wanted_stored(event) {
                self.send(event).await?;
                replayed.increment(1);
            }
        }
        self.passed = self.passed.max(batch.next - 1);
        Ok(batch.next)
    }

    fn wanted_stored(&self, event: &Event) -> bool {
        let time = event
            .envelope
            .timestamp
            .and_then(|t| SystemTime::try_from(t).ok());
        if let (Some(since), Some(time)) = (self.plan.since, time)
            && time < since
        {
            return false;
        }
        if let (Some(until), Some(time)) = (self.plan.until, time)
            && time > until
        {
            return false;
        }
        self.plan.filter.matches(event)
    }

    async fn send(&mut self, event: &Event) -> Result<(), Status> {
        self.tx
            .send(Ok(to_record(event)))
            .await
            .map_err(|_| gone())?;
        self.passed = self.passed.max(event.seq);
        Ok(())
    }

    fn history_failed(&self, error: &HistoryError, from: u64) -> Status {
        tracing::warn!(error = %crate::errors::chain(error), from, "resumer cannot read history");
        match error {
            HistoryError::Released { last, .. } => Status::out_of_range(format!(
                "{}; the last seq this subscription passed is {}; resume with after_seq {last} \
                 to continue past them: out of range",
                crate::errors::chain(error),
                self.passed
            )),
            _ => Status::unavailable(format!(
                "{}; resume with after_seq {}",
                crate::errors::chain(error),
                self.passed
            )),
        }
    }

    /// The live subscription ended: a cut-off names where to resume.
    fn ended(&self, end: &SubscriptionEnd) -> Status {
        match end {
            SubscriptionEnd::CutOff { .. } | SubscriptionEnd::FiltersTooSlow { .. } => {
                self.metrics.cut_off.increment(1);
                Status::resource_exhausted(format!(
                    "{end}; the last seq delivered is {}: resume with after_seq {}",
                    self.passed, self.passed
                ))
            }
            SubscriptionEnd::Closed => {
                Status::unavailable(format!("{end}; resume with after_seq {}", self.passed))
            }
        }
    }
}
