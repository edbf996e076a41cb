//! What one event becomes in Kafka: topic, key, value and headers. Public so that a
//! benchmark can produce exactly the same records with a plain librdkafka producer.

use prost::Message;
use prost_reflect::Value as ReflectValue;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::FutureRecord;
use serde::Deserialize;

use crate::event::Event;
use crate::forward::{BuildError, Options};

/// Kafka's limit on topic name length.
const MAX_TOPIC_LEN: usize = 249;

/// `value_format`: how the message value is encoded.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ValueFormat {
    /// The containerd `Envelope`, protobuf-encoded exactly as accepted.
    #[default]
    Protobuf,
    /// `render::write_event_json`: the envelope plus the event's `id` and `seq`.
    Json,
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
pub struct TopicTemplate {
    parts: Vec<Part>,
}

impl TopicTemplate {
    pub fn parse(text: &str) -> Result<Self, BuildError> {
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
        }
        Ok(template)
    }

    /// The topic name when the template has no placeholders.
    pub fn fixed(&self) -> Option<&str> {
        match self.parts.as_slice() {
            [] => Some(""),
            [Part::Literal(name)] => Some(name),
            _ => None,
        }
    }

    pub fn resolve(&self, namespace: &str, event_topic: &str) -> String {
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

/// The id of the object an event is about, from the first of these fields its type
/// has: containerd names the subject of each event type one of these ways. `key`
/// comes before `name` because `SnapshotCommit` has both and its `key` is the one
/// `SnapshotPrepare` used, so a snapshot's prepare and commit share a message key.
pub fn object_id(event: &Event) -> Option<String> {
    const FIELDS: &[&str] = &["container_id", "sandbox_id", "id", "key", "name", "digest"];
    let message = event.decoded()?;
    FIELDS
        .iter()
        .find_map(|field| match message.get_field_by_name(field)?.as_ref() {
            ReflectValue::String(s) if !s.is_empty() => Some(s.clone()),
            _ => None,
        })
}

/// `namespace/object-id`, or the namespace alone for events about no object: the
/// partitioner keeps one key in one partition, so one object's events stay in order.
pub fn message_key(event: &Event) -> String {
    match object_id(event) {
        Some(id) => format!("{}/{id}", event.namespace()),
        None => event.namespace().to_owned(),
    }
}

/// One Kafka message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub topic: String,
    pub key: String,
    pub value: Vec<u8>,
    /// `topic`, `namespace`, `type_url`, `event_id`, `seq`, `origin` (`live` or
    /// `reconciled`), `origin_clock` (`daemon` or `reconcile`) for a reconciled event,
    /// and `publisher` (the JSON object JSON lines carry) when the event has one.
    pub headers: Vec<(&'static str, String)>,
}

impl Record {
    pub fn owned_headers(&self) -> OwnedHeaders {
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

    /// The record as librdkafka takes it (partitioned by key).
    pub fn future_record(&self) -> FutureRecord<'_, str, [u8]> {
        FutureRecord::to(&self.topic)
            .key(self.key.as_str())
            .payload(self.value.as_slice())
            .headers(self.owned_headers())
    }
}

/// Turns events into records the way a configured `kafka` forwarder does.
#[derive(Clone, Debug)]
pub struct RecordEncoder {
    topic: TopicTemplate,
    format: ValueFormat,
}

impl RecordEncoder {
    pub fn new(topic: TopicTemplate, format: ValueFormat) -> Self {
        Self { topic, format }
    }

    /// From a `[[forwarder]]` table of kind `kafka` (its other keys are checked too).
    pub fn from_options(options: &Options) -> Result<Self, BuildError> {
        let parsed = super::config::KafkaOptions::parse(options)?;
        Ok(Self::new(
            TopicTemplate::parse(&parsed.topic)?,
            parsed.value_format,
        ))
    }

    pub fn template(&self) -> &TopicTemplate {
        &self.topic
    }

    pub fn topic_for(&self, event: &Event) -> String {
        self.topic.resolve(event.namespace(), event.topic())
    }

    pub fn encode(&self, event: &Event) -> Record {
        let value = match self.format {
            ValueFormat::Protobuf => event.envelope.encode_to_vec(),
            ValueFormat::Json => {
                let mut value = Vec::with_capacity(256);
                crate::render::write_event_json(&mut value, event);
                value
            }
        };
        let mut headers = vec![
            ("topic", event.topic().to_owned()),
            ("namespace", event.namespace().to_owned()),
            ("type_url", event.type_url().to_owned()),
            ("event_id", event.id.to_string()),
            ("seq", event.seq.to_string()),
            ("origin", event.origin.label().to_owned()),
        ];
        if let Some(clock) = event.origin.clock() {
            headers.push(("origin_clock", clock.label().to_owned()));
        }
        if let Some(publisher) = &event.publisher {
            headers.push(("publisher", publisher.to_json()));
        }
        Record {
            topic: self.topic_for(event),
            key: message_key(event),
            value,
            headers,
        }
    }
}

#[cfg(test)]
mod tests {
    use prost_types::Any;

    use super::*;
    use crate::event::{EventId, Source};
    use crate::proto::Registry;
    use crate::proto::containerd::types::Envelope;

    fn event(ns: &str, topic: &str, ty: &str, json: &str) -> Event {
        let any = Registry::global().encode_json(ty, json).unwrap();
        Event::new(
            7,
            EventId::generate(),
            Source::Publish,
            Envelope {
                timestamp: None,
                namespace: ns.into(),
                topic: topic.into(),
                event: Some(any),
            },
        )
    }

    #[test]
    fn templates_resolve_and_sanitize() {
        let t = TopicTemplate::parse("containerd.{namespace}.{topic}").unwrap();
        assert_eq!(
            t.resolve("default", "/tasks/exit"),
            "containerd.default.tasks"
        );
        assert_eq!(
            t.resolve("k8s.io", "/images/create"),
            "containerd.k8s.io.images"
        );
        assert_eq!(t.resolve("a b/ü", ""), "containerd.a_b__._");
        let long = TopicTemplate::parse("{namespace}").unwrap();
        assert_eq!(long.resolve(&"x".repeat(300), "/t").len(), 249);
        assert_eq!(long.resolve("..", "/t"), "__");
        assert_eq!(
            TopicTemplate::parse("events").unwrap().fixed(),
            Some("events")
        );
        for bad in ["", "a b", "{nope}", "x{namespace", ".."] {
            assert!(TopicTemplate::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn keys_follow_the_object() {
        let exit = event(
            "default",
            "/tasks/exit",
            "containerd.events.TaskExit",
            r#"{"container_id":"c1","id":"exec7"}"#,
        );
        assert_eq!(message_key(&exit), "default/c1");
        let image = event(
            "k8s.io",
            "/images/create",
            "containerd.services.images.v1.ImageCreate",
            r#"{"name":"docker.io/library/busybox:latest"}"#,
        );
        assert_eq!(
            message_key(&image),
            "k8s.io/docker.io/library/busybox:latest"
        );
        let snapshot = event(
            "default",
            "/snapshot/remove",
            "containerd.events.SnapshotRemove",
            r#"{"key":"s1"}"#,
        );
        assert_eq!(message_key(&snapshot), "default/s1");
        let commit = event(
            "default",
            "/snapshot/commit",
            "containerd.events.SnapshotCommit",
            r#"{"key":"s1","name":"layer-9"}"#,
        );
        assert_eq!(message_key(&commit), "default/s1");
        let unknown = Event::new(
            1,
            EventId::generate(),
            Source::Publish,
            Envelope {
                timestamp: None,
                namespace: "default".into(),
                topic: "/custom".into(),
                event: Some(Any {
                    type_url: "example.Custom".into(),
                    value: vec![1],
                }),
            },
        );
        assert_eq!(message_key(&unknown), "default");
    }

    #[test]
    fn records_carry_headers_and_values() {
        let e = event(
            "default",
            "/tasks/exit",
            "containerd.events.TaskExit",
            r#"{"container_id":"c1"}"#,
        );
        let proto = RecordEncoder::new(
            TopicTemplate::parse("ev-{namespace}").unwrap(),
            ValueFormat::Protobuf,
        )
        .encode(&e);
        assert_eq!(proto.topic, "ev-default");
        assert_eq!(
            Envelope::decode(proto.value.as_slice()).unwrap(),
            e.envelope
        );
        let header = |r: &Record, k: &str| {
            r.headers
                .iter()
                .find(|(name, _)| *name == k)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(header(&proto, "event_id"), Some(e.id.to_string()));
        assert_eq!(header(&proto, "seq").as_deref(), Some("7"));
        assert_eq!(header(&proto, "type_url").as_deref(), Some(e.type_url()));
        let json =
            RecordEncoder::new(TopicTemplate::parse("ev").unwrap(), ValueFormat::Json).encode(&e);
        let value: serde_json::Value = serde_json::from_slice(&json.value).unwrap();
        assert_eq!(value["id"], e.id.to_string());
        assert_eq!(value["seq"], 7);
        assert_eq!(value["event"]["container_id"], "c1");
        assert_eq!(value["publisher"], serde_json::Value::Null);
        assert_eq!(
            header(&proto, "publisher"),
            None,
            "no header without a publisher"
        );
        assert_eq!(header(&proto, "origin").as_deref(), Some("live"));
        assert_eq!(header(&proto, "origin_clock"), None, "live: no clock");
        assert_eq!(value["origin"], "live");
        assert_eq!(value.get("origin_clock"), None);
    }

    /// In both value formats: the headers say reconciled and which clock; the JSON
    /// value says the same; the protobuf value is the envelope alone, as for any event.
    #[test]
    fn reconciled_events_carry_origin_headers_in_every_value_format() {
        use crate::event::{Clock, Origin};
        for (clock, label) in [(Clock::Daemon, "daemon"), (Clock::Reconcile, "reconcile")] {
            let e = event(
                "default",
                "/tasks/exit",
                "containerd.events.TaskExit",
                r#"{"container_id":"c1"}"#,
            )
            .with_origin(Origin::Reconciled { clock });
            for format in [ValueFormat::Protobuf, ValueFormat::Json] {
                let record =
                    RecordEncoder::new(TopicTemplate::parse("ev").unwrap(), format).encode(&e);
                let header = |k: &str| {
                    record
                        .headers
                        .iter()
                        .find(|(name, _)| *name == k)
                        .map(|(_, v)| v.as_str())
                };
                assert_eq!(header("origin"), Some("reconciled"), "{format:?}");
                assert_eq!(header("origin_clock"), Some(label), "{format:?}");
                match format {
                    ValueFormat::Protobuf => assert_eq!(
                        Envelope::decode(record.value.as_slice()).unwrap(),
                        e.envelope
                    ),
                    ValueFormat::Json => {
                        let value: serde_json::Value =
                            serde_json::from_slice(&record.value).unwrap();
                        assert_eq!(value["origin"], "reconciled");
                        assert_eq!(value["origin_clock"], label);
                    }
                }
            }
        }
    }

    #[test]
    fn the_publisher_header_is_the_json_lines_object() {
        use crate::publisher::Publisher;
        let encoder = RecordEncoder::new(TopicTemplate::parse("ev").unwrap(), ValueFormat::Json);
        for (publisher, expected) in [
            (
                Publisher::Process {
                    uid: 1000,
                    gid: 100,
                    pid: Some(4242),
                },
                serde_json::json!({ "uid": 1000, "gid": 100, "pid": 4242 }),
            ),
            (
                Publisher::Certificate {
                    subject: "CN=node-7,O=Acme".into(),
                },
                serde_json::json!({ "subject": "CN=node-7,O=Acme" }),
            ),
        ] {
            let e = event(
                "default",
                "/tasks/exit",
                "containerd.events.TaskExit",
                r#"{"container_id":"c1"}"#,
            )
            .with_publisher(Some(publisher));
            let record = encoder.encode(&e);
            let header = record
                .headers
                .iter()
                .find(|(name, _)| *name == "publisher")
                .map(|(_, v)| v.as_str())
                .expect("a publisher header");
            let parsed: serde_json::Value = serde_json::from_str(header).unwrap();
            assert_eq!(parsed, expected);
            let value: serde_json::Value = serde_json::from_slice(&record.value).unwrap();
            assert_eq!(value["publisher"], expected, "the value carries it too");
        }
    }
}
