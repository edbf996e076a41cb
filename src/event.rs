//! The one event type that flows through eventgate: containerd's envelope exactly as
//! it was accepted, plus what the gateway adds (a sequence number, a stable id, who
//! sent it and whether it was received or reconstructed).

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

/// The payload fields that name what an event is about, in the order they are
/// looked for. Task events name their container with `container_id` (their `id` is
/// the exec id), so it comes first: a container's `/containers/*` and `/tasks/*`
/// events then share one object. Snapshots name the active key in `key` and the
/// committed snapshot in `name`; `key` comes before `name` because `SnapshotCommit`
/// has both and its `key` is the one `SnapshotPrepare` used, so a snapshot's prepare
/// and commit are one object.
pub const OBJECT_FIELDS: [&str; 6] = ["container_id", "sandbox_id", "id", "key", "name", "digest"];

mod identity;
mod origin;
mod position;
pub(crate) mod workload;
pub use identity::Identity;
pub use origin::{Clock, Origin, Witness};
pub use position::KafkaPosition;
pub use workload::Workload;

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

    /// An id derived from `what` (a UUID version 8 from its SHA-256): the same input
    /// gives the same id, so an event made again from the same facts (a Kafka
    /// message read again, an aggregate sent again) is kept once by id.
    pub fn derived(what: &[u8]) -> Self {
        use sha2::{Digest, Sha256};
        let digest = Sha256::digest(what);
        let mut bytes = [0u8; 16];
        bytes.copy_from_slice(&digest[..16]);
        bytes[6] = (bytes[6] & 0x0f) | 0x80;
        bytes[8] = (bytes[8] & 0x3f) | 0x80;
        Self::from_bytes(bytes)
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
    /// Consumed by the named `[[source]]` from Kafka, where another gateway (the
    /// event's node) produced it.
    Kafka(Arc<str>),
}

impl Source {
    /// Every value [`Source::label`] returns, in [`Source::index`] order.
    pub const LABELS: [&'static str; 5] = ["publish", "forward", "upstream", "internal", "kafka"];

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
            Source::Kafka(_) => 4,
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
            Source::Kafka(name) => Cow::Owned(format!("kafka:{name}")),
        }
    }

    /// The inverse of [`Source::describe`] (anything else reads as eventgate's own).
    pub fn parse(text: &str) -> Source {
        match text {
            "publish" => Source::Publish,
            "forward" => Source::Forward,
            "eventgate" => Source::Internal,
            other => match other.split_once(':') {
                Some(("upstream", name)) => Source::Upstream(Arc::from(name)),
                Some(("kafka", name)) => Source::Kafka(Arc::from(name)),
                _ => Source::Internal,
            },
        }
    }
}

/// An accepted event. Shared as `Arc<Event>` between subscribers and forwarders, so
/// the envelope is never copied per consumer.
#[derive(Debug)]
pub struct Event {
    /// Gateway-wide order of acceptance; every consumer sees events in this order.
    pub seq: u64,
    /// Everything else the gateway knows of it (see [`Identity`]).
    pub identity: Identity,
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
    /// Where a Kafka source read it, when a store keeps that source's offsets; not
    /// kept in the spool.
    kafka: Option<Arc<KafkaPosition>>,
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
        Self::from_identity(seq, Identity::new(id, received_at, source), envelope)
    }

    /// Event `seq` with the whole `identity` at once, as a codec reads it back.
    pub fn from_identity(seq: u64, identity: Identity, envelope: Envelope) -> Self {
        Self {
            seq,
            identity,
            envelope,
            decoded: OnceLock::new(),
            payload_json: OnceLock::new(),
            encoded: OnceLock::new(),
            kafka: None,
        }
    }

    /// The same event, read at `position` in Kafka.
    pub fn with_kafka_position(mut self, position: Option<Arc<KafkaPosition>>) -> Self {
        self.kafka = position;
        self
    }

    /// Where a Kafka source read it, if a store keeps that source's offsets.
    pub fn kafka_position(&self) -> Option<&KafkaPosition> {
        self.kafka.as_deref()
    }

    /// The same event, published by `publisher`.
    pub fn with_publisher(mut self, publisher: Option<Publisher>) -> Self {
        self.identity.publisher = publisher;
        self
    }

    /// The same event, with `origin`.
    pub fn with_origin(mut self, origin: Origin) -> Self {
        self.identity.origin = origin;
        self
    }

    /// The same event, with what its container's record said.
    pub fn with_workload(mut self, workload: Option<Arc<Workload>>) -> Self {
        self.identity.workload = workload;
        self
    }

    /// The same, captured on `node` (`None`: unknown).
    pub fn with_node(mut self, node: Option<Arc<str>>) -> Self {
        self.identity.node = node;
        self
    }

    /// The same event, with its seq on the gateway of its node.
    pub fn with_node_seq(mut self, node_seq: Option<u64>) -> Self {
        self.identity.node_seq = node_seq;
        self
    }

    /// The node name, or `None` when unknown.
    pub fn node(&self) -> Option<&str> {
        self.identity.node.as_deref()
    }

    /// What eventgate's own filters look at (see [`RecordFields`]).
    pub fn record_fields(&self) -> RecordFields<'_> {
        RecordFields(self)
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
        self.decoded.get_or_init(|| self.decode()).as_ref()
    }

    /// The id of the object the event is about (a container, sandbox, image, content
    /// digest or snapshot), from the first non-empty payload field of
    /// [`OBJECT_FIELDS`]; `None` when it names none (or cannot be decoded). Within its
    /// namespace: Kafka keys and replay's per-object order both build on it.
    pub fn object_id(&self) -> Option<String> {
        use prost_reflect::Value;
        let message = self.decoded()?;
        OBJECT_FIELDS
            .iter()
            .find_map(|name| match message.get_field_by_name(name).as_deref() {
                Some(Value::String(value)) if !value.is_empty() => Some(value.clone()),
                _ => None,
            })
    }

    /// The envelope as subscribers receive it, encoded on first use.
    pub fn encoded_envelope(&self) -> &Bytes {
        self.encoded
            .get_or_init(|| Bytes::from(self.envelope.encode_to_vec()))
    }

    /// The decoded payload as canonical JSON (`proto::write_json`); `None`
    /// exactly when [`Event::decoded`] is.
    ///
    /// Rendering it does not keep the decoded message unless something already asked
    /// for it: events wait in forwarders' queues with their JSON, and a decoded
    /// message is several times larger (about 1.1 KiB for a `TaskExit`, whose JSON is
    /// 0.2 KiB); filters on event fields, Kafka's message key and ctr lines decode
    /// and keep it when they need it.
    pub fn payload_json(&self) -> Option<&str> {
        self.payload_json
            .get_or_init(|| {
                let render = |m: &DynamicMessage| to_json_string(m).into_boxed_str();
                match self.decoded.get() {
                    Some(decoded) => decoded.as_ref().map(render),
                    None => self.decode().as_ref().map(render),
                }
            })
            .as_deref()
    }

    fn decode(&self) -> Option<DynamicMessage> {
        let any = self.envelope.event.as_ref()?;
        Registry::global().decode(any).ok()
    }
}

/// containerd's envelope adaptor: only the first path component of `namespace` and
/// `topic` is looked at; `event.<path>` goes through the event type's field rules.
/// Plus `node`, where the event was captured: containerd has no such field (a
/// filter naming it never matches there), and a subscriber to a gateway that takes
/// in a fleet's events needs it to pick one machine's.
impl Fields for Event {
    fn field(&self, path: &[String]) -> Option<Cow<'_, str>> {
        match path.first()?.as_str() {
            "namespace" => non_empty(&self.envelope.namespace),
            "topic" => non_empty(&self.envelope.topic),
            "node" => self.node().map(Cow::Borrowed),
            "event" => event_field(self.decoded()?, &path[1..]).map(Cow::Owned),
            _ => None,
        }
    }
}

/// The fields of the record eventgate keeps of an event: containerd's envelope
/// fields plus `origin` (`live`, `reconciled` or `repeat`, always present), `origin_clock`
/// (`daemon` or `reconcile`, present only for reconciled events), `reconciled_from`
/// (`containerd`, `cri` or `docker`: whose record a reconciled event was
/// reconstructed from; present only for reconciled events), `reason` (the manager's
/// reason for the container's state, such as `OOMKilled`; present only when set),
/// `node` (where it was captured; absent when unknown) and the pod and container
/// fields. For `eventgate
/// query`, `stats`, `replay` and forwarders' route filters. Subscribe matches with
/// containerd's adaptor alone ([`Fields`] for [`Event`]), so a subscriber's filter
/// means exactly what it would mean to containerd.
#[derive(Clone, Copy, Debug)]
pub struct RecordFields<'a>(pub &'a Event);

impl Fields for RecordFields<'_> {
    fn field(&self, path: &[String]) -> Option<Cow<'_, str>> {
        // Only the first component, as for `namespace` and `topic`.
        let identity = &self.0.identity;
        match path.first()?.as_str() {
            "origin" => Some(Cow::Borrowed(identity.origin.label())),
            "origin_clock" => identity.origin.clock().map(|c| Cow::Borrowed(c.label())),
            "reconciled_from" => identity.origin.witness().map(|w| Cow::Borrowed(w.label())),
            "reason" => identity
                .workload
                .as_deref()?
                .reason
                .as_deref()
                .map(Cow::Borrowed),
            "pod" | "container" => workload_field(identity.workload.as_deref()?, path),
            _ => self.0.field(path),
        }
    }
}

/// `pod.name`, `pod.namespace`, `pod.uid`, `container.name`, `container.kind`,
/// `container.image` and `container.labels.<key>`: what the container's record said
/// (see [`Workload`]). The names a store query uses for the same columns.
pub const WORKLOAD_FIELDS: [&str; 7] = [
    "pod.name",
    "pod.namespace",
    "pod.uid",
    "container.name",
    "container.kind",
    "container.image",
    "container.labels",
];

fn workload_field<'a>(workload: &'a Workload, path: &[String]) -> Option<Cow<'a, str>> {
    let text = |value: &'a Option<String>| value.as_deref().map(Cow::Borrowed);
    match (path.first()?.as_str(), path.get(1)?.as_str()) {
        ("pod", "name") => text(&workload.pod_name),
        ("pod", "namespace") => text(&workload.pod_namespace),
        ("pod", "uid") => text(&workload.pod_uid),
        ("container", "name") => text(&workload.container_name),
        ("container", "kind") => text(&workload.kind),
        ("container", "image") => non_empty(&workload.image),
        // A label key may hold dots: the rest of the path, joined back.
        ("container", "labels") if path.len() > 2 => workload
            .labels
            .get(&path[2..].join("."))
            .map(|v| Cow::Borrowed(v.as_str())),
        _ => None,
    }
}

fn non_empty(s: &str) -> Option<Cow<'_, str>> {
    (!s.is_empty()).then_some(Cow::Borrowed(s))
}

#[cfg(test)]
mod tests;
