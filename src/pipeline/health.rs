//! One forwarder's health as the admin endpoint reports it: whether its current batch
//! is failing, since when it has been delivering from the spool instead of its live
//! queue, whether its worker has stopped, and a few running totals for `eventgate
//! status`. Written by the router, the worker and the retry policy; read on scrape.
//!
//! Cheap on the hot path: the router only touches it when an event spills or is
//! dropped, the worker once per batch, the retry policy once per failed attempt.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::SystemTime;

/// The current batch's failure streak: from its first failed attempt until a batch is
/// delivered or given up on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failing {
    /// When the first attempt of the streak failed.
    pub since: SystemTime,
    /// Failed attempts of the current batch.
    pub attempts: u32,
    pub last_error: String,
}

/// A point-in-time copy of a forwarder's health.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HealthSnapshot {
    pub failing: Option<Failing>,
    /// Delivering from the spool (its queue overflowed, or backlog after a restart)
    /// since this time.
    pub spilling_since: Option<SystemTime>,
    /// The worker has stopped (shutdown, or it died).
    pub closed: bool,
    /// Receive time of the oldest event the forwarder has not finished with, when
    /// known (the batch in flight, else the front of its queue).
    pub oldest_pending: Option<SystemTime>,
    pub delivered: u64,
    pub retries: u64,
    pub dropped: u64,
    pub dead_lettered: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Health {
    inner: Mutex<Inner>,
    closed: AtomicBool,
    delivered: AtomicU64,
    retries: AtomicU64,
    dropped: AtomicU64,
    dead_lettered: AtomicU64,
}

#[derive(Debug, Default)]
struct Inner {
    failing: Option<Failing>,
    spilling_since: Option<SystemTime>,
    in_flight_since: Option<SystemTime>,
}

impl Health {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A retryable attempt failed; `attempt` counts the current batch's failures.
    pub(crate) fn attempt_failed(&self, attempt: u32, error: String) {
        self.retries.fetch_add(1, Ordering::Relaxed);
        let mut inner = self.lock();
        let since = inner
            .failing
            .as_ref()
            .map_or_else(SystemTime::now, |f| f.since);
        inner.failing = Some(Failing {
            since,
            attempts: attempt,
            last_error: error,
        });
    }

    /// A batch whose oldest event arrived at `oldest` is on its way to the sink.
    pub(crate) fn batch_started(&self, oldest: Option<SystemTime>) {
        self.lock().in_flight_since = oldest;
    }

    /// The batch was delivered: the failure streak, if any, is over.
    pub(crate) fn delivered(&self, events: u64) {
        self.delivered.fetch_add(events, Ordering::Relaxed);
        let mut inner = self.lock();
        inner.failing = None;
        inner.in_flight_since = None;
    }

    /// The batch was given up on (dead-lettered). The forwarder moves on to the next
    /// batch, so it counts as able to deliver again until that one fails.
    pub(crate) fn gave_up(&self, events: u64) {
        self.dead_lettered.fetch_add(events, Ordering::Relaxed);
        let mut inner = self.lock();
        inner.failing = None;
        inner.in_flight_since = None;
    }

    /// Called for every spilled event; only the first of a spell records the time.
    pub(crate) fn spilling(&self) {
        let mut inner = self.lock();
        if inner.spilling_since.is_none() {
            inner.spilling_since = Some(SystemTime::now());
        }
    }

    /// Back on the live queue.
    pub(crate) fn rejoined(&self) {
        self.lock().spilling_since = None;
    }

    pub(crate) fn dropped(&self, events: u64) {
        self.dropped.fetch_add(events, Ordering::Relaxed);
    }

    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
    }

    /// `queue_front` is the receive time of the oldest queued event, used when no
    /// batch is in flight.
    pub(crate) fn snapshot(&self, queue_front: Option<SystemTime>) -> HealthSnapshot {
        let inner = self.lock();
        HealthSnapshot {
            failing: inner.failing.clone(),
            spilling_since: inner.spilling_since,
            closed: self.closed.load(Ordering::Acquire),
            oldest_pending: inner.in_flight_since.or(queue_front),
            delivered: self.delivered.load(Ordering::Relaxed),
            retries: self.retries.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
            dead_lettered: self.dead_lettered.load(Ordering::Relaxed),
        }
    }
}

/// Marks the forwarder closed when its worker ends, however it ends (a panic too).
pub(super) struct CloseOnDrop(pub std::sync::Arc<Health>);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.0.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_streak_keeps_its_start_and_ends_with_a_delivery_or_a_give_up() {
        let health = Health::default();
        health.attempt_failed(1, "connection refused".into());
        let first = health.snapshot(None).failing.unwrap();
        health.attempt_failed(2, "timed out".into());
        let second = health.snapshot(None).failing.unwrap();
        assert_eq!(second.since, first.since);
        assert_eq!(
            (second.attempts, second.last_error.as_str()),
            (2, "timed out")
        );
        health.delivered(5);
        let snap = health.snapshot(None);
        assert_eq!(snap.failing, None);
        assert_eq!((snap.delivered, snap.retries), (5, 2));

        health.attempt_failed(1, "down".into());
        health.gave_up(3);
        let snap = health.snapshot(None);
        assert_eq!(snap.failing, None);
        assert_eq!(snap.dead_lettered, 3);
    }

    #[test]
    fn the_batch_in_flight_is_older_than_the_queue_front() {
        let health = Health::default();
        let early = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(10);
        let later = early + std::time::Duration::from_secs(5);
        assert_eq!(health.snapshot(Some(later)).oldest_pending, Some(later));
        health.batch_started(Some(early));
        assert_eq!(health.snapshot(Some(later)).oldest_pending, Some(early));
        health.delivered(1);
        assert_eq!(health.snapshot(None).oldest_pending, None);
    }

    #[test]
    fn a_spell_of_spilling_starts_once_and_ends_on_rejoin() {
        let health = Health::default();
        health.spilling();
        let since = health.snapshot(None).spilling_since.unwrap();
        health.spilling();
        assert_eq!(health.snapshot(None).spilling_since, Some(since));
        health.rejoined();
        assert_eq!(health.snapshot(None).spilling_since, None);
    }
}
