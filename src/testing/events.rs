//! Builders for [`Envelope`]s and [`Event`]s.

use std::sync::Arc;
use std::time::SystemTime;

use prost::Message;
use prost_types::{Any, Timestamp};

use crate::event::{Event, EventId, Identity, Origin, Source, Workload};
use crate::proto::Registry;
use crate::proto::containerd::types::Envelope;
use crate::publisher::Publisher;

/// 2024-05-01T10:00:00Z, the time most tests' events carry.
pub(crate) const T0: i64 = 1_714_557_600;

/// `json` encoded as the registered type `type_name`, as publishers send it.
pub(crate) fn json_any(type_name: &str, json: &str) -> Any {
    Registry::global()
        .encode_json(type_name, json)
        .unwrap_or_else(|e| panic!("{type_name} from {json}: {e}"))
}

/// An envelope in namespace `default` on topic `/tasks/exit`, without timestamp or
/// payload until set.
pub(crate) fn envelope() -> EnvelopeBuilder {
    EnvelopeBuilder(Envelope {
        timestamp: None,
        namespace: "default".into(),
        topic: "/tasks/exit".into(),
        event: None,
    })
}

#[derive(Clone, Debug)]
#[must_use]
pub(crate) struct EnvelopeBuilder(Envelope);

impl EnvelopeBuilder {
    pub(crate) fn namespace(mut self, namespace: &str) -> Self {
        self.0.namespace = namespace.into();
        self
    }

    pub(crate) fn topic(mut self, topic: &str) -> Self {
        self.0.topic = topic.into();
        self
    }

    /// Published `seconds` past the epoch, on the second.
    pub(crate) fn at(self, seconds: i64) -> Self {
        self.at_nanos(seconds, 0)
    }

    pub(crate) fn at_nanos(self, seconds: i64, nanos: i32) -> Self {
        self.timestamp(Some(Timestamp { seconds, nanos }))
    }

    pub(crate) fn timestamp(mut self, timestamp: Option<Timestamp>) -> Self {
        self.0.timestamp = timestamp;
        self
    }

    /// Published now, by the system clock.
    pub(crate) fn now(self) -> Self {
        self.timestamp(Some(Timestamp::from(SystemTime::now())))
    }

    /// `json` encoded as the registered type `type_name`.
    pub(crate) fn json(self, type_name: &str, json: &str) -> Self {
        self.payload(Some(json_any(type_name, json)))
    }

    /// `message`'s protobuf encoding under `type_url`.
    pub(crate) fn message(self, type_url: &str, message: &impl Message) -> Self {
        self.raw(type_url, message.encode_to_vec())
    }

    /// Any bytes under any type URL, decodable or not.
    pub(crate) fn raw(self, type_url: &str, value: Vec<u8>) -> Self {
        self.payload(Some(Any {
            type_url: type_url.into(),
            value,
        }))
    }

    pub(crate) fn payload(mut self, payload: Option<Any>) -> Self {
        self.0.event = payload;
        self
    }

    pub(crate) fn build(self) -> Envelope {
        self.0
    }
}

impl From<EnvelopeBuilder> for Envelope {
    fn from(builder: EnvelopeBuilder) -> Self {
        builder.0
    }
}

/// Event `seq` with a new id, received now from a publisher, carrying
/// [`envelope`]'s defaults.
pub(crate) fn event(seq: u64) -> EventBuilder {
    EventBuilder {
        seq,
        id: EventId::generate(),
        received_at: None,
        source: Source::Publish,
        publisher: None,
        origin: Origin::Live,
        workload: None,
        node: None,
        node_seq: None,
        envelope: envelope(),
    }
}

#[derive(Clone, Debug)]
#[must_use]
pub(crate) struct EventBuilder {
    seq: u64,
    id: EventId,
    received_at: Option<SystemTime>,
    source: Source,
    publisher: Option<Publisher>,
    origin: Origin,
    workload: Option<Arc<Workload>>,
    node: Option<Arc<str>>,
    node_seq: Option<u64>,
    envelope: EnvelopeBuilder,
}

impl EventBuilder {
    pub(crate) fn id(mut self, id: EventId) -> Self {
        self.id = id;
        self
    }

    pub(crate) fn received_at(mut self, at: SystemTime) -> Self {
        self.received_at = Some(at);
        self
    }

    pub(crate) fn source(mut self, source: Source) -> Self {
        self.source = source;
        self
    }

    /// From the upstream named `name`.
    pub(crate) fn upstream(self, name: &str) -> Self {
        self.source(Source::Upstream(name.into()))
    }

    pub(crate) fn publisher(mut self, publisher: Option<Publisher>) -> Self {
        self.publisher = publisher;
        self
    }

    pub(crate) fn origin(mut self, origin: Origin) -> Self {
        self.origin = origin;
        self
    }

    pub(crate) fn workload(mut self, workload: Option<Arc<Workload>>) -> Self {
        self.workload = workload;
        self
    }

    /// Captured on the node named `node` (unset: unknown, as an old spool record).
    pub(crate) fn node(mut self, node: &str) -> Self {
        self.node = Some(node.into());
        self
    }

    /// Taken in by the Kafka source `name`, where its node's gateway gave it `node_seq`.
    pub(crate) fn taken_in_by_kafka(mut self, name: &str, node_seq: u64) -> Self {
        self.source = Source::Kafka(name.into());
        self.node_seq = Some(node_seq);
        self
    }

    /// The whole envelope at once, replacing what was set on it before.
    pub(crate) fn envelope(mut self, envelope: impl Into<Envelope>) -> Self {
        self.envelope = EnvelopeBuilder(envelope.into());
        self
    }

    pub(crate) fn namespace(self, namespace: &str) -> Self {
        self.with_envelope(|e| e.namespace(namespace))
    }

    pub(crate) fn topic(self, topic: &str) -> Self {
        self.with_envelope(|e| e.topic(topic))
    }

    pub(crate) fn at(self, seconds: i64) -> Self {
        self.with_envelope(|e| e.at(seconds))
    }

    pub(crate) fn at_nanos(self, seconds: i64, nanos: i32) -> Self {
        self.with_envelope(|e| e.at_nanos(seconds, nanos))
    }

    pub(crate) fn timestamp(self, timestamp: Option<Timestamp>) -> Self {
        self.with_envelope(|e| e.timestamp(timestamp))
    }

    pub(crate) fn now(self) -> Self {
        self.with_envelope(EnvelopeBuilder::now)
    }

    pub(crate) fn json(self, type_name: &str, json: &str) -> Self {
        self.with_envelope(|e| e.json(type_name, json))
    }

    pub(crate) fn message(self, type_url: &str, message: &impl Message) -> Self {
        self.with_envelope(|e| e.message(type_url, message))
    }

    pub(crate) fn raw(self, type_url: &str, value: Vec<u8>) -> Self {
        self.with_envelope(|e| e.raw(type_url, value))
    }

    pub(crate) fn payload(self, payload: Option<Any>) -> Self {
        self.with_envelope(|e| e.payload(payload))
    }

    fn with_envelope(mut self, change: impl FnOnce(EnvelopeBuilder) -> EnvelopeBuilder) -> Self {
        self.envelope = change(self.envelope);
        self
    }

    pub(crate) fn build(self) -> Event {
        let identity = Identity {
            id: self.id,
            received_at: self.received_at.unwrap_or_else(SystemTime::now),
            source: self.source,
            publisher: self.publisher,
            origin: self.origin,
            workload: self.workload,
            node: self.node,
            node_seq: self.node_seq,
            node_source: None,
        };
        Event::from_identity(self.seq, identity, self.envelope.build())
    }

    pub(crate) fn arc(self) -> Arc<Event> {
        Arc::new(self.build())
    }
}

impl From<EventBuilder> for Event {
    fn from(builder: EventBuilder) -> Self {
        builder.build()
    }
}

/// What a container's record with `image` and `labels` says, as the upstream's
/// enrichment keeps it; `None` when it says nothing.
pub(crate) fn workload(image: &str, labels: &[(&str, &str)]) -> Option<Arc<Workload>> {
    let labels = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()));
    Workload::from_record(image, labels).map(Arc::new)
}

/// A Kubernetes pod's container (`None`: its sandbox) with uid `uid-NAMESPACE-POD`
/// and no image, as a reconcile or enrichment would describe it.
pub(crate) fn pod_workload(namespace: &str, pod: &str, container: Option<&str>) -> Workload {
    Workload {
        kind: Some(
            match container {
                Some(_) => "container",
                None => "sandbox",
            }
            .into(),
        ),
        pod_name: Some(pod.into()),
        pod_namespace: Some(namespace.into()),
        pod_uid: Some(format!("uid-{namespace}-{pod}")),
        container_name: container.map(str::to_owned),
        ..Workload::default()
    }
}
