//! What one event becomes in Kafka: topic, key, value and headers. Public so that a
//! benchmark can produce exactly the same records with a plain librdkafka producer.

use prost::Message;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::FutureRecord;
use serde::Deserialize;

use crate::event::{Event, Identity};
use crate::forward::BuildError;

/// Kafka's limit on topic name length.
const MAX_TOPIC_LEN: usize = 249;

/// `value_format`: how the message value is encoded.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ValueFormat {
    /// The containerd `Envelope`, protobuf-encoded exactly as accepted.
    #[default]
    Protobuf,
    /// `render::write_event_json`: the envelope plus the event's `id` and `seq`.
    Json,
    /// CloudEvents 1.0, binary content mode: attributes in `ce_*` headers, the
    /// payload alone as the value (see `super::cloudevents`).
    CloudeventsBinary,
    /// CloudEvents 1.0, structured content mode: one JSON event format object.
    CloudeventsStructured,
}

/// `key`: what the message key is made of. The partitioner sends one key to one
/// partition, and Kafka keeps order only within a partition.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub(crate) enum KeyMode {
    /// `namespace/object id` ([`message_key`]): one container's (image's,
    /// snapshot's...) events stay in order on one partition.
    #[default]
    Object,
    Namespace,
    /// The containerd topic, such as `/tasks/exit`.
    Topic,
    /// The gateway's event id: spreads evenly, keeps no order.
    EventId,
    /// No key: librdkafka's partitioner spreads messages, keeps no order.
    #[serde(rename = "none")]
    Unkeyed,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    Literal(String),
    Namespace,
    Topic,
}

/// A topic name, fixed or with `{namespace}` / `{topic}` placeholders.
///
/// Substituted values are sanitized to Kafka's legal characters: every character
/// outside `[a-zA-Z0-9._-]` becomes `_`, an empty value becomes `_`, and the result
/// is cut to 249 characters. The literal parts must already be legal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TopicTemplate {
    parts: Vec<Part>,
}

impl TopicTemplate {
    pub(crate) fn parse(text: &str) -> Result<Self, BuildError> {
        let bad = |problem: String| BuildError::Options(format!("`topic` {text:?}: {problem}"));
        let mut parts = Vec::new();
        let mut rest = text;
        while let Some(open) = rest.find('{') {
            if open > 0 {
                parts.push(Part::Literal(rest[..open].to_owned()));
            }
            let close = rest[open..]
                .find('}')
                .ok_or_else(|| bad("unclosed '{'".into()))?;
            parts.push(match &rest[open + 1..open + close] {
                "namespace" => Part::Namespace,
                "topic" => Part::Topic,
                other => {
                    return Err(bad(format!(
                        "unknown placeholder {{{other}}} (known: {{namespace}}, {{topic}})"
                    )));
                }
            });
            rest = &rest[open + close + 1..];
        }
        if !rest.is_empty() {
            parts.push(Part::Literal(rest.to_owned()));
        }
        for part in &parts {
            if let Part::Literal(literal) = part
                && let Some(c) = literal.chars().find(|c| !legal(*c))
            {
                return Err(bad(format!(
                    "{c:?} is not allowed in a Kafka topic name (only a-z A-Z 0-9 . _ -)"
                )));
            }
        }
        let template = Self { parts };
        if let Some(fixed) = template.fixed() {
            if fixed.is_empty() || fixed == "." || fixed == ".." {
                return Err(bad("not a valid Kafka topic name".into()));
            }
            if fixed.len() > MAX_TOPIC_LEN {
                return Err(bad(format!("longer than {MAX_TOPIC_LEN} characters")));
            }
        } else {
            // Each placeholder yields at least one character; past the limit,
            // truncation would cut every substituted value off and send all events
            // to one name that says nothing of them.
            let literal: usize = template
                .parts
                .iter()
                .map(|part| match part {
                    Part::Literal(text) => text.len(),
                    Part::Namespace | Part::Topic => 0,
                })
                .sum();
            let placeholders = template.parts.len()
                - template
                    .parts
                    .iter()
                    .filter(|part| matches!(part, Part::Literal(_)))
                    .count();
            if literal + placeholders > MAX_TOPIC_LEN {
                return Err(bad(format!(
                    "its fixed text is {literal} characters, leaving no room for its placeholders within Kafka's {MAX_TOPIC_LEN}"
                )));
            }
        }
        Ok(template)
    }

    /// The topic name when the template has no placeholders.
    pub(crate) fn fixed(&self) -> Option<&str> {
        match self.parts.as_slice() {
            [] => Some(""),
            [Part::Literal(name)] => Some(name),
            _ => None,
        }
    }

    pub(crate) fn resolve(&self, namespace: &str, event_topic: &str) -> String {
        if let Some(fixed) = self.fixed() {
            return fixed.to_owned();
        }
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Literal(literal) => out.push_str(literal),
                Part::Namespace => push_sanitized(&mut out, namespace),
                Part::Topic => push_sanitized(&mut out, first_component(event_topic)),
            }
        }
        out.truncate(MAX_TOPIC_LEN);
        if out == "." || out == ".." {
            out = out.replace('.', "_");
        }
        out
    }
}

fn legal(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
}

fn push_sanitized(out: &mut String, value: &str) {
    if value.is_empty() {
        out.push('_');
    }
    out.extend(value.chars().map(|c| if legal(c) { c } else { '_' }));
}

/// "tasks" for "/tasks/exit".
fn first_component(topic: &str) -> &str {
    topic.split('/').find(|c| !c.is_empty()).unwrap_or("")
}

/// `namespace/object-id`, or the namespace alone for events about no object: the
/// partitioner keeps one key in one partition, so one object's events stay in order.
pub(crate) fn message_key(event: &Event) -> String {
    subject(event, event.object_id().as_deref())
}

fn subject(event: &Event, object: Option<&str>) -> String {
    match object {
        Some(id) => format!("{}/{id}", event.namespace()),
        None => event.namespace().to_owned(),
    }
}

/// One Kafka message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Record {
    pub topic: String,
    /// `None` with `key = "none"`.
    pub key: Option<String>,
    /// `None` only for a `cloudevents_binary` event without a payload (the binding's
    /// "no data": a message with no value).
    pub value: Option<Vec<u8>>,
    /// `topic`, `namespace`, `type_url`, `event_id`, `seq`, `origin` (`live` or
    /// `reconciled`), `origin_clock` (`daemon` or `reconcile`) and `reconciled_from`
    /// (`containerd`, `cri` or `docker`) for a reconciled event,
    /// `node` (where it was captured) when known, `node_seq` (its seq there) for an
    /// event taken in from another gateway, `received_at` (when a gateway first
    /// accepted it, RFC 3339 with nanoseconds), `publisher` (the JSON object JSON lines carry) when the event has one, what
    /// the container's record said (`pod_name`, `pod_namespace`, `pod_uid`,
    /// `container_name`, `container_kind`, `image`, `container_labels` as a JSON
    /// object, and the manager's `reason`; each when set:
    /// [`crate::event::Workload::fields`]); in
    /// the CloudEvents formats also `content-type` and (binary) the `ce_*` attributes.
    pub headers: Vec<(&'static str, String)>,
}

impl Record {
    pub(crate) fn owned_headers(&self) -> OwnedHeaders {
        self.headers.iter().fold(
            OwnedHeaders::new_with_capacity(self.headers.len()),
            |h, (k, v)| {
                h.insert(Header {
                    key: k,
                    value: Some(v.as_bytes()),
                })
            },
        )
    }

    /// The record as librdkafka takes it (partitioned by key; spread when unkeyed).
    pub(crate) fn future_record(&self) -> FutureRecord<'_, str, [u8]> {
        let mut record = FutureRecord::to(&self.topic).headers(self.owned_headers());
        if let Some(key) = &self.key {
            record = record.key(key.as_str());
        }
        if let Some(value) = &self.value {
            record = record.payload(value.as_slice());
        }
        record
    }

    /// The value of header `name`, if the record has one.
    #[cfg(test)]
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| *key == name)
            .map(|(_, value)| value.as_str())
    }
}

/// Turns events into records the way a configured `kafka` forwarder does.
#[derive(Clone, Debug)]
pub(crate) struct RecordEncoder {
    topic: TopicTemplate,
    format: ValueFormat,
    key: KeyMode,
    /// The CloudEvents `source` authority for events whose node is unknown.
    node: String,
}

impl RecordEncoder {
    /// With the default key (`object`) and this machine's hostname as `node`.
    pub(crate) fn new(topic: TopicTemplate, format: ValueFormat) -> Self {
        Self {
            topic,
            format,
            key: KeyMode::default(),
            node: super::cloudevents::default_node(),
        }
    }

    pub(crate) fn keyed_by(mut self, key: KeyMode) -> Self {
        self.key = key;
        self
    }

    pub(crate) fn on_node(mut self, node: impl Into<String>) -> Self {
        self.node = node.into();
        self
    }

    /// From a `[[forwarder]]` table of kind `kafka` (its other keys are checked too), for
    /// the benchmark's plain producer to encode as the forwarder does.
    #[cfg(feature = "bench")]
    pub(crate) fn from_options(options: &crate::forward::Options) -> Result<Self, BuildError> {
        Self::from_parsed(&super::config::KafkaOptions::parse(options)?)
    }

    pub(crate) fn from_parsed(options: &super::config::KafkaOptions) -> Result<Self, BuildError> {
        Ok(
            Self::new(TopicTemplate::parse(&options.topic)?, options.value_format)
                .keyed_by(options.key)
                .on_node(options.node.trim()),
        )
    }

    pub(crate) fn template(&self) -> &TopicTemplate {
        &self.topic
    }

    pub(crate) fn topic_for(&self, event: &Event) -> String {
        self.topic.resolve(event.namespace(), event.topic())
    }

    pub(crate) fn encode(&self, event: &Event) -> Record {
        let Identity {
            id,
            received_at,
            source,
            publisher,
            origin,
            workload,
            node,
            node_seq,
            node_source,
        } = &event.identity;
        let cloudevents = matches!(
            self.format,
            ValueFormat::CloudeventsBinary | ValueFormat::CloudeventsStructured
        );
        // Before any value: finding the object decodes the payload and keeps it, and
        // a JSON value is then rendered from that, not decoded a second time.
        let subject = (self.key == KeyMode::Object || cloudevents).then(|| message_key(event));
        let key = match self.key {
            KeyMode::Object => subject.clone(),
            KeyMode::Namespace => Some(event.namespace().to_owned()),
            KeyMode::Topic => Some(event.topic().to_owned()),
            KeyMode::EventId => Some(id.to_string()),
            KeyMode::Unkeyed => None,
        };
        let mut headers = vec![
            ("topic", event.topic().to_owned()),
            ("namespace", event.namespace().to_owned()),
            ("type_url", event.type_url().to_owned()),
            ("event_id", id.to_string()),
            ("seq", event.seq.to_string()),
            ("origin", origin.label().to_owned()),
        ];
        if let Some(clock) = origin.clock() {
            headers.push(("origin_clock", clock.label().to_owned()));
        }
        if let Some(from) = origin.witness() {
            headers.push(("reconciled_from", from.label().to_owned()));
        }
        if let Some(node) = node {
            headers.push(("node", node.to_string()));
        }
        if let Some(node_seq) = node_seq {
            headers.push(("node_seq", node_seq.to_string()));
        }
        // How the event entered its node's gateway: the source that takes the record
        // in becomes the event's source there, and a central copy needs this to hash
        // as the node's audit store hashed the row.
        headers.push(("source", source.describe().into_owned()));
        if let Some(node_source) = node_source {
            headers.push(("node_source", node_source.to_string()));
        }
        headers.push((
            "received_at",
            crate::proto::rfc3339_nanos(&prost_types::Timestamp::from(*received_at)),
        ));
        if let Some(publisher) = publisher {
            headers.push(("publisher", publisher.to_json()));
        }
        if let Some(workload) = workload {
            headers.extend(workload.fields());
        }
        let subject = subject.unwrap_or_default();
        let value = match self.format {
            ValueFormat::Protobuf => Some(event.envelope.encode_to_vec()),
            ValueFormat::Json => {
                let mut value = Vec::with_capacity(256);
                crate::render::write_event_json(&mut value, event);
                Some(value)
            }
            ValueFormat::CloudeventsBinary => {
                super::cloudevents::binary(event, &self.node, &subject, &mut headers)
            }
            ValueFormat::CloudeventsStructured => Some(super::cloudevents::structured(
                event,
                &self.node,
                &subject,
                &mut headers,
            )),
        };
        Record {
            topic: self.topic_for(event),
            key,
            value,
            headers,
        }
    }
}

#[cfg(test)]
#[path = "record_tests.rs"]
mod tests;
