//! Topics, keys, values and headers of the records events become.

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
            let record = RecordEncoder::new(TopicTemplate::parse("ev").unwrap(), format).encode(&e);
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
                    let value: serde_json::Value = serde_json::from_slice(&record.value).unwrap();
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
