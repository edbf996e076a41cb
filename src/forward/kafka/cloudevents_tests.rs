//! The CloudEvents mapping of both content modes, through the record encoder.

use std::sync::Arc;

use serde_json::Value;

use super::*;
use crate::event::{Clock, Origin, Witness};
use crate::forward::kafka::record::KeyMode;
use crate::forward::kafka::{Record, RecordEncoder, TopicTemplate, ValueFormat};
use crate::testing::{self, T0};

/// Nanoseconds every timestamp below carries, so that CloudEvents' `time` shows them.
const NANOS: i32 = 123_456_789;

fn task_exit(source: Source) -> Event {
    testing::event(7)
        .source(source)
        .at_nanos(T0, NANOS)
        .json(
            "containerd.events.TaskExit",
            r#"{"container_id":"c1","id":"c1","pid":42,"exit_status":3}"#,
        )
        .build()
}

fn unknown_type() -> Event {
    testing::event(9)
        .source(Source::Forward)
        .namespace("team-a")
        .topic("/custom/thing")
        .at_nanos(T0, NANOS)
        .raw("example.Custom", vec![1, 2, 3])
        .build()
}

fn encode(format: ValueFormat, event: &Event) -> Record {
    RecordEncoder::new(TopicTemplate::parse("ev").unwrap(), format)
        .on_node("node-1")
        .encode(event)
}

fn structured_value(record: &Record) -> Value {
    serde_json::from_slice(record.value.as_deref().expect("a value")).expect("one JSON object")
}

/// The `event` object of the `json` format: what CloudEvents data must equal.
fn json_format_payload(event: &Event) -> Value {
    let record = encode(ValueFormat::Json, event);
    structured_value(&record)["event"].clone()
}

#[test]
fn binary_mode_maps_every_attribute_to_a_ce_header() {
    let e = task_exit(Source::Publish);
    let record = encode(ValueFormat::CloudeventsBinary, &e);
    let id = e.identity.id.to_string();
    for (header, expected) in [
        ("ce_specversion", "1.0"),
        ("ce_id", id.as_str()),
        ("ce_source", "eventgate://node-1/publish"),
        ("ce_type", "containerd.events.TaskExit"),
        ("ce_subject", "default/c1"),
        ("ce_time", "2024-05-01T10:00:00.123456789Z"),
        ("ce_namespace", "default"),
        ("ce_topic", "/tasks/exit"),
        ("ce_seq", "7"),
        ("ce_origin", "live"),
        ("content-type", "application/json"),
    ] {
        assert_eq!(record.header(header), Some(expected), "{header}");
    }
    assert_eq!(record.header("ce_originclock"), None, "live: no clock");
    assert_eq!(
        record.header("ce_datacontenttype"),
        None,
        "content-type holds it"
    );
    // The headers every format carries, which consumers dedupe by.
    assert_eq!(record.header("event_id"), Some(id.as_str()));
    assert_eq!(record.header("seq"), Some("7"));
    let data: Value = serde_json::from_slice(record.value.as_deref().unwrap()).unwrap();
    assert_eq!(data, json_format_payload(&e));
    assert_eq!(data["container_id"], "c1");
    assert_eq!(data["exit_status"], 3);
    // Extension names are lowercase a-z0-9 (the spec's rule for attribute names).
    for (name, _) in &record.headers {
        if let Some(attribute) = name.strip_prefix("ce_") {
            assert!(
                attribute
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()),
                "{name}"
            );
        }
    }
}

#[test]
fn structured_mode_is_one_json_event_format_object() {
    let e = task_exit(Source::Publish)
        .with_origin(Origin::reconciled(Clock::Daemon))
        .with_publisher(None);
    let record = encode(ValueFormat::CloudeventsStructured, &e);
    assert_eq!(
        record.header("content-type"),
        Some("application/cloudevents+json; charset=UTF-8")
    );
    assert!(
        !record.headers.iter().any(|(k, _)| k.starts_with("ce_")),
        "attributes live in the value"
    );
    assert_eq!(
        record.header("event_id"),
        Some(e.identity.id.to_string().as_str())
    );
    let value = structured_value(&record);
    let expected = serde_json::json!({
        "specversion": "1.0",
        "id": e.identity.id.to_string(),
        "source": "eventgate://node-1/publish",
        "type": "containerd.events.TaskExit",
        "subject": "default/c1",
        "time": "2024-05-01T10:00:00.123456789Z",
        "namespace": "default",
        "topic": "/tasks/exit",
        "seq": "7",
        "origin": "reconciled",
        "originclock": "daemon",
        "reconciledfrom": "containerd",
        "datacontenttype": "application/json",
        "data": json_format_payload(&e),
    });
    assert_eq!(value, expected);
    let names = value.as_object().unwrap().keys();
    for name in names.filter(|n| *n != "data") {
        assert!(
            name.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()),
            "{name}"
        );
    }
}

/// A payload the registry cannot decode is still delivered whole: its protobuf
/// bytes, declared `application/protobuf`, with the type URL as `type`.
#[test]
fn undecodable_payloads_travel_as_protobuf_bytes() {
    let e = unknown_type();
    let binary = encode(ValueFormat::CloudeventsBinary, &e);
    assert_eq!(binary.header("content-type"), Some("application/protobuf"));
    assert_eq!(binary.value.as_deref(), Some(&[1u8, 2, 3][..]));
    assert_eq!(binary.header("ce_type"), Some("example.Custom"));
    assert_eq!(binary.header("ce_subject"), Some("team-a"), "no object");
    assert_eq!(
        binary.header("ce_source"),
        Some("eventgate://node-1/forward")
    );
    let value = structured_value(&encode(ValueFormat::CloudeventsStructured, &e));
    assert_eq!(value["datacontenttype"], "application/protobuf");
    assert_eq!(value["data_base64"], "AQID");
    assert_eq!(value.get("data"), None);
    assert_eq!(value["type"], "example.Custom");
}

#[test]
fn envelopes_without_payload_or_time_leave_those_attributes_out() {
    let e = testing::event(1).source(Source::Internal).build();
    let binary = encode(ValueFormat::CloudeventsBinary, &e);
    assert_eq!(binary.value, None, "no data: a message with no value");
    assert_eq!(binary.header("content-type"), None);
    assert_eq!(binary.header("ce_time"), None);
    assert_eq!(binary.header("ce_type"), Some("eventgate.unknown"));
    assert_eq!(
        binary.header("ce_source"),
        Some("eventgate://node-1/internal")
    );
    let value = structured_value(&encode(ValueFormat::CloudeventsStructured, &e));
    for absent in ["data", "data_base64", "datacontenttype", "time"] {
        assert_eq!(value.get(absent), None, "{absent}");
    }
    // Year 10000 has no RFC 3339 form.
    let far = testing::event(1)
        .topic("/t")
        .at_nanos(253_402_300_800, NANOS)
        .build();
    assert_eq!(
        encode(ValueFormat::CloudeventsBinary, &far).header("ce_time"),
        None
    );
}

#[test]
fn sources_name_the_node_and_the_upstream_percent_encoded() {
    let upstream = |name: &str| source("node-1", &Source::Upstream(Arc::from(name)));
    assert_eq!(upstream("edge"), "eventgate://node-1/upstream/edge");
    assert_eq!(
        upstream("edge node/ü?#%"),
        "eventgate://node-1/upstream/edge%20node%2F%C3%BC%3F%23%25"
    );
    assert_eq!(upstream(".."), "eventgate://node-1/upstream/%2E%2E");
    assert_eq!(
        upstream("a.b~c_d-e"),
        "eventgate://node-1/upstream/a.b~c_d-e"
    );
    assert_eq!(
        source("rack 7:a", &Source::Publish),
        "eventgate://rack%207%3Aa/publish"
    );
    let e = testing::event(1)
        .source(Source::Upstream(Arc::from("k8s/containerd")))
        .topic("/t")
        .at_nanos(0, NANOS)
        .build();
    let value = structured_value(&encode(ValueFormat::CloudeventsStructured, &e));
    assert_eq!(
        value["source"],
        "eventgate://node-1/upstream/k8s%2Fcontainerd"
    );
}

#[test]
fn types_are_bare_message_names() {
    assert_eq!(
        event_type("type.googleapis.com/containerd.events.TaskExit"),
        "containerd.events.TaskExit"
    );
    assert_eq!(
        event_type("containerd.events.TaskExit"),
        "containerd.events.TaskExit"
    );
    assert_eq!(event_type(""), "eventgate.unknown");
    assert_eq!(event_type("example.com/"), "eventgate.unknown");
}

/// The key option and the CloudEvents subject are independent: the subject always
/// names the object.
#[test]
fn the_subject_does_not_follow_the_key_option() {
    let e = task_exit(Source::Publish);
    let record = RecordEncoder::new(
        TopicTemplate::parse("ev").unwrap(),
        ValueFormat::CloudeventsBinary,
    )
    .keyed_by(KeyMode::Unkeyed)
    .encode(&e);
    assert_eq!(record.key, None);
    assert_eq!(record.header("ce_subject"), Some("default/c1"));
}

/// What the container's record said travels as headers in every format, and as
/// extensions (names without `_`, legal CloudEvents names) in both CloudEvents modes.
#[test]
fn workloads_travel_as_headers_and_extensions() {
    use crate::event::Workload;
    use crate::event::workload::{CONTAINER_NAME, KIND, POD_NAME, POD_NAMESPACE, POD_UID};
    let labels = [
        (POD_NAME, "web-7"),
        (POD_NAMESPACE, "shop"),
        (POD_UID, "0b1c"),
        (CONTAINER_NAME, "nginx"),
        (KIND, "container"),
        ("app", "web"),
    ]
    .map(|(k, v)| (k.to_owned(), v.to_owned()));
    let mut workload = Workload::from_record("nginx:1.27", labels).unwrap();
    workload.reason = Some("OOMKilled".into());
    let event = task_exit(Source::Upstream("k8s".into()))
        .with_workload(Some(Arc::new(workload)))
        .with_origin(Origin::Reconciled {
            clock: Clock::Daemon,
            from: Witness::Cri,
        });
    let expected = [
        ("pod_name", "podname", "web-7"),
        ("pod_namespace", "podnamespace", "shop"),
        ("pod_uid", "poduid", "0b1c"),
        ("container_name", "containername", "nginx"),
        ("container_kind", "containerkind", "container"),
        ("image", "image", "nginx:1.27"),
        ("container_labels", "containerlabels", r#"{"app":"web"}"#),
        ("reason", "reason", "OOMKilled"),
        ("reconciled_from", "reconciledfrom", "cri"),
    ];
    for format in [
        ValueFormat::Protobuf,
        ValueFormat::Json,
        ValueFormat::CloudeventsBinary,
        ValueFormat::CloudeventsStructured,
    ] {
        let record = encode(format, &event);
        for (header, _, value) in expected {
            assert_eq!(record.header(header), Some(value), "{format:?} {header}");
        }
    }
    let binary = encode(ValueFormat::CloudeventsBinary, &event);
    let structured = structured_value(&encode(ValueFormat::CloudeventsStructured, &event));
    for (_, extension, value) in expected {
        assert!(
            extension
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        );
        assert_eq!(binary.header(&format!("ce_{extension}")), Some(value));
        assert_eq!(structured[extension], value, "{extension}");
    }
    // Without a workload, none of them; live, no witness.
    let plain = encode(ValueFormat::CloudeventsBinary, &task_exit(Source::Publish));
    assert!(plain.header("pod_name").is_none() && plain.header("ce_podname").is_none());
    assert!(plain.header("reason").is_none() && plain.header("ce_reason").is_none());
    assert!(
        plain.header("reconciled_from").is_none() && plain.header("ce_reconciledfrom").is_none()
    );
}

/// `source` names the node the event was captured on, percent-encoded into a valid
/// URI authority, with a `node` extension in both modes; the forwarder's own `node`
/// stands in only for an event whose node is unknown.
#[test]
fn the_source_names_the_node_the_event_was_captured_on() {
    let on = |node: &str| {
        testing::event(7)
            .source(Source::Upstream(Arc::from("k8s")))
            .at_nanos(T0, NANOS)
            .json("containerd.events.TaskExit", r#"{"container_id":"c1"}"#)
            .node(node)
            .build()
    };
    let record = encode(ValueFormat::CloudeventsBinary, &on("web-1"));
    assert_eq!(
        record.header("ce_source"),
        Some("eventgate://web-1/upstream/k8s")
    );
    assert_eq!(record.header("ce_node"), Some("web-1"));
    let value = structured_value(&encode(ValueFormat::CloudeventsStructured, &on("web-1")));
    assert_eq!(value["source"], "eventgate://web-1/upstream/k8s");
    assert_eq!(value["node"], "web-1");

    // A name that is no host name still makes a valid URI-reference.
    let odd = encode(ValueFormat::CloudeventsBinary, &on("wéb:1/@x"));
    assert_eq!(
        odd.header("ce_source"),
        Some("eventgate://w%C3%A9b%3A1%2F%40x/upstream/k8s")
    );
    assert_eq!(odd.header("ce_node"), Some("wéb:1/@x"));

    // Unknown: the forwarder's `node`, and no extension.
    let record = encode(ValueFormat::CloudeventsBinary, &task_exit(Source::Publish));
    assert_eq!(
        record.header("ce_source"),
        Some("eventgate://node-1/publish")
    );
    assert_eq!(record.header("ce_node"), None);
}
