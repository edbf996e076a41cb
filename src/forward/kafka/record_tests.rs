//! Topics, keys, values and headers of the records events become.

use super::*;
use crate::proto::containerd::types::Envelope;
use crate::testing;

/// Event 7: `json` as `ty` in `ns` on `topic`.
fn event(ns: &str, topic: &str, ty: &str, json: &str) -> Event {
    testing::event(7)
        .namespace(ns)
        .topic(topic)
        .json(ty, json)
        .build()
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
    let unknown = testing::event(1)
        .topic("/custom")
        .raw("example.Custom", vec![1])
        .build();
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
        Envelope::decode(proto.value.as_deref().unwrap()).unwrap(),
        e.envelope
    );
    let header = |r: &Record, k: &str| {
        r.headers
            .iter()
            .find(|(name, _)| *name == k)
            .map(|(_, v)| v.clone())
    };
    assert_eq!(header(&proto, "event_id"), Some(e.identity.id.to_string()));
    assert_eq!(header(&proto, "seq").as_deref(), Some("7"));
    assert_eq!(header(&proto, "type_url").as_deref(), Some(e.type_url()));
    let json =
        RecordEncoder::new(TopicTemplate::parse("ev").unwrap(), ValueFormat::Json).encode(&e);
    let value: serde_json::Value = serde_json::from_slice(json.value.as_deref().unwrap()).unwrap();
    assert_eq!(value["id"], e.identity.id.to_string());
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
    assert_eq!(header(&proto, "reconciled_from"), None, "live: no witness");
    assert_eq!(header(&proto, "reason"), None);
    assert_eq!(value["origin"], "live");
    assert_eq!(value.get("origin_clock"), None);
    assert_eq!(value.get("reconciled_from"), None);
    assert_eq!(value.get("reason"), None);
}

const ALL_FORMATS: [ValueFormat; 4] = [
    ValueFormat::Protobuf,
    ValueFormat::Json,
    ValueFormat::CloudeventsBinary,
    ValueFormat::CloudeventsStructured,
];

/// In every value format: the headers say reconciled, which clock, whose record and
/// the manager's reason; JSON and CloudEvents values say the same; the protobuf value
/// is the envelope alone.
#[test]
fn reconciled_events_carry_origin_headers_in_every_value_format() {
    use std::sync::Arc;

    use crate::event::{Clock, Origin, Witness, Workload};
    for (clock, label, from, reason) in [
        (Clock::Daemon, "daemon", Witness::Containerd, None),
        (Clock::Reconcile, "reconcile", Witness::Containerd, None),
        (Clock::Daemon, "daemon", Witness::Cri, Some("OOMKilled")),
        (
            Clock::Reconcile,
            "reconcile",
            Witness::Docker,
            Some("OOMKilled"),
        ),
        (Clock::Daemon, "daemon", Witness::Cri, Some("Completed")),
    ] {
        let workload = reason.map(|reason| {
            Arc::new(Workload {
                pod_name: Some("web-7".into()),
                reason: Some(reason.into()),
                ..Workload::default()
            })
        });
        let e = event(
            "default",
            "/tasks/exit",
            "containerd.events.TaskExit",
            r#"{"container_id":"c1"}"#,
        )
        .with_origin(Origin::Reconciled { clock, from })
        .with_workload(workload);
        let from = from.label();
        for format in ALL_FORMATS {
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
            assert_eq!(header("reconciled_from"), Some(from), "{format:?}");
            assert_eq!(header("reason"), reason, "{format:?}");
            match format {
                ValueFormat::Protobuf => assert_eq!(
                    Envelope::decode(record.value.as_deref().unwrap()).unwrap(),
                    e.envelope
                ),
                ValueFormat::Json => {
                    let value: serde_json::Value =
                        serde_json::from_slice(record.value.as_deref().unwrap()).unwrap();
                    assert_eq!(value["origin"], "reconciled");
                    assert_eq!(value["origin_clock"], label);
                    assert_eq!(value["reconciled_from"], from);
                    assert_eq!(value.get("reason").and_then(|r| r.as_str()), reason);
                }
                ValueFormat::CloudeventsBinary => {
                    assert_eq!(record.header("ce_origin"), Some("reconciled"));
                    assert_eq!(record.header("ce_originclock"), Some(label));
                    assert_eq!(record.header("ce_reconciledfrom"), Some(from));
                    assert_eq!(record.header("ce_reason"), reason);
                }
                ValueFormat::CloudeventsStructured => {
                    let value: serde_json::Value =
                        serde_json::from_slice(record.value.as_deref().unwrap()).unwrap();
                    assert_eq!(value["origin"], "reconciled");
                    assert_eq!(value["originclock"], label);
                    assert_eq!(value["reconciledfrom"], from);
                    assert_eq!(value.get("reason").and_then(|r| r.as_str()), reason);
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
        let value: serde_json::Value =
            serde_json::from_slice(record.value.as_deref().unwrap()).unwrap();
        assert_eq!(value["publisher"], expected, "the value carries it too");
    }
}

fn keyed(key: KeyMode, e: &Event) -> Option<String> {
    RecordEncoder::new(TopicTemplate::parse("ev").unwrap(), ValueFormat::Json)
        .keyed_by(key)
        .encode(e)
        .key
}

#[test]
fn every_key_mode_keys_what_it_names() {
    let exit = event(
        "default",
        "/tasks/exit",
        "containerd.events.TaskExit",
        r#"{"container_id":"c1"}"#,
    );
    assert_eq!(keyed(KeyMode::Object, &exit).as_deref(), Some("default/c1"));
    assert_eq!(keyed(KeyMode::Namespace, &exit).as_deref(), Some("default"));
    assert_eq!(keyed(KeyMode::Topic, &exit).as_deref(), Some("/tasks/exit"));
    assert_eq!(
        keyed(KeyMode::EventId, &exit),
        Some(exit.identity.id.to_string())
    );
    assert_eq!(keyed(KeyMode::Unkeyed, &exit), None);
    let ns_only = event(
        "k8s.io",
        "/namespaces/create",
        "containerd.events.NamespaceCreate",
        r#"{"name":""}"#,
    );
    assert_eq!(keyed(KeyMode::Object, &ns_only).as_deref(), Some("k8s.io"));
}

#[test]
fn templates_whose_fixed_text_leaves_no_room_are_refused() {
    let fits = format!("{}{{namespace}}", "a".repeat(248));
    let resolved = TopicTemplate::parse(&fits).unwrap().resolve("ns", "/t");
    assert_eq!(resolved.len(), 249);
    assert!(resolved.ends_with('n'), "the placeholder keeps a character");
    for too_long in [
        format!("{}{{namespace}}", "a".repeat(249)),
        format!("{}{{namespace}}{{topic}}", "a".repeat(248)),
        format!("{}{{topic}}{}", "a".repeat(200), "b".repeat(60)),
    ] {
        let error = TopicTemplate::parse(&too_long).unwrap_err().to_string();
        assert!(error.contains("`topic`"), "{error}");
        assert!(error.contains("no room"), "{error}");
    }
}

fn legal_topic_name(name: &str) -> bool {
    (1..=MAX_TOPIC_LEN).contains(&name.len())
        && name.chars().all(legal)
        && name != "."
        && name != ".."
}

fn any_value() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    prop_oneof![
        Just(String::new()),
        Just(".".to_owned()),
        Just("..".to_owned()),
        "[./]{0,4}",
        ".{0,300}",
        "[a-z.]{200,300}",
    ]
}

proptest::proptest! {
    /// Whatever a namespace or containerd topic holds, every template that parses
    /// resolves it to a name Kafka accepts.
    #[test]
    fn any_namespace_and_topic_resolve_to_a_legal_name(
        prefix in "[A-Za-z0-9._-]{0,260}",
        middle in "[A-Za-z0-9._-]{0,3}",
        suffix in "[A-Za-z0-9._-]{0,3}",
        shape in 0..4usize,
        namespace in any_value(),
        topic in any_value(),
    ) {
        let text = match shape {
            0 => format!("{prefix}{{namespace}}"),
            1 => format!("{prefix}{{topic}}{suffix}"),
            2 => format!("{prefix}{{namespace}}{middle}{{topic}}{suffix}"),
            _ => format!("{{namespace}}{middle}{{topic}}"),
        };
        if let Ok(template) = TopicTemplate::parse(&text) {
            let name = template.resolve(&namespace, &topic);
            proptest::prop_assert!(legal_topic_name(&name), "{text:?} -> {name:?}");
        }
    }
}

/// In every value format, the node the event was captured on rides in a `node`
/// header (and JSON's `node`); an event whose node is unknown has no header.
#[test]
fn the_node_header_names_where_the_event_was_captured() {
    for format in ALL_FORMATS {
        let encoder = RecordEncoder::new(TopicTemplate::parse("ev").unwrap(), format);
        let known = testing::event(3)
            .at(0)
            .json("containerd.events.TaskExit", r#"{"container_id":"c1"}"#)
            .node("web-1")
            .build();
        let record = encoder.encode(&known);
        assert_eq!(record.header("node"), Some("web-1"), "{format:?}");
        if format == ValueFormat::Json {
            let value: serde_json::Value =
                serde_json::from_slice(record.value.as_deref().unwrap()).unwrap();
            assert_eq!(value["node"], "web-1");
        }
        let unknown = testing::event(4)
            .at(0)
            .json("containerd.events.TaskExit", r#"{"container_id":"c1"}"#)
            .build();
        assert_eq!(encoder.encode(&unknown).header("node"), None, "{format:?}");
    }
}
