//! One forwarder's routing state: whether it takes events from memory or has fallen
//! back to the backlog, and how far routing has got.
//!
//! The hand-over between the two is where events could be lost or doubled, so it is
//! decided under one lock that the router also holds while it routes:
//! - the router records every sequence number it routes (`last_routed`), matching or
//!   not, and while spilled it queues nothing;
//! - the worker, reading the backlog at `position`, rejoins the queue only when
//!   `position == last_routed + 1`: everything routed so far has been read from the
//!   backlog, and everything routed from now on goes to the queue.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;

use super::queue::{Pushed, Queue};
use crate::event::Event;

pub(super) struct RouteState {
    inner: Mutex<Inner>,
    /// Wakes the worker when its forwarder starts spilling.
    pub spilled: Notify,
}

struct Inner {
    last_routed: u64,
    /// The first sequence number not queued since the forwarder spilled.
    spilled_from: Option<u64>,
}

impl RouteState {
    /// `start` is the first sequence number this process will route; `resume_from`
    /// the forwarder's cursor in the backlog (events before `start` it has not yet
    /// processed are read from there first).
    pub(super) fn new(start: u64, resume_from: Option<u64>) -> Self {
        Self {
            inner: Mutex::new(Inner {
                last_routed: start.saturating_sub(1),
                spilled_from: resume_from.filter(|from| *from < start),
            }),
            spilled: Notify::new(),
        }
    }

    /// A forwarder being replaced (a reload): from `start` on it queues nothing, as if
    /// spilled; its successor reads the backlog from [`RouteState::resume_at`].
    pub(super) fn held(start: u64) -> Self {
        Self {
            inner: Mutex::new(Inner {
                last_routed: start.saturating_sub(1),
                spilled_from: Some(start),
            }),
            spilled: Notify::new(),
        }
    }

    /// A held forwarder's successor starts reading the backlog at `cursor` (where its
    /// predecessor stopped; never after what the hold began with).
    pub(super) fn resume_at(&self, cursor: u64) {
        let mut inner = self.lock();
        let from = inner.spilled_from.map_or(cursor, |from| from.min(cursor));
        inner.spilled_from = Some(from);
    }

    /// The next sequence number routing will see: the backlog holds everything
    /// before it.
    pub(super) fn next_to_route(&self) -> u64 {
        self.lock().last_routed + 1
    }

    /// A spilled forwarder's sink already holds everything before `next` durably:
    /// it reads the backlog from there instead.
    pub(super) fn skip_to(&self, next: u64) {
        let mut inner = self.lock();
        if let Some(from) = inner.spilled_from
            && from < next
            && next <= inner.last_routed + 1
        {
            inner.spilled_from = Some(next);
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Routes one event (in sequence order, under the exchange lock). `matches` says
    /// whether the forwarder's filter wants it.
    pub(super) fn route(
        &self,
        event: &Arc<Event>,
        matches: bool,
        queue: &Queue,
        size: usize,
    ) -> Pushed {
        let mut inner = self.lock();
        inner.last_routed = event.seq;
        if !matches {
            return Pushed::Queued;
        }
        if inner.spilled_from.is_some() {
            return Pushed::Spilled;
        }
        let pushed = queue.push(Arc::clone(event), size);
        if pushed == Pushed::Spilled {
            inner.spilled_from = Some(event.seq);
            drop(inner);
            self.spilled.notify_one();
        }
        pushed
    }

    pub(super) fn spilled_from(&self) -> Option<u64> {
        self.lock().spilled_from
    }

    /// The backlog reader is at `position`: rejoin the queue if routing has not got
    /// further. Returns whether it rejoined.
    pub(super) fn try_rejoin(&self, position: u64) -> bool {
        let mut inner = self.lock();
        if inner.spilled_from.is_some() && position == inner.last_routed + 1 {
            inner.spilled_from = None;
            return true;
        }
        false
    }

    /// The cursor once the queue's batches up to `delivered` are done: past every
    /// routed event if nothing is queued (non-matching events are done too), else
    /// just past the delivered ones.
    pub(super) fn cursor_after(&self, delivered: u64, queue: &Queue) -> u64 {
        let inner = self.lock();
        if inner.spilled_from.is_none() && queue.depth().0 == 0 {
            inner.last_routed + 1
        } else {
            delivered + 1
        }
    }
}
