use prost_types::Any;
use serde_json::{Map, Value};

use super::*;
use crate::event::{Clock, Witness};
use crate::proto::STANDARD_EVENTS;
use crate::testing::{self, T0, json_any};

fn parsed(json: &str) -> Map<String, Value> {
    match serde_json::from_str(json).unwrap() {
        Value::Object(object) => object,
        other => panic!("not an object: {other}"),
    }
}

/// An exit in `default` at a time with every digit of its nanoseconds set.
fn envelope(event: Option<Any>) -> Envelope {
    testing::envelope()
        .at_nanos(T0, 123_456_789)
        .payload(event)
        .build()
}

#[test]
fn ctr_lines() {
    let any = json_any(
        "containerd.events.TaskExit",
        r#"{"container_id":"c1","id":"c1","pid":1234,"exit_status":137}"#,
    );
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
    let any = json_any("containerd.events.TaskExit", r#"{"container_id":"c1"}"#);
    let object = parsed(&envelope_json(&envelope(Some(any))));
    assert_eq!(object["timestamp"], "2024-05-01T10:00:00.123456789Z");
    assert_eq!(object["type_url"], "containerd.events.TaskExit");
    assert_eq!(object["event"]["container_id"], "c1");
    assert_eq!(object["event"]["exit_status"], 0, "defaults are present");

    let unknown = Any {
        type_url: "example.Custom".into(),
        value: vec![1, 2, 3],
    };
    let object = parsed(&envelope_json(&envelope(Some(unknown))));
    assert_eq!(object["event"], Value::Null);
    assert_eq!(object["raw"], "AQID");
}

#[test]
fn archive_shapes_keep_identity_and_undecodable_payloads() {
    let any = json_any("containerd.events.TaskExit", r#"{"container_id":"c1"}"#);
    let event = testing::event(7).envelope(envelope(Some(any))).build();
    let object = parsed(&event_json(&event));
    assert_eq!(object["seq"], 7);
    assert_eq!(object["id"], event.identity.id.to_string());
    assert_eq!(object["source"], "publish");
    assert_eq!(object["publisher"], Value::Null, "no client known");
    assert_eq!(object["origin"], "live");
    assert_eq!(object["node"], Value::Null, "captured nowhere known");
    let on_node = testing::event(8)
        .envelope(envelope(None))
        .node("web-1")
        .build();
    assert_eq!(parsed(&event_json(&on_node))["node"], "web-1");
    assert!(
        !object.contains_key("origin_clock"),
        "a live event has no clock"
    );
    assert!(!object.contains_key("reconciled_from"), "nor a witness");
    assert!(!object.contains_key("reason"), "nor a reason");
    let mut without_identity = object.clone();
    without_identity.remove("seq");
    without_identity.remove("id");
    without_identity.remove("source");
    without_identity.remove("publisher");
    without_identity.remove("origin");
    without_identity.remove("node");
    assert_eq!(without_identity, parsed(&envelope_json(&event.envelope)));
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

/// An event's id, seq, source, publisher, origin, node and reason, as the archive
/// shape adds them.
type Identity<'a> = (
    EventId,
    u64,
    &'a str,
    Value,
    Origin,
    Option<&'a str>,
    Option<&'a str>,
);

/// The envelope object as it was built before, through a `serde_json::Value` tree.
fn reference_object(envelope: &Envelope, identity: Option<Identity<'_>>) -> String {
    use crate::proto::json_reference::to_json;
    let decoded = decode(envelope);
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
            match &decoded {
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
    if let Some((id, seq, source, publisher, origin, node, reason)) = identity {
        object.insert("id".into(), json!(id.to_string()));
        object.insert("node".into(), json!(node));
        object.insert("seq".into(), json!(seq));
        object.insert("source".into(), json!(source));
        object.insert("publisher".into(), publisher);
        object.insert("origin".into(), json!(origin.label()));
        if let Some(clock) = origin.clock() {
            object.insert("origin_clock".into(), json!(clock.label()));
        }
        if let Some(from) = origin.witness() {
            object.insert("reconciled_from".into(), json!(from.label()));
        }
        if let Some(reason) = reason {
            object.insert("reason".into(), json!(reason));
        }
    }
    Value::Object(object).to_string()
}

#[test]
fn objects_are_byte_for_byte_what_the_value_tree_gave() {
    let reg = Registry::global();
    let mut payloads: Vec<Option<Any>> = vec![None];
    for (_, type_url) in STANDARD_EVENTS {
        let desc = reg.message(type_url).unwrap();
        // Every string field set, so each field's name and escaping is compared.
        let mut json = Map::new();
        for field in desc.fields() {
            if field.kind() == prost_reflect::Kind::String && !field.is_list() {
                json.insert(
                    field.name().into(),
                    format!("v\"<{}>\u{1}", field.name()).into(),
                );
            }
        }
        payloads.push(Some(reg.encode_json(type_url, "{}").unwrap()));
        let text = Value::Object(json).to_string();
        payloads.push(Some(reg.encode_json(type_url, &text).unwrap()));
        let prefixed = format!("type.googleapis.com/{type_url}");
        payloads.push(Some(Any {
            type_url: prefixed,
            value: reg.encode_json(type_url, &text).unwrap().value,
        }));
    }
    payloads.push(Some(Any {
        type_url: "example.com/Custom\"x".into(),
        value: vec![1, 2, 3, 0xff],
    }));
    payloads.push(Some(Any {
        type_url: String::new(),
        value: Vec::new(),
    }));
    payloads.push(Some(Any {
        type_url: "containerd.events.TaskExit".into(),
        value: vec![0x0a, 100, b'x'],
    }));
    for (i, payload) in payloads.into_iter().enumerate() {
        let mut env = envelope(payload);
        env.namespace = format!("ns-{i}");
        if i % 3 == 0 {
            env.timestamp = None;
        }
        assert_eq!(envelope_json(&env), reference_object(&env, None), "{env:?}");
        // Each shape of publisher in turn, with subjects that need JSON escapes.
        let (publisher, expected) = match i % 3 {
            0 => (None, Value::Null),
            1 => (
                Some(Publisher::Process {
                    uid: 1000,
                    gid: 100,
                    pid: Some(i as u32 + 1),
                }),
                json!({ "uid": 1000, "gid": 100, "pid": i + 1 }),
            ),
            _ => (
                Some(Publisher::Certificate {
                    subject: format!("CN=c{i},O=\"\u{1}\\,").into(),
                }),
                json!({ "subject": format!("CN=c{i},O=\"\u{1}\\,") }),
            ),
        };
        // And each origin and witness, crossed with the publishers.
        let origin = match i % 4 {
            0 => Origin::Live,
            1 => Origin::reconciled(Clock::Daemon),
            2 => Origin::Reconciled {
                clock: Clock::Daemon,
                from: Witness::Cri,
            },
            _ => Origin::Reconciled {
                clock: Clock::Reconcile,
                from: Witness::Docker,
            },
        };
        // Reasons (one needing JSON escapes) and none, with no other workload.
        let reason = match i % 5 {
            0 | 1 => None,
            2 => Some("OOMKilled"),
            3 => Some(""),
            _ => Some("Error: \"x\"\u{1}"),
        };
        // Known nodes (one needing JSON escapes) and unknown ones.
        let node = match i % 3 {
            0 => None,
            1 => Some("web-1"),
            _ => Some("n\"\\é"),
        };
        let mut event = testing::event(i as u64)
            .envelope(env)
            .publisher(publisher)
            .origin(origin);
        if let Some(node) = node {
            event = event.node(node);
        }
        if let Some(reason) = reason {
            event = event.workload(Some(std::sync::Arc::new(Workload {
                reason: Some(reason.to_owned()),
                ..Workload::default()
            })));
        }
        let event = event.build();
        assert_eq!(
            event_json(&event),
            reference_object(
                &event.envelope,
                Some((
                    event.identity.id,
                    event.seq,
                    "publish",
                    expected,
                    origin,
                    node,
                    reason
                ))
            ),
            "{event:?}"
        );
    }
}

/// The container's record rides in `container` and `pod`, keys sorted like the rest,
/// and only what the record said is written.
#[test]
fn workloads_are_written_as_container_and_pod() {
    use crate::event::workload::{CONTAINER_NAME, KIND, POD_NAME, POD_NAMESPACE};
    let labels = [
        (POD_NAME, "web-7"),
        (POD_NAMESPACE, "shop"),
        (CONTAINER_NAME, "nginx"),
        (KIND, "container"),
        ("app", "web"),
    ];
    let workload = testing::workload("nginx:1.27", &labels);
    let event = testing::event(3)
        .envelope(envelope(None))
        .workload(workload)
        .build();
    let json = event_json(&event);
    let object = parsed(&json);
    assert_eq!(
        object["container"],
        json!({"image": "nginx:1.27", "kind": "container", "labels": {"app": "web"}, "name": "nginx"})
    );
    assert_eq!(object["pod"], json!({"name": "web-7", "namespace": "shop"}));
    let keys: Vec<&String> = object.keys().collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted, "{json}");

    let plain = testing::workload("busybox", &[]);
    let event = testing::event(4)
        .envelope(envelope(None))
        .workload(plain)
        .build();
    let object = parsed(&event_json(&event));
    assert_eq!(object["container"], json!({"image": "busybox"}));
    assert!(!object.contains_key("pod"));
}

/// A reconciled event says whose record it came from and, when the manager gave
/// one, the reason, keys sorted like the rest; a reason does not make a container.
#[test]
fn reconciled_events_carry_their_witness_and_reason() {
    use crate::event::workload::{CONTAINER_NAME, POD_NAME};
    let mut workload = testing::workload(
        "nginx:1.27",
        &[(POD_NAME, "web-7"), (CONTAINER_NAME, "nginx")],
    )
    .map(|w| (*w).clone())
    .unwrap();
    workload.reason = Some("OOMKilled".into());
    let event = testing::event(3)
        .envelope(envelope(None))
        .origin(Origin::Reconciled {
            clock: Clock::Daemon,
            from: Witness::Cri,
        })
        .workload(Some(std::sync::Arc::new(workload)))
        .build();
    let json = event_json(&event);
    let object = parsed(&json);
    assert_eq!(object["origin"], "reconciled");
    assert_eq!(object["origin_clock"], "daemon");
    assert_eq!(object["reconciled_from"], "cri");
    assert_eq!(object["reason"], "OOMKilled");
    assert_eq!(
        object["container"],
        json!({"image": "nginx:1.27", "name": "nginx"})
    );
    let keys: Vec<&String> = object.keys().collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted, "{json}");

    let from_containerd = testing::event(4)
        .envelope(envelope(None))
        .origin(Origin::reconciled(Clock::Reconcile))
        .build();
    let object = parsed(&event_json(&from_containerd));
    assert_eq!(object["reconciled_from"], "containerd");
    assert!(!object.contains_key("reason"));
    assert!(!object.contains_key("container"));
}
