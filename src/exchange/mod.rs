//! The event exchange: accepts envelopes (Publish, Forward, upstreams), gives each a
//! place in one gateway-wide order, and fans them out to live subscribers.
//!
//! Differences from containerd's exchange, all deliberate:
//! - Each subscriber has a *bounded* queue. containerd queues without limit, so one
//!   stuck client can grow the daemon's memory forever; here a subscriber that falls
//!   `subscriber_queue` events behind is cut off with RESOURCE_EXHAUSTED and counted.
//!   Publishers and other subscribers never wait for it either way.
//! - Subscribers' filters are not matched while publishing: each filtered subscriber
//!   matches on a thread of its own (see [`matching`]), so its filters' cost is
//!   paid by it, not by every publisher.
//! - A payload is decoded at most once per event, not once per subscriber per selector.
//! - Forward rejects a missing timestamp (as containerd 1.6 does; 2.x silently turns it
//!   into 1970-01-01).
//! - Publish and Forward refuse the namespace `eventgate` and topics under
//!   `/eventgate/`: a client's event there could pass for the gateway's own markers
//!   or signed checkpoints, which come in by the gateway's own way
//!   ([`Incoming::checked`]) or from the gateway that made them
//!   ([`Incoming::taken_in`]).

mod append;
mod dropped;
pub(crate) mod grpc;
mod incoming;
pub(crate) mod limits;
mod matching;
pub(crate) mod metric_table;
mod settings;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use thiserror::Error;
use tokio::sync::mpsc::{self, error::TrySendError};

pub(crate) use append::{Appended, Durable};
pub(crate) use grpc::{
    EventsService, NAMESPACE_HEADER, Subscription, SubscriptionEnd, compile_filters,
};
pub use incoming::Incoming;
pub(crate) use limits::Limit;
pub use limits::LimitSettings;
pub use settings::ExchangeSettings;

use crate::event::{Event, Source};
use crate::filter::Filter;
use crate::identifiers::{self, IdentifierError, TopicError};
use crate::pipeline::Router;
use crate::spool::{DiskLow, Spool, SpoolError, SpoolFull};
use matching::{CutOff, CutOffReason, Matcher};

/// Go's zero `time.Time` as containerd 1.6 puts it on the wire for an unset timestamp.
const GO_ZERO_TIME_SECONDS: i64 = -62_135_596_800;

/// Why an envelope was refused. The texts are containerd's, so clients that match on
/// them (or people who search for them) see what the daemon would have said.
#[derive(Debug, Error)]
pub enum AcceptError {
    #[error("failed publishing event: namespace is required: failed precondition")]
    NamespaceRequired,
    #[error("failed publishing event: namespace validation: {0}: invalid argument")]
    InvalidNamespace(#[source] IdentifierError),
    #[error("failed publishing event: namespace header is not valid ASCII: invalid argument")]
    UnreadableNamespace,
    #[error("envelope topic {topic:?}: {source}: invalid argument")]
    InvalidTopic { topic: String, source: TopicError },
    #[error("event envelope has invalid namespace: {0}: invalid argument")]
    InvalidEnvelopeNamespace(#[source] IdentifierError),
    #[error("timestamp must be set on forwarded event: invalid argument")]
    MissingTimestamp,
    #[error(
        "timestamp {seconds}s {nanos}ns is not a valid time (nanos must be 0..1e9): invalid argument"
    )]
    InvalidTimestamp { seconds: i64, nanos: i32 },
    #[error("forward request has no envelope: invalid argument")]
    MissingEnvelope,
    /// A client's event in the gateway's own namespace could pass for one of its
    /// markers or signed checkpoints.
    #[error(
        "namespace {:?} is reserved for eventgate's own events (markers, signed \
         checkpoints); publish under another namespace: invalid argument",
        crate::markers::NAMESPACE
    )]
    ReservedNamespace,
    /// The same for a topic under `/eventgate/`, in any namespace.
    #[error(
        "topic {topic:?} is reserved: topics under {}/ are eventgate's own events; \
         publish under another topic: invalid argument",
        crate::markers::TOPIC_ROOT
    )]
    ReservedTopic { topic: String },
    #[error("{}", limits::event_too_large("event", *size, *limit))]
    TooLarge { size: usize, limit: usize },
    #[error(transparent)]
    QueueFull(#[from] crate::pipeline::QueueFull),
    #[error(transparent)]
    SpoolFull(#[from] SpoolFull),
    /// Free disk space is below `spool.min_free`: kept for what was accepted.
    #[error(transparent)]
    DiskLow(#[from] DiskLow),
    /// The event could not be made durable (a disk error); it may have reached
    /// subscribers, but it was not acknowledged.
    #[error(
        "the event could not be written to the spool: {}",
        crate::errors::chain(.0)
    )]
    Spool(#[source] SpoolError),
    #[error("eventgate is shutting down")]
    Closed,
}

impl AcceptError {
    /// The gRPC code containerd uses for this error.
    pub fn code(&self) -> tonic::Code {
        match self {
            AcceptError::NamespaceRequired => tonic::Code::FailedPrecondition,
            AcceptError::Closed => tonic::Code::Unavailable,
            AcceptError::QueueFull(_) | AcceptError::SpoolFull(_) | AcceptError::DiskLow(_) => {
                tonic::Code::ResourceExhausted
            }
            AcceptError::Spool(_) => tonic::Code::Unavailable,
            _ => tonic::Code::InvalidArgument,
        }
    }

    /// A low-cardinality label for the rejection counter.
    pub fn reason(&self) -> &'static str {
        match self {
            AcceptError::NamespaceRequired => "namespace_required",
            AcceptError::InvalidNamespace(_)
            | AcceptError::UnreadableNamespace
            | AcceptError::InvalidEnvelopeNamespace(_) => "invalid_namespace",
            AcceptError::InvalidTopic { .. } => "invalid_topic",
            AcceptError::MissingTimestamp | AcceptError::InvalidTimestamp { .. } => {
                "invalid_timestamp"
            }
            AcceptError::MissingEnvelope => "missing_envelope",
            AcceptError::ReservedNamespace | AcceptError::ReservedTopic { .. } => "reserved",
            AcceptError::TooLarge { .. } => "too_large",
            AcceptError::Closed => "shutting_down",
            AcceptError::QueueFull(_) => "queue_full",
            AcceptError::SpoolFull(_) => "spool_full",
            AcceptError::DiskLow(_) => "disk_reserve",
            AcceptError::Spool(_) => "spool_error",
        }
    }
}

/// Why a subscription was refused.
#[derive(Debug, Error)]
pub enum SubscribeError {
    #[error("eventgate is shutting down")]
    Closed,
    #[error(
        "{limit} subscribers are connected, as many as exchange.limits.max_subscribers allows; \
         try again later"
    )]
    TooMany { limit: usize },
    #[error("eventgate cannot match filters now (no thread to run them on)")]
    NoMatcher,
}

impl SubscribeError {
    pub fn status(&self) -> tonic::Status {
        match self {
            SubscribeError::Closed | SubscribeError::NoMatcher => {
                tonic::Status::unavailable(self.to_string())
            }
            SubscribeError::TooMany { .. } => Limit::Subscribers.reject(self.to_string()),
        }
    }
}

/// Cheap to clone; all clones share one exchange.
#[derive(Clone)]
pub struct Exchange {
    inner: Arc<Inner>,
}

struct Inner {
    config: ExchangeSettings,
    /// Given to every event that arrives without a node, before routing.
    node: Arc<str>,
    router: Router,
    /// Where accepted events are made durable before they are acknowledged.
    spool: Option<Spool>,
    /// One lock orders everything: taking a sequence number and handing the event to
    /// every subscriber happen together, so all subscribers see one relative order.
    /// The critical section runs no filters, only one non-blocking `try_send` per
    /// subscriber.
    state: Mutex<State>,
    closed: AtomicBool,
    counters: SourceCounters,
}

/// Received and accepted counters per source, looked up once: a `counter!` with
/// labels hashes its key into the registry on every call, twice per event here.
struct SourceCounters {
    received: [metrics::Counter; Source::LABELS.len()],
    accepted: [metrics::Counter; Source::LABELS.len()],
}

impl SourceCounters {
    fn new() -> Self {
        Self {
            received: Source::LABELS.map(
                |label| metrics::counter!("eventgate_events_received_total", "source" => label),
            ),
            accepted: Source::LABELS.map(
                |label| metrics::counter!("eventgate_events_accepted_total", "source" => label),
            ),
        }
    }
}

struct State {
    next_seq: u64,
    next_subscriber: u64,
    subscribers: Vec<Slot>,
}

struct Slot {
    id: u64,
    /// The subscription's own queue when it takes every event; its matching task's
    /// inbound queue when it has a filter.
    tx: mpsc::Sender<Arc<Event>>,
    cut_off: Arc<CutOff>,
    /// What a full `tx` means.
    when_full: CutOffReason,
}

/// What an exchange is attached to besides its settings; the default is none of it
/// (an exchange that only serves subscribers, on this machine's host name).
#[derive(Default)]
pub struct ExchangeParts {
    /// Hands every accepted event to the forwarders' queues.
    pub router: Router,
    /// Every event is appended to it (continuing its sequence numbers) and
    /// acknowledged only once durable.
    pub spool: Option<Spool>,
    /// Events that do not arrive with a node of their own are recorded as captured
    /// on it (the config's validated `node`); `None`: this machine's host name.
    pub node: Option<Arc<str>>,
}

impl Exchange {
    /// The one constructor; what differs between exchanges is in `parts`.
    pub fn new(config: ExchangeSettings, parts: ExchangeParts) -> Self {
        let ExchangeParts {
            router,
            spool,
            node,
        } = parts;
        let node = node.unwrap_or_else(|| Arc::from(crate::node::host_name()));
        let next_seq = spool.as_ref().map_or(1, Spool::next_seq);
        Self {
            inner: Arc::new(Inner {
                config,
                node,
                router,
                spool,
                state: Mutex::new(State {
                    next_seq,
                    next_subscriber: 1,
                    subscribers: Vec::new(),
                }),
                closed: AtomicBool::new(false),
                counters: SourceCounters::new(),
            }),
        }
    }

    fn fan_out(&self, state: &mut State, event: &Arc<Event>) {
        let before = state.subscribers.len();
        let queue = self.inner.config.subscriber_queue;
        state
            .subscribers
            .retain(|slot| match slot.tx.try_send(Arc::clone(event)) {
                Ok(()) => true,
                Err(TrySendError::Full(_)) => {
                    slot.cut_off.set(slot.when_full);
                    matching::record_cut_off(slot.id, slot.when_full, queue);
                    false
                }
                Err(TrySendError::Closed(_)) => false,
            });
        if state.subscribers.len() != before {
            metrics::gauge!("eventgate_subscribers").set(state.subscribers.len() as f64);
        }
    }

    /// Registers a subscriber. Events accepted after this returns are delivered to it
    /// (there is no replay from the live exchange; history lives in the audit store).
    /// A filter that does not match everything is matched by the subscriber's own
    /// task, off the publishing path.
    pub fn subscribe(&self, filter: Filter) -> Result<Subscription, SubscribeError> {
        self.subscribe_at(filter)
            .map(|(subscription, _)| subscription)
    }

    /// [`Exchange::subscribe`], also answering the boundary: the seq of the first
    /// event the subscription will see, read under the same lock that registers it.
    /// Every event before it was sequenced earlier (a resumer reads those from the
    /// spool or the store), every event from it on reaches the subscription.
    pub(crate) fn subscribe_at(
        &self,
        filter: Filter,
    ) -> Result<(Subscription, u64), SubscribeError> {
        let capacity = self.inner.config.subscriber_queue.max(1);
        let (outbound, rx) = mpsc::channel(capacity);
        let cut_off = Arc::new(CutOff::default());
        let mut state = self.lock();
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(SubscribeError::Closed);
        }
        let limit = self.inner.config.limits.max_subscribers;
        if state.subscribers.len() >= limit {
            return Err(SubscribeError::TooMany { limit });
        }
        let id = state.next_subscriber;
        let (tx, when_full) = if filter.is_always() {
            (outbound, CutOffReason::SlowReader)
        } else {
            let (inbound_tx, inbound) = mpsc::channel(capacity);
            Matcher {
                id,
                filter,
                inbound,
                outbound,
                cut_off: Arc::clone(&cut_off),
                exchange: Arc::downgrade(&self.inner),
                queue: capacity,
                cpu_percent: self.inner.config.limits.filter_cpu_percent,
            }
            .start()
            .map_err(|_| SubscribeError::NoMatcher)?;
            (inbound_tx, CutOffReason::SlowFilters)
        };
        state.next_subscriber += 1;
        let boundary = state.next_seq;
        state.subscribers.push(Slot {
            id,
            tx,
            cut_off: Arc::clone(&cut_off),
            when_full,
        });
        metrics::gauge!("eventgate_subscribers").set(state.subscribers.len() as f64);
        drop(state);
        tracing::debug!(subscriber = id, "subscriber added");
        let subscription =
            Subscription::new(id, rx, cut_off, capacity, Arc::downgrade(&self.inner));
        Ok((subscription, boundary))
    }

    /// The spool accepted events are appended to, if there is one.
    pub(crate) fn spool(&self) -> Option<&Spool> {
        self.inner.spool.as_ref()
    }

    /// Whether [`Exchange::close`] was called (graceful shutdown).
    pub(crate) fn is_closed(&self) -> bool {
        self.inner.closed.load(Ordering::Acquire)
    }

    /// `exchange.subscriber_queue`: how far behind a subscriber may fall.
    pub(crate) fn subscriber_queue(&self) -> usize {
        self.inner.config.subscriber_queue.max(1)
    }

    /// Events waiting to be matched against subscribers' filters, summed over the
    /// subscribers that have one.
    pub fn unmatched_events(&self) -> usize {
        self.lock()
            .subscribers
            .iter()
            .filter(|slot| slot.when_full == CutOffReason::SlowFilters)
            .map(|slot| slot.tx.max_capacity() - slot.tx.capacity())
            .sum()
    }

    /// Ends every subscription (they finish with UNAVAILABLE once drained) and refuses
    /// new events; part of graceful shutdown.
    pub fn close(&self) {
        let mut state = self.lock();
        self.inner.closed.store(true, Ordering::Release);
        state.subscribers.clear();
        metrics::gauge!("eventgate_subscribers").set(0.0);
    }

    pub fn limits(&self) -> &LimitSettings {
        &self.inner.config.limits
    }

    pub fn subscriber_count(&self) -> usize {
        self.lock().subscribers.len()
    }

    /// The sequence number the next accepted event will get.
    pub fn next_seq(&self) -> u64 {
        self.lock().next_seq
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.inner.lock()
    }
}

/// Counts a refusal by its reason.
fn rejected(error: AcceptError) -> AcceptError {
    metrics::counter!("eventgate_events_rejected_total", "reason" => error.reason()).increment(1);
    if let AcceptError::TooLarge { .. } = error {
        metrics::counter!("eventgate_limit_rejections_total", "limit" => Limit::EventBytes.label())
            .increment(1);
    }
    error
}

impl Inner {
    // Nothing in the critical section can panic on input, but a poisoned lock must not
    // take the whole gateway down with it: the state stays consistent between calls.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn remove(&self, id: u64) {
        let mut state = self.lock();
        state.subscribers.retain(|slot| slot.id != id);
        metrics::gauge!("eventgate_subscribers").set(state.subscribers.len() as f64);
    }
}

/// Refuses what only a gateway may send, its namespace and its topics: applied to
/// Publish and Forward, never to the gateway's own events nor to those taken in from
/// another gateway, which made them.
fn refuse_own(namespace: &str, topic: &str) -> Result<(), AcceptError> {
    if namespace == crate::markers::NAMESPACE {
        return Err(AcceptError::ReservedNamespace);
    }
    if crate::markers::is_own_topic(topic) {
        return Err(AcceptError::ReservedTopic {
            topic: topic.to_owned(),
        });
    }
    Ok(())
}

fn validate_topic(topic: &str) -> Result<(), AcceptError> {
    identifiers::validate_topic(topic).map_err(|source| AcceptError::InvalidTopic {
        topic: topic.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests;
