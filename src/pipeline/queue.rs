//! One forwarder's bounded queue: limited in events and in bytes, with an overflow
//! policy, one consumer (the forwarder's worker) and any number of producers.
//!
//! Producers push under the exchange's lock, so pushing never waits. `block` is
//! enforced before that, at admission: a publisher awaits [`Queue::wait_for_room`]
//! and only then takes the lock. Concurrent publishers can therefore overshoot the
//! limit by at most one event each, which keeps the lock free of waiting.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::settings::{Overflow, QueueSettings};
use crate::event::Event;

/// What a push did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Pushed {
    Queued,
    /// The queue was full: `dropped` events were discarded (the new one for
    /// `drop_newest`, old ones for `drop_oldest`).
    Dropped(usize),
    /// Full under `spill` with a backlog to fall back on: not queued.
    Spilled,
    Closed,
}

pub(crate) struct Queue {
    settings: QueueSettings,
    /// `spill` needs somewhere to spill to; without it a full queue behaves as `block`.
    spills: bool,
    state: Mutex<State>,
    /// Wakes the consumer when events arrive or the queue closes.
    ready: Notify,
    /// Wakes blocked publishers when the consumer makes room.
    room: Notify,
}

struct State {
    items: VecDeque<(Arc<Event>, usize)>,
    bytes: usize,
    closed: bool,
}

impl Queue {
    #[cfg(test)]
    pub fn new(settings: QueueSettings) -> Self {
        Self::with_backlog(settings, false)
    }

    /// A queue whose consumer can read what did not fit from a backlog.
    pub(crate) fn with_backlog(settings: QueueSettings, backlog: bool) -> Self {
        Self {
            spills: backlog && settings.overflow == Overflow::Spill,
            settings,
            state: Mutex::new(State {
                items: VecDeque::new(),
                bytes: 0,
                closed: false,
            }),
            ready: Notify::new(),
            room: Notify::new(),
        }
    }

    pub(crate) fn settings(&self) -> &QueueSettings {
        &self.settings
    }

    /// Whether publishers must wait for room (`block`, or `spill` with no backlog).
    pub(crate) fn blocks(&self) -> bool {
        match self.settings.overflow {
            Overflow::Block => true,
            Overflow::Spill => !self.spills,
            Overflow::DropNewest | Overflow::DropOldest => false,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn is_full(&self, state: &State, incoming: usize) -> bool {
        // An event larger than the byte limit still fits into an empty queue, or it
        // could never be delivered.
        !state.items.is_empty()
            && (state.items.len() >= self.settings.events
                || state.bytes + incoming > self.settings.bytes.get())
    }

    /// Adds an event of `size` encoded bytes, applying the overflow policy.
    pub(crate) fn push(&self, event: Arc<Event>, size: usize) -> Pushed {
        let mut state = self.lock();
        if state.closed {
            return Pushed::Closed;
        }
        let mut dropped = 0;
        if self.is_full(&state, size) {
            match self.settings.overflow {
                // Admission already waited for room; a few concurrent publishers may
                // overshoot by one event each.
                Overflow::Spill if self.spills => return Pushed::Spilled,
                Overflow::Block | Overflow::Spill => {}
                Overflow::DropNewest => return Pushed::Dropped(1),
                Overflow::DropOldest => {
                    while self.is_full(&state, size) {
                        let Some((_, old)) = state.items.pop_front() else {
                            break;
                        };
                        state.bytes -= old;
                        dropped += 1;
                    }
                }
            }
        }
        state.items.push_back((event, size));
        state.bytes += size;
        drop(state);
        self.ready.notify_one();
        if dropped > 0 {
            Pushed::Dropped(dropped)
        } else {
            Pushed::Queued
        }
    }

    /// Waits until the queue has room for one more event, or `deadline` passes
    /// (returns false). Only meaningful for `overflow = "block"`.
    pub(crate) async fn wait_for_room(&self, deadline: Instant) -> bool {
        loop {
            let room = self.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            {
                let state = self.lock();
                if state.closed || !self.is_full(&state, 0) {
                    return true;
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || tokio::time::timeout(left, room).await.is_err() {
                return false;
            }
        }
    }

    /// Moves up to `max_events` / `max_bytes` into `into`. An event larger than
    /// `max_bytes` is still taken when `into` is empty, so it goes out alone.
    pub(crate) fn take(
        &self,
        max_events: usize,
        max_bytes: usize,
        into: &mut Vec<Arc<Event>>,
    ) -> usize {
        let mut state = self.lock();
        let mut bytes = 0;
        let mut taken = 0;
        while taken < max_events {
            let Some((_, size)) = state.items.front() else {
                break;
            };
            if (taken > 0 || !into.is_empty()) && bytes + size > max_bytes {
                break;
            }
            let Some((event, size)) = state.items.pop_front() else {
                break;
            };
            state.bytes -= size;
            bytes += size;
            taken += 1;
            into.push(event);
        }
        drop(state);
        if taken > 0 {
            self.room.notify_waiters();
        }
        bytes
    }

    /// Waits until at least one event is queued or the queue is closed and empty
    /// (returns false then), or `timeout` passes (returns true: look again).
    pub(crate) async fn wait_ready(&self, timeout: Option<Duration>) -> bool {
        let ready = self.ready.notified();
        tokio::pin!(ready);
        ready.as_mut().enable();
        {
            let state = self.lock();
            if !state.items.is_empty() {
                return true;
            }
            if state.closed {
                return false;
            }
        }
        match timeout {
            None => ready.await,
            Some(timeout) => {
                let _ = tokio::time::timeout(timeout, ready).await;
            }
        }
        true
    }

    /// (events, bytes) queued now.
    pub(crate) fn depth(&self) -> (usize, usize) {
        let state = self.lock();
        (state.items.len(), state.bytes)
    }

    /// When the oldest queued event was received.
    pub(crate) fn front_received_at(&self) -> Option<std::time::SystemTime> {
        self.lock()
            .items
            .front()
            .map(|(event, _)| event.identity.received_at)
    }

    /// Refuses further pushes; the consumer drains what is queued.
    pub(crate) fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_one();
        self.room.notify_waiters();
    }

    /// Empties the queue, returning the events left undelivered.
    pub(crate) fn drain_all(&self) -> Vec<Arc<Event>> {
        let mut state = self.lock();
        state.bytes = 0;
        let items = std::mem::take(&mut state.items);
        drop(state);
        self.room.notify_waiters();
        items.into_iter().map(|(event, _)| event).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Source;
    use crate::proto::containerd::types::Envelope;
    use crate::testing;
    use crate::units::ByteSize;

    /// A queue holds events and their byte counts; it looks at nothing else.
    fn event(seq: u64) -> Arc<Event> {
        testing::event(seq)
            .source(Source::Internal)
            .envelope(Envelope::default())
            .arc()
    }

    fn queue(events: usize, bytes: u64, overflow: Overflow) -> Queue {
        Queue::new(QueueSettings {
            events,
            bytes: ByteSize(bytes),
            overflow,
            block_timeout: Duration::from_millis(10),
        })
    }

    fn seqs(queue: &Queue) -> Vec<u64> {
        let mut out = Vec::new();
        queue.take(usize::MAX, usize::MAX, &mut out);
        out.iter().map(|e| e.seq).collect()
    }

    #[test]
    fn drop_newest_keeps_the_old_ones() {
        let q = queue(2, 1000, Overflow::DropNewest);
        assert_eq!(q.push(event(1), 10), Pushed::Queued);
        assert_eq!(q.push(event(2), 10), Pushed::Queued);
        assert_eq!(q.push(event(3), 10), Pushed::Dropped(1));
        assert_eq!(seqs(&q), [1, 2]);
    }

    #[test]
    fn drop_oldest_makes_room_by_bytes_too() {
        let q = queue(10, 120, Overflow::DropOldest);
        for seq in 1..=4 {
            assert_eq!(q.push(event(seq), 30), Pushed::Queued);
        }
        // 150 bytes would exceed 120: one old event goes.
        assert_eq!(q.push(event(5), 30), Pushed::Dropped(1));
        // A large one pushes out as many as it takes.
        assert_eq!(q.push(event(6), 90), Pushed::Dropped(3));
        assert_eq!(seqs(&q), [5, 6]);
        assert_eq!(q.depth(), (0, 0));
    }

    #[test]
    fn an_event_larger_than_the_queue_still_fits_alone() {
        let q = queue(10, 100, Overflow::DropNewest);
        assert_eq!(q.push(event(1), 500), Pushed::Queued);
        assert_eq!(q.push(event(2), 1), Pushed::Dropped(1));
        assert_eq!(seqs(&q), [1]);
    }

    #[test]
    fn take_respects_batch_limits_but_always_takes_one() {
        let q = queue(10, 10_000, Overflow::Block);
        for seq in 1..=5 {
            q.push(event(seq), 100);
        }
        let mut out = Vec::new();
        assert_eq!(q.take(2, usize::MAX, &mut out), 200);
        assert_eq!(q.take(10, 250, &mut out), 200);
        // A non-empty batch takes nothing that would overflow its byte budget...
        assert_eq!(q.take(10, 50, &mut out), 0);
        // ...but an empty one takes an oversized event, which then goes alone.
        let mut alone = Vec::new();
        assert_eq!(q.take(10, 50, &mut alone), 100);
        assert_eq!(out.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2, 3, 4]);
        assert_eq!(alone[0].seq, 5);
    }

    #[tokio::test(start_paused = true)]
    async fn blocked_publishers_wait_for_room_until_their_deadline() {
        let q = Arc::new(queue(1, 1000, Overflow::Block));
        q.push(event(1), 10);
        let deadline = Instant::now() + Duration::from_millis(50);
        // Full and nobody consumes: the wait ends at the deadline.
        assert!(!q.wait_for_room(deadline).await);

        let waiter = {
            let q = Arc::clone(&q);
            tokio::spawn(async move {
                q.wait_for_room(Instant::now() + Duration::from_secs(60))
                    .await
            })
        };
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        let mut out = Vec::new();
        q.take(1, usize::MAX, &mut out);
        assert!(waiter.await.unwrap());
    }

    #[test]
    fn closed_queues_refuse_pushes() {
        let q = queue(10, 1000, Overflow::Block);
        q.push(event(1), 1);
        q.close();
        assert_eq!(q.push(event(2), 1), Pushed::Closed);
        assert_eq!(q.drain_all().len(), 1);
    }
}
