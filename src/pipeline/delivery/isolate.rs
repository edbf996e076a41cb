//! Delivering a batch so that one bad event cannot stop a forwarder: a panic in the
//! forwarder's code, or a permanent refusal of a batch, splits the batch until the
//! event at fault is alone, and that event goes to the dead letters (reason
//! `panicked`, or `permanent` with the sink's error) while the rest is delivered;
//! events the previous process died on go one at a time, and one it died on twice
//! is buried (reason `crashed`, see [`crate::pipeline::inflight`]) without being handed over
//! again. Each such event is counted and logged once.

use std::any::Any;
use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::FutureExt as _;

use super::{Delivery, Report};
use crate::deadletter::Reason;
use crate::event::Event;
use crate::forward::Batch;
use crate::pipeline::deadletter::reason_of;
use crate::pipeline::meters::LazyHistogram;
use crate::pipeline::retry::{self, Attempts, is_retryable};

/// The pause after a panic before the forwarder is called again, doubling per panic
/// in a row up to [`PANIC_BACKOFF_MAX`]: a forwarder that panics on everything must
/// not spin.
pub(super) const PANIC_BACKOFF_MIN: Duration = Duration::from_millis(100);
const PANIC_BACKOFF_MAX: Duration = Duration::from_secs(10);

/// How one piece of a batch went.
enum Outcome {
    Delivered,
    Failed(tower::BoxError, Attempts),
    Panicked(String),
    Stopped,
}

impl Delivery {
    /// Delivers `batch`, isolating what cannot be delivered. `false`: the shutdown
    /// deadline passed first (what was not delivered is counted in `report`).
    pub(in crate::pipeline) async fn deliver_isolating(
        &mut self,
        batch: Batch,
        report: &mut Report,
    ) -> bool {
        let mut pieces: VecDeque<Vec<Arc<Event>>> = VecDeque::new();
        pieces.push_back(batch.events().to_vec());
        while let Some(events) = pieces.pop_front() {
            if let Some(seq) = self.poison(&events) {
                let buried = self.bury_alone(&events, Reason::Crashed, &format!(
                    "the gateway process died twice while forwarder {:?} was delivering this event (seq {seq}), the second time with it alone; it is not handed to the forwarder again",
                    self.name
                ))
                .await;
                if !buried {
                    report.undelivered += undelivered(&events, &pieces);
                    return false;
                }
                continue;
            }
            if let Some(split) = self.split_suspects(&events) {
                for piece in split.into_iter().rev() {
                    pieces.push_front(piece);
                }
                continue;
            }
            let piece = batch_of(&events);
            let (first, last) = piece.seq_range();
            self.inflight.begin(first, last);
            let outcome = self.attempt(piece.clone()).await;
            self.inflight.end();
            match outcome {
                Outcome::Delivered => {
                    self.panic_backoff = PANIC_BACKOFF_MIN;
                    report.delivered += piece.len() as u64;
                    self.health.delivered(piece.len() as u64);
                    self.meters.forwarded.increment(piece.len() as u64);
                    record_delivery_age(&self.meters.delivery_seconds, &piece);
                }
                // The sink refused the batch for good, but perhaps for one event's
                // sake: halves are tried until the refused events are alone, so
                // only they become dead letters. Retryable failures are not split:
                // a sink that is down fails every half.
                Outcome::Failed(error, _) if events.len() > 1 && !is_retryable(&error) => {
                    self.meters.split_batches.increment(1);
                    tracing::warn!(
                        forwarder = %self.name,
                        events = events.len(),
                        first_seq = first,
                        last_seq = last,
                        error = %crate::errors::chain(&*error),
                        "the forwarder refused a batch permanently; delivering it in halves to find the events it refuses"
                    );
                    let (front, back) = events.split_at(events.len() / 2);
                    pieces.push_front(back.to_vec());
                    pieces.push_front(front.to_vec());
                    continue;
                }
                Outcome::Failed(error, attempts) => {
                    self.panic_backoff = PANIC_BACKOFF_MIN;
                    let reason = reason_of(&error);
                    self.meters.failed.get(reason).increment(piece.len() as u64);
                    tracing::error!(
                        forwarder = %self.name,
                        events = piece.len(),
                        first_seq = first,
                        last_seq = last,
                        reason = reason.as_str(),
                        error = %crate::errors::chain(&*error),
                        "gave up delivering a batch"
                    );
                    // Before the acknowledgement: once acked, the spool forgets, so
                    // events the dead-letter store cannot take (its disk is full)
                    // are held, never dropped.
                    let recorded = self
                        .dead_letters
                        .bury_until_recorded(
                            &piece,
                            reason,
                            crate::errors::chain(&*error),
                            attempts,
                            &self.health,
                            &self.stop,
                        )
                        .await;
                    if !recorded {
                        report.undelivered += undelivered(&events, &pieces);
                        return false;
                    }
                    report.failed += piece.len() as u64;
                    self.health.gave_up(piece.len() as u64);
                }
                Outcome::Panicked(message) => {
                    self.meters.panics.increment(1);
                    tracing::error!(
                        forwarder = %self.name,
                        events = events.len(),
                        first_seq = first,
                        last_seq = last,
                        panic = %message,
                        retry_in = ?self.panic_backoff,
                        "the forwarder panicked; isolating the event that causes it"
                    );
                    // Readiness names it while the forwarder keeps panicking.
                    self.health
                        .attempt_failed(1, format!("panicked: {message}"));
                    let pause = self.panic_backoff;
                    self.panic_backoff = (pause * 2).min(PANIC_BACKOFF_MAX);
                    tokio::select! {
                        biased;
                        () = self.stop.cancelled() => {
                            report.undelivered += events.len() as u64;
                            return false;
                        }
                        () = tokio::time::sleep(pause) => {}
                    }
                    if events.len() == 1 {
                        let buried = self
                            .bury_alone(
                                &events,
                                Reason::Panicked,
                                &format!("forwarder {:?} panicked: {message}", self.name),
                            )
                            .await;
                        if !buried {
                            report.undelivered += undelivered(&events, &pieces);
                            return false;
                        }
                    } else {
                        let (front, back) = events.split_at(events.len() / 2);
                        pieces.push_front(back.to_vec());
                        pieces.push_front(front.to_vec());
                    }
                }
                Outcome::Stopped => {
                    report.undelivered += undelivered(&events, &pieces);
                    return false;
                }
            }
            self.inflight.passed(last);
        }
        true
    }

    /// One attempt through the retry stack, a panic anywhere in it caught.
    async fn attempt(&mut self, piece: Batch) -> Outcome {
        let delivery = AssertUnwindSafe(retry::deliver(&mut self.stack, piece)).catch_unwind();
        tokio::select! {
            biased;
            outcome = delivery => match outcome {
                Ok((Ok(()), _)) => Outcome::Delivered,
                Ok((Err(error), attempts)) => Outcome::Failed(error, attempts),
                Err(panic) => Outcome::Panicked(panic_message(&*panic)),
            },
            () = self.stop.cancelled() => Outcome::Stopped,
        }
    }

    /// The event in `events` the previous processes died on twice, if it is there.
    fn poison(&self, events: &[Arc<Event>]) -> Option<u64> {
        let suspect = self.inflight.suspect?;
        match events {
            [event] if suspect.is_poison(event.seq) => Some(event.seq),
            _ => None,
        }
    }

    /// `events` cut so that every event the previous process died with in flight is
    /// alone; `None` when nothing needs cutting.
    fn split_suspects(&self, events: &[Arc<Event>]) -> Option<Vec<Vec<Arc<Event>>>> {
        let suspect = self.inflight.suspect?;
        if events.len() < 2 || !events.iter().any(|e| suspect.covers(e.seq)) {
            return None;
        }
        let mut pieces: Vec<Vec<Arc<Event>>> = Vec::new();
        for event in events {
            match pieces.last_mut() {
                Some(piece)
                    if !suspect.covers(event.seq)
                        && piece.last().is_some_and(|e| !suspect.covers(e.seq)) =>
                {
                    piece.push(Arc::clone(event));
                }
                _ => pieces.push(vec![Arc::clone(event)]),
            }
        }
        Some(pieces)
    }

    /// Records one event as dead with `reason`, counted and logged once. False if
    /// the store could not take it before the shutdown deadline (it stays in the
    /// spool, unacknowledged).
    async fn bury_alone(&mut self, events: &[Arc<Event>], reason: Reason, error: &str) -> bool {
        let piece = batch_of(events);
        let (seq, _) = piece.seq_range();
        self.meters.poison.get(reason).increment(piece.len() as u64);
        tracing::error!(
            forwarder = %self.name,
            seq,
            event_id = %events.first().map(|e| e.identity.id.to_string()).unwrap_or_default(),
            reason = reason.as_str(),
            error,
            "event set aside as a dead letter; the forwarder goes on with the next"
        );
        let recorded = self
            .dead_letters
            .bury_until_recorded(
                &piece,
                reason,
                error.to_owned(),
                Attempts::default(),
                &self.health,
                &self.stop,
            )
            .await;
        if recorded {
            self.health.gave_up(piece.len() as u64);
            self.inflight.passed(seq);
        }
        recorded
    }
}

/// The events of the piece in hand and of every piece after it.
fn undelivered(events: &[Arc<Event>], pieces: &VecDeque<Vec<Arc<Event>>>) -> u64 {
    events.len() as u64 + pieces.iter().map(|p| p.len() as u64).sum::<u64>()
}

fn batch_of(events: &[Arc<Event>]) -> Batch {
    let bytes = events
        .iter()
        .map(|e| prost::Message::encoded_len(&e.envelope))
        .sum();
    Batch::new(events.to_vec(), bytes)
}

fn record_delivery_age(histogram: &LazyHistogram, batch: &Batch) {
    let oldest = batch.events().first().map(|e| e.identity.received_at);
    if let Some(age) = oldest.and_then(|t| SystemTime::now().duration_since(t).ok()) {
        histogram.record(age.as_secs_f64());
    }
}

/// The text a panic was raised with (`panic!("...")` gives a `&str` or a `String`).
fn panic_message(panic: &(dyn Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}
