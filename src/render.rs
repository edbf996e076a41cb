//! The text shapes events are printed and archived in: `ctr events` lines and JSON
//! lines. One place, so the CLI and the file forwarder cannot drift apart.

use prost_reflect::DynamicMessage;
use serde_json::{Map, Value, json};

use crate::event::Event;
use crate::proto::containerd::types::Envelope;
use crate::proto::{Registry, go_time_string, rfc3339_nanos, to_go_json, to_json};

/// The line `ctr events` prints: `<time> <namespace> <topic> <json>`. `None` when the
/// payload cannot be decoded: ctr skips such events, and so does this shape.
pub fn ctr_line(envelope: &Envelope) -> Option<String> {
    let decoded = decode(envelope);
    ctr_line_with(envelope, decoded.as_ref())
}

/// [`ctr_line`] for an accepted event, reusing the payload it already decoded.
pub fn event_ctr_line(event: &Event) -> Option<String> {
    ctr_line_with(&event.envelope, event.decoded())
}

/// The `ctr events` shape for a payload that cannot be decoded, for archives that must
/// not drop it: the JSON part is `{"type_url":...,"raw":<base64 payload>}`, the same
/// names [`json_object`] uses for such payloads.
pub fn ctr_raw_line(envelope: &Envelope) -> String {
    let (type_url, raw) = match &envelope.event {
        Some(any) => (any.type_url.as_str(), base64_of(&any.value)),
        None => ("", String::new()),
    };
    format!(
        "{} {} {} {}",
        go_time_string(&envelope.timestamp.unwrap_or_default()),
        envelope.namespace,
        envelope.topic,
        json!({ "type_url": type_url, "raw": raw })
    )
}

fn ctr_line_with(envelope: &Envelope, decoded: Option<&DynamicMessage>) -> Option<String> {
    let time = go_time_string(&envelope.timestamp.unwrap_or_default());
    let json = match &envelope.event {
        None => String::new(),
        Some(_) => to_go_json(decoded?),
    };
    Some(format!(
        "{time} {} {} {json}",
        envelope.namespace, envelope.topic
    ))
}

/// One JSON object describing an envelope. The decoded event is under `event`
/// (null when the type is unknown; the raw bytes are then kept as base64 in `raw`),
/// so nothing is lost for types eventgate does not know.
pub fn json_object(envelope: &Envelope) -> Map<String, Value> {
    let decoded = decode(envelope);
    json_object_with(envelope, decoded.as_ref())
}

/// [`json_object`] for an accepted event, plus the gateway's `id` and `seq`.
pub fn event_object(event: &Event) -> Map<String, Value> {
    let mut object = json_object_with(&event.envelope, event.decoded());
    object.insert("id".into(), json!(event.id.to_string()));
    object.insert("seq".into(), json!(event.seq));
    object
}

fn decode(envelope: &Envelope) -> Option<DynamicMessage> {
    Registry::global().decode(envelope.event.as_ref()?).ok()
}

fn base64_of(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn json_object_with(envelope: &Envelope, decoded: Option<&DynamicMessage>) -> Map<String, Value> {
    let mut object = Map::new();
    object.insert(
        "timestamp".into(),
        envelope
            .timestamp
            .as_ref()
            .map_or(Value::Null, |ts| Value::String(rfc3339_nanos(ts))),
    );
    object.insert("namespace".into(), json!(envelope.namespace));
    object.insert("topic".into(), json!(envelope.topic));
    match &envelope.event {
        None => {
            object.insert("type_url".into(), Value::Null);
            object.insert("event".into(), Value::Null);
        }
        Some(any) => {
            object.insert("type_url".into(), json!(any.type_url));
            match decoded {
                Some(message) => {
                    object.insert("event".into(), to_json(message));
                }
                None => {
                    object.insert("event".into(), Value::Null);
                    object.insert("raw".into(), json!(base64_of(&any.value)));
                }
            }
        }
    }
    object
}

#[cfg(test)]
mod tests {
    use prost_types::{Any, Timestamp};

    use super::*;

    fn envelope(event: Option<Any>) -> Envelope {
        Envelope {
            timestamp: Some(Timestamp {
                seconds: 1_714_557_600,
                nanos: 123_456_789,
            }),
            namespace: "default".into(),
            topic: "/tasks/exit".into(),
            event,
        }
    }

    #[test]
    fn ctr_lines() {
        let any = Registry::global()
            .encode_json(
                "containerd.events.TaskExit",
                r#"{"container_id":"c1","id":"c1","pid":1234,"exit_status":137}"#,
            )
            .unwrap();
        assert_eq!(
            ctr_line(&envelope(Some(any))).unwrap(),
            r#"2024-05-01 10:00:00.123456789 +0000 UTC default /tasks/exit {"container_id":"c1","id":"c1","pid":1234,"exit_status":137}"#
        );
        // No payload: the line ends after the topic and a space, as in ctr.
        assert_eq!(
            ctr_line(&envelope(None)).unwrap(),
            "2024-05-01 10:00:00.123456789 +0000 UTC default /tasks/exit "
        );
        let unknown = Any {
            type_url: "example.Custom".into(),
            value: vec![1, 2, 3],
        };
        assert_eq!(ctr_line(&envelope(Some(unknown))), None);
    }

    #[test]
    fn json_objects_keep_unknown_payloads() {
        let any = Registry::global()
            .encode_json("containerd.events.TaskExit", r#"{"container_id":"c1"}"#)
            .unwrap();
        let object = json_object(&envelope(Some(any)));
        assert_eq!(object["timestamp"], "2024-05-01T10:00:00.123456789Z");
        assert_eq!(object["type_url"], "containerd.events.TaskExit");
        assert_eq!(object["event"]["container_id"], "c1");
        assert_eq!(object["event"]["exit_status"], 0, "defaults are present");

        let unknown = Any {
            type_url: "example.Custom".into(),
            value: vec![1, 2, 3],
        };
        let object = json_object(&envelope(Some(unknown)));
        assert_eq!(object["event"], Value::Null);
        assert_eq!(object["raw"], "AQID");
    }

    #[test]
    fn archive_shapes_keep_identity_and_undecodable_payloads() {
        use crate::event::{EventId, Source};

        let any = Registry::global()
            .encode_json("containerd.events.TaskExit", r#"{"container_id":"c1"}"#)
            .unwrap();
        let event = Event::new(7, EventId::generate(), Source::Publish, envelope(Some(any)));
        let object = event_object(&event);
        assert_eq!(object["seq"], 7);
        assert_eq!(object["id"], event.id.to_string());
        let mut without_identity = object.clone();
        without_identity.remove("seq");
        without_identity.remove("id");
        assert_eq!(without_identity, json_object(&event.envelope));
        assert_eq!(event_ctr_line(&event), ctr_line(&event.envelope));

        let unknown = envelope(Some(Any {
            type_url: "example.Custom".into(),
            value: vec![1, 2, 3],
        }));
        assert_eq!(
            ctr_raw_line(&unknown),
            r#"2024-05-01 10:00:00.123456789 +0000 UTC default /tasks/exit {"raw":"AQID","type_url":"example.Custom"}"#
        );
    }
}
