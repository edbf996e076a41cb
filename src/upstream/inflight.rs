//! An upstream's events between their place in the order and the disk.
//!
//! The task appends each event of the stream as it arrives and reads the next one
//! while earlier ones are still being synced, so a burst shares the spool's
//! fdatasyncs (one per group, as concurrent publishers share them) instead of paying
//! one each. What must follow durability (the snapshot recording the event, a
//! reconcile's completion after its marker) waits here and happens strictly in
//! append order, which is the stream's order: the snapshot is never ahead of the
//! spool.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;

use prost::Message;

use super::reconciler::Plan;
use crate::event::Event;
use crate::exchange::{AcceptError, Appended, Durable};

/// At most this many events in flight; at the bound the stream is held (containerd
/// keeps the rest) until the oldest is durable. A group commit only needs what
/// arrives during one fdatasync: at containerd's burst rate (about 10,000 events/s
/// measured here) and syncs of a few milliseconds, tens to a few hundred events. 4096
/// covers a sync of about 400 ms (a disk busy with other writers) at that rate
/// before the stream is held, while a stalled disk still stops the upstream within a
/// bounded amount of memory. An entry itself is small: the event is shared with the
/// spool's buffer and the forwarders' queues.
pub(super) const MAX_EVENTS: usize = 4096;

/// At most this many bytes of envelopes in flight: upstream events have no size
/// limit, so the count alone would not bound the memory they keep alive.
pub(super) const MAX_BYTES: usize = 16 << 20;

/// What happens once an event is durable.
pub(super) enum Then {
    /// One of the upstream's events (live or reconciled): the snapshot records it.
    Record,
    /// A reconcile's marker, after its events: the reconcile is complete.
    Reconciled(Box<Plan>),
}

struct Entry {
    event: Arc<Event>,
    durable: Durable,
    then: Then,
    bytes: usize,
}

pub(super) struct InFlight {
    entries: VecDeque<Entry>,
    bytes: usize,
    gauge: metrics::Gauge,
}

impl InFlight {
    pub(super) fn new(upstream: &str) -> Self {
        let gauge = metrics::gauge!("eventgate_upstream_inflight_events", "upstream" => upstream.to_owned());
        gauge.set(0.0);
        Self {
            entries: VecDeque::new(),
            bytes: 0,
            gauge,
        }
    }

    pub(super) fn push(&mut self, appended: Appended, then: Then) {
        let bytes = appended.event.envelope.encoded_len();
        self.bytes += bytes;
        self.entries.push_back(Entry {
            event: appended.event,
            durable: appended.durable,
            then,
            bytes,
        });
        self.gauge.set(self.entries.len() as f64);
    }

    /// Whether another event may be appended.
    pub(super) fn has_room(&self) -> bool {
        self.entries.len() < MAX_EVENTS && self.bytes < MAX_BYTES
    }

    pub(super) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The seq of the oldest event not durable yet.
    pub(super) fn first_seq(&self) -> Option<u64> {
        self.entries.front().map(|entry| entry.event.seq)
    }

    /// The oldest event once it is durable, or once its write failed; never resolves
    /// while nothing is in flight. Cancel-safe: the event stays until it resolves.
    pub(super) async fn next(&mut self) -> (Arc<Event>, Then, Result<(), AcceptError>) {
        let synced = std::future::poll_fn(|cx| match self.entries.front_mut() {
            Some(entry) => std::pin::Pin::new(&mut entry.durable).poll(cx),
            None => std::task::Poll::Pending,
        })
        .await;
        let Some(entry) = self.entries.pop_front() else {
            // Only reached with an entry: poll_fn resolves for the front one.
            return std::future::pending().await;
        };
        self.bytes -= entry.bytes;
        self.gauge.set(self.entries.len() as f64);
        (entry.event, entry.then, synced)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.gauge.set(0.0);
    }
}
