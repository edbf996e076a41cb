//! What node gateways' kafka forwarders write, read back: every format, every
//! standard event type, the gateway's identity of each event kept.

use std::time::{Duration, UNIX_EPOCH};

use super::*;
use crate::event::{Clock, Witness};
use crate::forward::kafka::{Record, RecordEncoder, TopicTemplate, ValueFormat};
use crate::proto::STANDARD_EVENTS;
use crate::testing;

const FORMATS: [ValueFormat; 4] = [
    ValueFormat::Protobuf,
    ValueFormat::Json,
    ValueFormat::CloudeventsBinary,
    ValueFormat::CloudeventsStructured,
];

fn read(record: &Record, format: Format) -> Result<Event, DecodeError> {
    let message = Message {
        topic: "events",
        partition: 2,
        offset: 40,
        headers: record
            .headers
            .iter()
            .map(|(k, v)| (*k, v.as_bytes()))
            .collect(),
        value: record.value.as_deref(),
    };
    decode(&message, format, &Arc::from("fleet"))
}

fn workload() -> Arc<Workload> {
    Arc::new(Workload {
        kind: Some("container".into()),
        pod_name: Some("web-0".into()),
        pod_namespace: Some("shop".into()),
        pod_uid: Some("u-1".into()),
        container_name: Some("nginx".into()),
        image: "docker.io/library/nginx:1".into(),
        labels: [("team".to_owned(), "a\"b".to_owned())].into(),
        reason: None,
    })
}

/// Every standard event type, in every format the forwarder writes, read back
/// both by auto-detection and by the configured format: the same envelope, id,
/// node, seq (as node_seq), origin, publisher, workload and received time.
#[test]
fn every_format_round_trips_the_event_and_its_identity() {
    let received = UNIX_EPOCH + Duration::new(1_714_557_600, 123_456_789);
    let registry = Registry::global();
    for (i, (_, type_url)) in STANDARD_EVENTS.iter().enumerate() {
        let payload = registry.encode_json(type_url, "{}").unwrap();
        let publisher = match i % 3 {
            0 => None,
            1 => Some(Publisher::Process {
                uid: 0,
                gid: 5,
                pid: Some(77),
            }),
            _ => Some(Publisher::Certificate {
                subject: "CN=node-7,O=Acme\\, Inc.".into(),
            }),
        };
        // Each witness, and a reason (with or without the rest of a workload).
        let origin = match i % 4 {
            0 | 2 => Origin::Live,
            1 => Origin::reconciled(Clock::Daemon),
            _ => Origin::Reconciled {
                clock: Clock::Reconcile,
                from: [Witness::Cri, Witness::Docker][(i / 4) % 2],
            },
        };
        let workload = match i % 6 {
            0 | 2 | 4 => Some(workload()),
            1 => Some(Arc::new(Workload {
                reason: Some("OOMKilled".into()),
                ..(*workload()).clone()
            })),
            3 => Some(Arc::new(Workload {
                reason: Some("Completed".into()),
                ..Workload::default()
            })),
            _ => None,
        };
        let event = testing::event(1000 + i as u64)
            .namespace("k8s.io")
            .topic("/tasks/exit")
            .at_nanos(1_714_557_600, 5)
            .payload(Some(payload))
            .received_at(received)
            .publisher(publisher.clone())
            .origin(origin)
            .workload(workload)
            .node("web-1")
            .upstream("containerd")
            .build();
        for format in FORMATS {
            let record =
                RecordEncoder::new(TopicTemplate::parse("events").unwrap(), format).encode(&event);
            let configured = match format {
                ValueFormat::Protobuf => Format::Protobuf,
                ValueFormat::Json => Format::Json,
                ValueFormat::CloudeventsBinary => Format::CloudeventsBinary,
                ValueFormat::CloudeventsStructured => Format::CloudeventsStructured,
            };
            for read_as in [Format::Auto, configured] {
                let back = read(&record, read_as)
                    .unwrap_or_else(|e| panic!("{type_url} {format:?} {read_as:?}: {e}"));
                let what = format!("{type_url} as {format:?} read {read_as:?}");
                assert_eq!(back.envelope, event.envelope, "{what}");
                assert_eq!(back.identity.id, event.identity.id, "{what}");
                assert_eq!(back.node(), Some("web-1"), "{what}");
                assert_eq!(back.identity.node_seq, Some(event.seq), "{what}");
                assert_eq!(back.identity.origin, origin, "{what}");
                assert_eq!(back.identity.publisher, publisher, "{what}");
                assert_eq!(back.identity.workload, event.identity.workload, "{what}");
                assert_eq!(back.identity.received_at, received, "{what}");
                assert_eq!(
                    back.identity.source,
                    Source::Kafka(Arc::from("fleet")),
                    "{what}"
                );
            }
        }
    }
}

/// A payload with every kind of field set (strings, integers, a timestamp), one
/// holding an Any of a type the registry does not know (a container's runtime
/// options), a payload the registry does not know (raw bytes in every format) and an event
/// without one all come back as they were.
#[test]
fn set_fields_unknown_payloads_and_no_payload_survive() {
    let create = crate::proto::containerd::events::ContainerCreate {
        id: "c1".into(),
        image: "busybox".into(),
        runtime: Some(
            crate::proto::containerd::events::container_create::Runtime {
                name: "io.containerd.runc.v2".into(),
                // A type this gateway does not know, as CRI sets runc's options.
                options: Some(Any {
                    type_url: "containerd.runc.v1.Options".into(),
                    value: vec![8, 1, 18, 3, 97, 98, 99],
                }),
            },
        ),
    };
    for payload in [
        Some(Any {
            type_url: "containerd.events.ContainerCreate".into(),
            value: create.encode_to_vec(),
        }),
        Some(testing::json_any(
            "containerd.events.TaskExit",
            r#"{"containerId":"c1","id":"c1","pid":42,"exitStatus":137,"exitedAt":"2024-05-01T10:00:00.000000005Z"}"#,
        )),
        Some(Any {
            type_url: "example.Custom".into(),
            value: vec![1, 2, 3, 0xff],
        }),
        None,
    ] {
        let event = testing::event(3)
            .at(1_714_557_600)
            .payload(payload)
            .node("web-2")
            .build();
        for format in FORMATS {
            let record =
                RecordEncoder::new(TopicTemplate::parse("e").unwrap(), format).encode(&event);
            let back = read(&record, Format::Auto).unwrap();
            assert_eq!(back.envelope, event.envelope, "{format:?}");
        }
    }
}

/// An event that passed through a central gateway already carries its node seq:
/// produced again, it keeps that one, not the central gateway's seq.
#[test]
fn a_node_seq_outlives_a_second_hop() {
    let event = testing::event(900)
        .at(1_714_557_600)
        .node("web-1")
        .taken_in_by_kafka("fleet", 12)
        .build();
    let record = RecordEncoder::new(TopicTemplate::parse("e").unwrap(), ValueFormat::Protobuf)
        .encode(&event);
    assert_eq!(record.header("node_seq"), Some("12"));
    let back = read(&record, Format::Auto).unwrap();
    assert_eq!(back.identity.node_seq, Some(12));
}

/// Messages that are not events are refused with a reason; a plain envelope
/// without a gateway's headers gets an id from its place in Kafka, the same each
/// time it is read.
#[test]
fn foreign_and_broken_messages() {
    let envelope = testing::envelope().at(1_714_557_600).build();
    let bare = envelope.encode_to_vec();
    let plain = |value: &'static [u8]| Message {
        topic: "events",
        partition: 0,
        offset: 7,
        headers: Vec::new(),
        value: Some(value),
    };
    let fleet: Arc<str> = Arc::from("fleet");
    let bare: &'static [u8] = Box::leak(bare.into_boxed_slice());
    let first = decode(&plain(bare), Format::Auto, &fleet).unwrap();
    let again = decode(&plain(bare), Format::Auto, &fleet).unwrap();
    assert_eq!(first.envelope, envelope);
    assert_eq!(
        first.identity.id, again.identity.id,
        "one place in Kafka, one id"
    );
    assert_eq!((first.node(), first.identity.node_seq), (None, None));
    let elsewhere = Message {
        offset: 8,
        ..plain(bare)
    };
    assert_ne!(
        decode(&elsewhere, Format::Auto, &fleet)
            .unwrap()
            .identity
            .id,
        first.identity.id
    );

    // A value, its headers, and the reason it is skipped for.
    type Case<'a> = (&'a [u8], Vec<(&'a str, &'a [u8])>, &'a str);
    let cases: [Case<'_>; 8] = [
        (b"\xff\xff\xff", vec![], "protobuf"),
        (b"{not json", vec![], "json"),
        (br#"{"namespace":"default"}"#, vec![], "field"),
        (bare, vec![("event_id", b"not-a-uuid")], "header"),
        (bare, vec![("seq", b"-1")], "header"),
        (
            bare,
            vec![
                ("origin", b"reconciled"),
                ("origin_clock", b"daemon"),
                ("reconciled_from", b"kubelet"),
            ],
            "header",
        ),
        (
            bare,
            vec![("origin", b"live"), ("reconciled_from", b"cri")],
            "header",
        ),
        (
            br#"{"namespace":"default","topic":"/x","type_url":"containerd.events.TaskExit","event":{"exitStatus":"many"}}"#,
            vec![],
            "payload",
        ),
    ];
    for (value, headers, reason) in cases {
        let message = Message {
            headers,
            ..plain(value)
        };
        let error = decode(&message, Format::Auto, &fleet).unwrap_err();
        assert_eq!(error.reason(), reason, "{error}");
    }
}

/// A node name longer than a spool record can hold is cut as the spool cuts it, on
/// a character boundary, so the event is the same live and after a restart.
#[test]
fn long_node_names_are_cut_as_the_spool_cuts_them() {
    let event = testing::envelope().at(1_714_557_600).build();
    let value = event.encode_to_vec();
    let long = "é".repeat(200);
    let message = Message {
        topic: "events",
        partition: 0,
        offset: 1,
        headers: vec![("node", long.as_bytes())],
        value: Some(&value),
    };
    let back = decode(&message, Format::Auto, &Arc::from("fleet")).unwrap();
    let node = back.node().unwrap();
    assert_eq!(node.len(), 254);
    assert!(long.starts_with(node));
}

/// A received time the spool cannot hold exactly (it keeps nanoseconds in an i64:
/// 1677 to 2262) is refused by name rather than taken in and changed by a restart;
/// the edges of that range are taken in. Found by the kafka fuzz target's round trip.
#[test]
fn a_received_time_the_spool_cannot_hold_is_refused() {
    let event = testing::envelope().at(1_714_557_600).build();
    let value = event.encode_to_vec();
    let message = |received: &'static str| Message {
        topic: "events",
        partition: 0,
        offset: 1,
        headers: vec![("received_at", received.as_bytes())],
        value: Some(&value),
    };
    let fleet: Arc<str> = Arc::from("fleet");
    for received in ["1012-05-01T10:00:00Z", "2300-01-01T00:00:00Z"] {
        let error = decode(&message(received), Format::Auto, &fleet).unwrap_err();
        assert!(error.to_string().contains("received_at"), "{error}");
    }
    for received in ["1678-01-01T00:00:00Z", "2261-12-31T23:59:59Z"] {
        let back = decode(&message(received), Format::Auto, &fleet).unwrap();
        let mut record = Vec::new();
        crate::spool::record::encode(&back, &mut record).unwrap();
        let again = crate::spool::record::decode(&record).unwrap();
        assert_eq!(again.identity.received_at, back.identity.received_at);
    }
}
