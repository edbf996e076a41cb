//! The one event type that flows through eventgate: containerd's envelope exactly as
//! it was accepted, plus what the gateway adds (a sequence number and a stable id).

use std::borrow::Cow;
use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::SystemTime;

use bytes::Bytes;
use prost::Message as _;
use prost_reflect::DynamicMessage;

use crate::filter::Fields;
use crate::proto::containerd::types::Envelope;
use crate::proto::{Registry, event_field, to_json_string};
use crate::publisher::Publisher;

/// A unique, time-ordered event id (UUIDv7). Time order keeps a UNIQUE index on it
/// append-mostly; random ids would scatter inserts across the whole index.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct EventId(uuid::Uuid);

impl EventId {
    pub fn generate() -> Self {
        Self(uuid::Uuid::now_v7())
    }

    /// The all-zero id, held by an event until the exchange gives it its place.
    pub const fn unassigned() -> Self {
        Self(uuid::Uuid::nil())
    }

    pub const fn from_bytes(bytes: [u8; 16]) -> Self {
        Self(uuid::Uuid::from_bytes(bytes))
    }

    pub const fn as_bytes(&self) -> &[u8; 16] {
        self.0.as_bytes()
    }
}

/// The hyphenated form [`fmt::Display`] writes, as stored by the audit and
/// dead-letter stores.
impl std::str::FromStr for EventId {
    type Err = uuid::Error;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        uuid::Uuid::parse_str(text).map(Self)
    }
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.hyphenated().fmt(f)
    }
}

/// How an event entered the gateway; kept for metrics and logs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    Publish,
    Forward,
    /// Subscribed from an upstream containerd (or eventgate), by its configured name.
    Upstream(Arc<str>),
    /// Emitted by eventgate itself (for example gap markers).
    Internal,
}

impl Source {
    /// Every value [`Source::label`] returns, in [`Source::index`] order.
    pub const LABELS: [&'static str; 4] = ["publish", "forward", "upstream", "internal"];

    /// A low-cardinality label for metrics.
    pub fn label(&self) -> &'static str {
        Self::LABELS[self.index()]
    }

    /// This source's position in [`Source::LABELS`].
    pub fn index(&self) -> usize {
        match self {
            Source::Publish => 0,
            Source::Forward => 1,
            Source::Upstream(_) => 2,
            Source::Internal => 3,
        }
    }

    /// The full origin as stored with the event: `publish`, `forward`,
    /// `upstream:<name>` or `eventgate`.
    pub fn describe(&self) -> Cow<'static, str> {
        match self {
            Source::Publish => Cow::Borrowed("publish"),
            Source::Forward => Cow::Borrowed("forward"),
            Source::Upstream(name) => Cow::Owned(format!("upstream:{name}")),
            Source::Internal => Cow::Borrowed("eventgate"),
        }
    }
}

/// An accepted event. Shared as `Arc<Event>` between subscribers and forwarders, so
/// the envelope is never copied per consumer.
#[derive(Debug)]
pub struct Event {
    /// Gateway-wide order of acceptance; every consumer sees events in this order.
    pub seq: u64,
    pub id: EventId,
    pub received_at: SystemTime,
    pub source: Source,
    /// Who published or forwarded it (see [`crate::publisher`]); `None` for events
    /// from upstreams, from eventgate itself and from TCP clients without a
    /// certificate.
    pub publisher: Option<Publisher>,
    pub envelope: Envelope,
    /// The payload decoded through the type registry, computed at most once however
    /// many filters and sinks look at it (containerd decodes once per subscriber).
    decoded: OnceLock<Option<DynamicMessage>>,
    /// The decoded payload's canonical JSON, rendered once for every forwarder that
    /// stores it (file, SQLite and Kafka would otherwise each render their own). It
    /// lives as long as the event: an event a fast forwarder already rendered keeps
    /// its JSON while it waits in a slower forwarder's queue, whose byte limit counts
    /// the envelope only.
    payload_json: OnceLock<Option<Box<str>>>,
    /// The envelope's protobuf encoding, shared by every subscriber's stream.
    encoded: OnceLock<Bytes>,
}

impl Event {
    pub fn new(seq: u64, id: EventId, source: Source, envelope: Envelope) -> Self {
        Self::with_received_at(seq, id, SystemTime::now(), source, envelope)
    }

    /// An event as it was accepted earlier, for example read back from the spool.
    pub fn with_received_at(
        seq: u64,
        id: EventId,
        received_at: SystemTime,
        source: Source,
        envelope: Envelope,
    ) -> Self {
        Self {
            seq,
            id,
            received_at,
            source,
            publisher: None,
            envelope,
            decoded: OnceLock::new(),
            payload_json: OnceLock::new(),
            encoded: OnceLock::new(),
        }
    }

    /// The same event, published by `publisher`.
    pub fn with_publisher(mut self, publisher: Option<Publisher>) -> Self {
        self.publisher = publisher;
        self
    }

    pub fn namespace(&self) -> &str {
        &self.envelope.namespace
    }

    pub fn topic(&self) -> &str {
        &self.envelope.topic
    }

    /// The type URL of the payload, or "" when the envelope carries none.
    pub fn type_url(&self) -> &str {
        self.envelope
            .event
            .as_ref()
            .map_or("", |any| any.type_url.as_str())
    }

    /// The payload decoded as a known event type; `None` for unknown types, undecodable
    /// bytes or a missing payload (such events still flow, they just cannot be inspected).
    pub fn decoded(&self) -> Option<&DynamicMessage> {
        self.decoded
            .get_or_init(|| {
                let any = self.envelope.event.as_ref()?;
                Registry::global().decode(any).ok()
            })
            .as_ref()
    }

    /// The envelope as subscribers receive it, encoded on first use.
    pub fn encoded_envelope(&self) -> &Bytes {
        self.encoded
            .get_or_init(|| Bytes::from(self.envelope.encode_to_vec()))
    }

    /// The decoded payload as canonical JSON ([`crate::proto::write_json`]); `None`
    /// exactly when [`Event::decoded`] is.
    pub fn payload_json(&self) -> Option<&str> {
        self.payload_json
            .get_or_init(|| self.decoded().map(|m| to_json_string(m).into_boxed_str()))
            .as_deref()
    }
}

/// containerd's envelope adaptor: only the first path component of `namespace` and
/// `topic` is looked at; `event.<path>` goes through the event type's field rules.
impl Fields for Event {
    fn field(&self, path: &[String]) -> Option<Cow<'_, str>> {
        match path.first()?.as_str() {
            "namespace" => non_empty(&self.envelope.namespace),
            "topic" => non_empty(&self.envelope.topic),
            "event" => event_field(self.decoded()?, &path[1..]).map(Cow::Owned),
            _ => None,
        }
    }
}

fn non_empty(s: &str) -> Option<Cow<'_, str>> {
    (!s.is_empty()).then_some(Cow::Borrowed(s))
}

/// An event for tests: `json` encoded as `type_name` through the registry, published
/// in namespace `default` at `seconds` past the epoch.
#[cfg(test)]
pub(crate) fn sample(seq: u64, seconds: i64, topic: &str, type_name: &str, json: &str) -> Event {
    let any = Registry::global()
        .encode_json(type_name, json)
        .expect("a registered type and valid JSON");
    Event::new(
        seq,
        EventId::generate(),
        Source::Publish,
        Envelope {
            timestamp: Some(prost_types::Timestamp { seconds, nanos: 0 }),
            namespace: "default".into(),
            topic: topic.into(),
            event: Some(any),
        },
    )
}
