//! What the gateway knows of an event beyond its envelope and its place in this
//! gateway's order: every field each record of an event (spool, audit store, dead
//! letters, JSON lines, Kafka, resumable Subscribe) writes and reads back.
//!
//! Every codec takes it apart with a pattern that names each field (no `..`) and
//! builds it back with a literal that names each field, so a field added here is a
//! compile error in every codec until that codec says what it does with it (writes
//! it, or leaves it out on purpose, with the reason next to it). The round trip
//! through each of them is `tests/conformance.rs`.

use std::sync::Arc;
use std::time::SystemTime;

use super::{EventId, Origin, Source, Workload};
use crate::publisher::Publisher;

/// An event's identity: who it is, where and when it entered, and what was known of
/// it when it was captured. Cheap to clone (names and workload are shared).
#[derive(Clone, Debug, PartialEq)]
pub struct Identity {
    pub id: EventId,
    pub received_at: SystemTime,
    pub source: Source,
    /// Who published or forwarded it (see [`crate::publisher`]); `None` for events
    /// from upstreams, from eventgate itself and from TCP clients without a
    /// certificate.
    pub publisher: Option<Publisher>,
    /// Received live, or reconstructed by a reconcile; [`Origin::Live`] unless set.
    pub origin: Origin,
    /// What the upstream's record of the event's container said when it was captured
    /// (pod, container name, image, labels); `None` for other events.
    pub workload: Option<Arc<Workload>>,
    /// The node the event was captured on (see `node.rs`). The exchange gives an
    /// event without one its own configured node when it takes its place, so every
    /// event this gateway captures carries it; an event taken in from another
    /// gateway (a later Kafka source) arrives with its own and keeps it. `None` only
    /// for events read from spool records written before nodes were kept: where
    /// they were captured is not recorded, so it is left unknown rather than guessed.
    pub node: Option<Arc<str>>,
    /// The event's seq on the gateway of its node, for an event taken in from another
    /// gateway (a Kafka source); `None` for events this gateway captured, whose seq
    /// is their own.
    pub node_seq: Option<u64>,
    /// How the event entered its node's gateway (`upstream:containerd`, `publish`,
    /// ..., as [`Source::describe`] says it there), for an event taken in from
    /// another gateway that said so; `None` for events this gateway captured, whose
    /// `source` is that. With it a central copy of a node's rows hashes as the node's
    /// audit store hashed them (`audit verify --node`).
    pub node_source: Option<Arc<str>>,
}

impl Identity {
    /// An event `id` from `source`, received at `received_at`: live, without a
    /// publisher, workload, node or node seq until set.
    pub fn new(id: EventId, received_at: SystemTime, source: Source) -> Self {
        Self {
            id,
            received_at,
            source,
            publisher: None,
            origin: Origin::Live,
            workload: None,
            node: None,
            node_seq: None,
            node_source: None,
        }
    }
}
