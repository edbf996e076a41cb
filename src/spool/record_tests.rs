//! The record format: round trips, and records of earlier formats still read.

use super::*;
use crate::testing::{self, T0};

#[test]
fn round_trip_keeps_every_field() {
    let envelope = testing::envelope()
        .namespace("k8s.io")
        .raw("containerd.events.TaskExit", vec![1, 2, 3])
        .build();
    let at = UNIX_EPOCH + Duration::from_nanos(1_700_000_000_123_456_789);
    for source in [
        Source::Publish,
        Source::Forward,
        Source::Upstream(Arc::from("k3s")),
        Source::Internal,
    ] {
        let event = testing::event(42)
            .received_at(at)
            .source(source.clone())
            .envelope(envelope.clone())
            .build();
        let mut buf = vec![9; 3];
        let len = encode(&event, &mut buf).unwrap();
        assert_eq!(buf.len(), 3 + len);
        assert_eq!(check(&buf[3..]), Check::Valid { seq: 42, len });
        assert_eq!(check(&buf[3..buf.len() - 1]), Check::Incomplete);
        let back = decode(&buf[3..]).unwrap();
        assert_eq!(
            (
                back.seq,
                back.identity.id,
                back.identity.received_at,
                back.identity.source
            ),
            (42, event.identity.id, at, source)
        );
        assert_eq!(back.envelope, envelope);
        let mut flipped = buf[3..].to_vec();
        flipped[HEADER + 40] ^= 0x10;
        assert_eq!(check(&flipped), Check::Bad);
    }
}

/// The envelope every record below carries, built afresh for each comparison.
fn envelope() -> Envelope {
    testing::envelope()
        .at_nanos(T0, 5)
        .raw("containerd.events.TaskExit", vec![0x0a, 0x02, b'c', b'1'])
        .build()
}

#[test]
fn publishers_survive_the_round_trip() {
    let long = "CN=".to_owned() + &"é".repeat(40_000);
    for publisher in [
        Publisher::Process {
            uid: 1000,
            gid: 100,
            pid: Some(4242),
        },
        Publisher::Process {
            uid: 0,
            gid: 0,
            pid: None,
        },
        Publisher::Certificate {
            subject: r"CN=node-7,O=Acme\, Inc.".into(),
        },
        Publisher::Certificate {
            subject: long.as_str().into(),
        },
    ] {
        for source in [Source::Publish, Source::Forward] {
            let event = testing::event(9)
                .source(source.clone())
                .envelope(envelope())
                .publisher(Some(publisher.clone()))
                .build();
            let mut buf = Vec::new();
            let len = encode(&event, &mut buf).unwrap();
            assert_eq!(check(&buf), Check::Valid { seq: 9, len });
            assert_eq!(buf[HEADER + KIND_AT] & HAS_PUBLISHER, HAS_PUBLISHER);
            let back = decode(&buf).unwrap();
            assert_eq!((back.identity.source, back.envelope), (source, envelope()));
            match (&publisher, back.identity.publisher) {
                (
                    Publisher::Certificate { subject },
                    Some(Publisher::Certificate { subject: read }),
                ) if subject.len() > u16::MAX as usize => {
                    assert!(
                        subject.starts_with(&*read) && read.len() > 65_000,
                        "clipped on a character boundary"
                    );
                }
                (publisher, read) => assert_eq!(read.as_ref(), Some(publisher)),
            }
        }
    }
}

/// The exact bytes the format wrote before publishers were kept, laid out by
/// hand: spools written by earlier versions must still be read after an upgrade.
#[test]
fn records_of_the_format_before_publishers_are_read() {
    let id = [7u8; 16];
    let nanos: i64 = 1_714_557_600_000_000_005;
    let name = b"node-a";
    let mut body = Vec::new();
    body.extend_from_slice(&42u64.to_le_bytes());
    body.extend_from_slice(&id);
    body.extend_from_slice(&nanos.to_le_bytes());
    body.push(2);
    body.extend_from_slice(&(name.len() as u16).to_le_bytes());
    body.extend_from_slice(name);
    body.extend_from_slice(&envelope().encode_to_vec());
    let mut record = Vec::new();
    record.extend_from_slice(&(body.len() as u32).to_le_bytes());
    record.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
    record.extend_from_slice(&body);

    let len = record.len();
    assert_eq!(check(&record), Check::Valid { seq: 42, len });
    let event = decode(&record).unwrap();
    assert_eq!(event.identity.id, EventId::from_bytes(id));
    assert_eq!(event.identity.source, Source::Upstream(Arc::from("node-a")));
    assert_eq!(event.identity.received_at, from_unix_nanos(nanos));
    assert_eq!(event.envelope, envelope());
    assert_eq!(event.identity.publisher, None);
    assert_eq!(
        event.identity.origin,
        Origin::Live,
        "records before origins were kept are live"
    );

    // The same event written today is byte for byte what it was.
    let mut today = Vec::new();
    let again = testing::event(42)
        .id(event.identity.id)
        .received_at(event.identity.received_at)
        .source(event.identity.source.clone())
        .envelope(envelope())
        .build();
    encode(&again, &mut today).unwrap();
    assert_eq!(today, record);
}

#[test]
fn damaged_publisher_blocks_are_refused() {
    let event = testing::event(3)
        .envelope(envelope())
        .publisher(Some(Publisher::Certificate {
            subject: "CN=x".into(),
        }))
        .build();
    let mut buf = Vec::new();
    encode(&event, &mut buf).unwrap();
    let block = HEADER + MIN_BODY;
    for (at, value) in [(block, 9u8), (block + 1, 0xff), (block + 3, 0xff)] {
        let mut bad = buf.clone();
        bad[at] = value;
        assert!(
            decode(&bad).is_none_or(|e| e.identity.publisher != event.identity.publisher),
            "byte {at} = {value}"
        );
    }
    let mut unknown_kind = buf.clone();
    unknown_kind[HEADER + KIND_AT] = HAS_PUBLISHER | (KAFKA + 1);
    let crc = crc32fast::hash(&unknown_kind[HEADER..]);
    unknown_kind[4..8].copy_from_slice(&crc.to_le_bytes());
    assert_eq!(check(&unknown_kind), Check::Bad);
}

fn reconciled(clock: Clock) -> Origin {
    Origin::reconciled(clock)
}

#[test]
fn origins_survive_the_round_trip_with_and_without_a_publisher() {
    let certificate = Publisher::Certificate {
        subject: "CN=node-7".into(),
    };
    for origin in [
        reconciled(Clock::Daemon),
        reconciled(Clock::Reconcile),
        Origin::Repeat,
    ] {
        for (source, publisher) in [
            (Source::Upstream(Arc::from("node-a")), None),
            (Source::Internal, None),
            (Source::Forward, Some(certificate.clone())),
        ] {
            let event = testing::event(11)
                .source(source.clone())
                .envelope(envelope())
                .publisher(publisher.clone())
                .origin(origin)
                .build();
            let mut buf = Vec::new();
            let len = encode(&event, &mut buf).unwrap();
            assert_eq!(check(&buf), Check::Valid { seq: 11, len });
            assert_eq!(buf[HEADER + KIND_AT] & HAS_ORIGIN, HAS_ORIGIN);
            let back = decode(&buf).unwrap();
            assert_eq!(back.identity.origin, origin, "{source:?}");
            assert_eq!(back.identity.publisher, publisher);
            assert_eq!((back.identity.source, back.envelope), (source, envelope()));
        }
    }
}

#[test]
fn a_live_event_is_written_without_an_origin_byte() {
    let event = testing::event(5).envelope(envelope()).build();
    let mut live = Vec::new();
    encode(&event, &mut live).unwrap();
    assert_eq!(live[HEADER + KIND_AT] & HAS_ORIGIN, 0);
    let event = event.with_origin(reconciled(Clock::Daemon));
    let mut marked = Vec::new();
    encode(&event, &mut marked).unwrap();
    assert_eq!(marked.len(), live.len() + 1, "one byte for the origin");
}

#[test]
fn damaged_origin_bytes_are_refused() {
    let event = testing::event(3)
        .source(Source::Internal)
        .envelope(envelope())
        .origin(reconciled(Clock::Reconcile))
        .build();
    let mut buf = Vec::new();
    encode(&event, &mut buf).unwrap();
    let at = HEADER + MIN_BODY;
    assert_eq!(buf[at], 2, "the reconcile clock's byte");
    // 3 is a repeat, alone: with a witness it is no byte any version wrote.
    for value in [0u8, 4, 3 | 16, 0xff] {
        let mut bad = buf.clone();
        bad[at] = value;
        assert!(decode(&bad).is_none(), "origin byte {value}");
    }
    // Both flag bits and an unknown source: damaged, not a new kind.
    let mut unknown_kind = buf.clone();
    unknown_kind[HEADER + KIND_AT] = HAS_ORIGIN | HAS_PUBLISHER | (KAFKA + 1);
    let crc = crc32fast::hash(&unknown_kind[HEADER..]);
    unknown_kind[4..8].copy_from_slice(&crc.to_le_bytes());
    assert_eq!(check(&unknown_kind), Check::Bad);
}

fn workload() -> Arc<Workload> {
    let labels = [
        (crate::event::workload::POD_NAME, "web-7"),
        (crate::event::workload::POD_NAMESPACE, "shop"),
        ("app", "web"),
    ];
    testing::workload("nginx:1.27", &labels).unwrap()
}

#[test]
fn workloads_survive_the_round_trip_with_publisher_and_origin() {
    for origin in [Origin::Live, reconciled(Clock::Daemon)] {
        let event = testing::event(9)
            .upstream("k8s")
            .envelope(envelope())
            .origin(origin)
            .workload(Some(workload()))
            .build();
        let mut buf = Vec::new();
        let len = encode(&event, &mut buf).unwrap();
        assert_eq!(check(&buf), Check::Valid { seq: 9, len });
        assert_eq!(buf[HEADER + KIND_AT] & HAS_WORKLOAD, HAS_WORKLOAD);
        let back = decode(&buf).unwrap();
        assert_eq!(back.identity.workload, Some(workload()));
        assert_eq!((back.identity.origin, back.envelope), (origin, envelope()));
    }
    // Without one, the record is what it always was.
    let plain = testing::event(9).envelope(envelope()).build();
    let mut buf = Vec::new();
    encode(&plain, &mut buf).unwrap();
    assert_eq!(buf[HEADER + KIND_AT] & HAS_WORKLOAD, 0);
    assert_eq!(decode(&buf).unwrap().identity.workload, None);
}

#[test]
fn damaged_workload_blocks_are_refused() {
    let event = testing::event(4)
        .upstream("k8s")
        .envelope(envelope())
        .workload(Some(workload()))
        .build();
    let mut buf = Vec::new();
    encode(&event, &mut buf).unwrap();
    // The block's length, just after the upstream's name.
    let at = HEADER + MIN_BODY + "k8s".len();
    for len in [u32::MAX, (buf.len() - at) as u32, 1] {
        let mut bad = buf.clone();
        bad[at..at + 4].copy_from_slice(&len.to_le_bytes());
        assert!(decode(&bad).is_none(), "workload length {len}");
    }
}

/// The node survives with and without the other optional blocks, and a record
/// without it (every one written before nodes were kept, whose bytes are checked
/// above) reads as an unknown node.
#[test]
fn nodes_survive_the_round_trip_and_old_records_have_none() {
    let publisher = Some(crate::publisher::Publisher::Process {
        uid: 1,
        gid: 2,
        pid: Some(3),
    });
    for (workload, origin) in [
        (None, Origin::Live),
        (Some(workload()), reconciled(Clock::Reconcile)),
    ] {
        let event = testing::event(5)
            .upstream("k8s")
            .envelope(envelope())
            .publisher(publisher.clone())
            .origin(origin)
            .workload(workload.clone())
            .node("web-1")
            .build();
        let mut buf = Vec::new();
        let len = encode(&event, &mut buf).unwrap();
        assert_eq!(check(&buf), Check::Valid { seq: 5, len });
        assert_eq!(buf[HEADER + KIND_AT] & HAS_NODE, HAS_NODE);
        let back = decode(&buf).unwrap();
        assert_eq!(back.node(), Some("web-1"));
        assert_eq!(
            (
                back.identity.workload,
                back.identity.origin,
                back.identity.publisher,
                back.envelope
            ),
            (workload, origin, publisher.clone(), envelope())
        );
    }
    let unknown = testing::event(6).envelope(envelope()).build();
    let mut buf = Vec::new();
    encode(&unknown, &mut buf).unwrap();
    assert_eq!(buf[HEADER + KIND_AT] & HAS_NODE, 0);
    assert_eq!(decode(&buf).unwrap().node(), None);
}

/// A node name longer than the block can say is cut on a character boundary,
/// never written with a length that lies.
#[test]
fn long_node_names_are_cut_to_the_block() {
    let long = "é".repeat(200);
    let event = testing::event(7).envelope(envelope()).node(&long).build();
    let mut buf = Vec::new();
    encode(&event, &mut buf).unwrap();
    let back = decode(&buf).unwrap();
    let node = back.node().unwrap();
    assert_eq!(node.len(), 254, "127 two-byte characters");
    assert!(long.starts_with(node));
}

#[test]
fn damaged_node_blocks_are_refused() {
    let event = testing::event(8).envelope(envelope()).node("web-1").build();
    let mut buf = Vec::new();
    encode(&event, &mut buf).unwrap();
    // The block's length byte comes right after the (empty) source name.
    let at = HEADER + MIN_BODY;
    assert_eq!(buf[at], 5);
    let mut too_long = buf.clone();
    too_long[at] = 255;
    assert!(decode(&too_long).is_none(), "a length past the record");
    let mut not_utf8 = buf.clone();
    not_utf8[at + 1] = 0xff;
    assert!(decode(&not_utf8).is_none(), "a name that is not UTF-8");
}

/// An event from a Kafka source keeps the source's name and its seq on its node; a
/// message that did not say reads back as an unknown node seq.
#[test]
fn kafka_sourced_events_keep_their_source_and_node_seq() {
    for node_seq in [Some(41), None] {
        let mut event = testing::event(9)
            .envelope(envelope())
            .node("web-2")
            .taken_in_by_kafka("fleet", 41)
            .build();
        event.identity.node_seq = node_seq;
        let mut buf = Vec::new();
        let len = encode(&event, &mut buf).unwrap();
        assert_eq!(check(&buf), Check::Valid { seq: 9, len });
        let back = decode(&buf).unwrap();
        assert_eq!(back.identity.source, Source::Kafka(Arc::from("fleet")));
        assert_eq!(
            (back.node(), back.identity.node_seq),
            (Some("web-2"), node_seq)
        );
        assert_eq!(
            (back.identity.id, back.envelope),
            (event.identity.id, envelope())
        );
    }
    let mut unknown_kind = Vec::new();
    encode(
        &testing::event(10).envelope(envelope()).build(),
        &mut unknown_kind,
    )
    .unwrap();
    unknown_kind[HEADER + KIND_AT] |= KAFKA + 1;
    let body = &unknown_kind[HEADER..];
    let crc = crc32fast::hash(body).to_le_bytes();
    unknown_kind[4..8].copy_from_slice(&crc);
    assert_eq!(check(&unknown_kind), Check::Bad, "source 5 is not known");
}

/// A taken-in event keeps how it entered its node; the block exists only for a
/// Kafka source's event, so a record claiming one for another source is damage, and
/// a record written before the block existed reads without one.
#[test]
fn node_sources_survive_the_round_trip_and_only_kafka_events_have_one() {
    let mut event = testing::event(9)
        .envelope(envelope())
        .node("web-1")
        .taken_in_by_kafka("fleet", 41)
        .build();
    event.identity.node_source = Some("upstream:containerd".into());
    let mut buf = Vec::new();
    encode(&event, &mut buf).unwrap();
    assert_eq!(buf[HEADER + KIND_AT] & HAS_NODE_SOURCE, HAS_NODE_SOURCE);
    let back = decode(&buf).unwrap();
    assert_eq!(back.identity, event.identity);

    event.identity.node_source = None;
    let mut without = Vec::new();
    encode(&event, &mut without).unwrap();
    assert_eq!(without[HEADER + KIND_AT] & HAS_NODE_SOURCE, 0);
    assert_eq!(decode(&without).unwrap().identity.node_source, None);

    // The same bytes under another source's kind.
    let mut publish = buf.clone();
    publish[HEADER + KIND_AT] &= !0x07;
    let crc = crc32fast::hash(&publish[HEADER..]);
    publish[4..8].copy_from_slice(&crc.to_le_bytes());
    assert!(decode(&publish).is_none());
}
