//! Every record of an event keeps its whole [`Identity`]: an event with every field
//! set (and, one field at a time, set to something else) goes through each codec
//! that reads back (spool record, audit store row, dead letter, Kafka record in each
//! value format into a Kafka source, resumable Subscribe's record) and comes back
//! with the same identity, but for the fields a codec leaves out on purpose, named
//! here. The codecs that are only written (the audit chain's hash, JSON lines) change
//! with every field they cover.
//!
//! A field added to [`Identity`] is a compile error in [`base`], [`other`] and
//! [`differing`] until it has a value in both and is compared; from there this test
//! fails for each codec that does not carry it (or leave it out on purpose, listed).

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::event::{Clock, Event, EventId, Identity, Origin, Source, Witness, Workload};
use crate::proto::containerd::types::Envelope;
use crate::publisher::Publisher;
use crate::testing::{self, T0};

/// The Kafka source the Kafka records are taken in by: its name replaces the source
/// the event had (see [`through_kafka`]).
const TAKER: &str = "fleet";

/// Every field set, none to its default. The source is a Kafka source: only events
/// taken in from another gateway carry a node seq (the spool writes it for them
/// alone).
fn base() -> Identity {
    Identity {
        id: EventId::generate(),
        received_at: UNIX_EPOCH + Duration::new(T0 as u64, 123_456_789),
        source: Source::Kafka("central".into()),
        publisher: Some(Publisher::Process {
            uid: 1000,
            gid: 1001,
            pid: Some(4242),
        }),
        origin: Origin::Reconciled {
            clock: Clock::Daemon,
            from: Witness::Cri,
        },
        workload: Some(Arc::new(Workload {
            kind: Some("container".into()),
            pod_name: Some("web-0".into()),
            pod_namespace: Some("shop".into()),
            pod_uid: Some("u-1".into()),
            container_name: Some("nginx".into()),
            image: "nginx:1.27".into(),
            labels: [("team".to_owned(), "a".to_owned())].into(),
            reason: Some("OOMKilled".into()),
        })),
        node: Some("web-1".into()),
        node_seq: Some(41),
        node_source: Some("upstream:containerd".into()),
    }
}

/// Every field set to something other than [`base`]'s (and than its default).
fn other() -> Identity {
    Identity {
        id: EventId::generate(),
        received_at: UNIX_EPOCH + Duration::new(T0 as u64 + 1, 987_654_321),
        source: Source::Kafka("east".into()),
        publisher: Some(Publisher::Certificate {
            subject: "CN=relay,O=shop".into(),
        }),
        origin: Origin::Reconciled {
            clock: Clock::Reconcile,
            from: Witness::Docker,
        },
        workload: Some(Arc::new(Workload {
            kind: Some("sandbox".into()),
            pod_name: Some("web-1".into()),
            pod_namespace: Some("shop".into()),
            pod_uid: Some("u-2".into()),
            container_name: None,
            image: "pause:3.10".into(),
            labels: [("team".to_owned(), "b".to_owned())].into(),
            reason: Some("Error".into()),
        })),
        node: Some("web-2".into()),
        node_seq: Some(42),
        node_source: Some("publish".into()),
    }
}

/// The names of the fields in which `back` is not `sent`.
fn differing(sent: &Identity, back: &Identity) -> Vec<&'static str> {
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
    } = sent;
    [
        ("id", *id == back.id),
        ("received_at", *received_at == back.received_at),
        ("source", *source == back.source),
        ("publisher", *publisher == back.publisher),
        ("origin", *origin == back.origin),
        ("workload", *workload == back.workload),
        ("node", *node == back.node),
        ("node_seq", *node_seq == back.node_seq),
        ("node_source", *node_source == back.node_source),
    ]
    .into_iter()
    .filter_map(|(name, same)| (!same).then_some(name))
    .collect()
}

/// [`base`] with the field `name` taken from `other`.
fn with_field_of(base: &Identity, other: &Identity, name: &str) -> Identity {
    let mut identity = base.clone();
    match name {
        "id" => identity.id = other.id,
        "received_at" => identity.received_at = other.received_at,
        "source" => identity.source = other.source.clone(),
        "publisher" => identity.publisher = other.publisher.clone(),
        "origin" => identity.origin = other.origin,
        "workload" => identity.workload = other.workload.clone(),
        "node" => identity.node = other.node.clone(),
        "node_seq" => identity.node_seq = other.node_seq,
        "node_source" => identity.node_source = other.node_source.clone(),
        _ => panic!("no variation of the identity field {name:?}: add one here"),
    }
    identity
}

/// [`base`], then [`base`] with one field changed, for every field.
fn cases() -> Vec<(&'static str, Identity)> {
    let (base, other) = (base(), other());
    let names = differing(&base, &other);
    assert_eq!(names.len(), 9, "every field differs between base and other");
    let mut cases = vec![("none", base.clone())];
    for name in names {
        let changed = with_field_of(&base, &other, name);
        assert_eq!(differing(&base, &changed), [name]);
        cases.push((name, changed));
    }
    cases
}

fn envelope() -> Envelope {
    testing::envelope()
        .at_nanos(T0, 5)
        .json(
            "containerd.events.TaskExit",
            r#"{"container_id":"c1","id":"c1","pid":42,"exit_status":137}"#,
        )
        .build()
}

fn event(identity: Identity) -> Event {
    Event::from_identity(7, identity, envelope())
}

/// Asserts that `codec` gives back every case's identity, but for the fields in
/// `left_out`, and the seq and the envelope as they were.
fn assert_round_trips(codec: &str, left_out: &[&str], through: impl Fn(Event) -> Event) {
    for (changed, identity) in cases() {
        let back = through(event(identity.clone()));
        assert_eq!(
            differing(&identity, &back.identity),
            left_out,
            "{codec}, with {changed} changed: {identity:?} came back as {:?}",
            back.identity
        );
        assert_eq!(back.seq, 7, "{codec}");
        assert_eq!(back.envelope, envelope(), "{codec}");
    }
}

#[test]
fn a_spool_record_keeps_the_whole_identity() {
    use crate::spool::record::{decode, encode};
    assert_round_trips("spool record", &[], |event| {
        let mut buf = Vec::new();
        encode(&event, &mut buf).expect("a small record");
        decode(&buf).expect("a record it wrote")
    });
}

#[test]
fn an_audit_store_row_keeps_the_whole_identity() {
    use crate::query::{Query, Reader, RowRange};
    // The SQLite store hashes its own `source`; a node's source is PostgreSQL's.
    assert_round_trips("audit store", &["node_source"], |event| {
        // A store each: rows with an id already stored are skipped.
        let store = testing::TempStore::with(&[event]);
        let reader = Reader::open(store.path()).unwrap();
        let mut back = Vec::new();
        reader
            .each(&Query::default(), RowRange::ALL, |stored| {
                back.push(stored.event);
                true
            })
            .unwrap();
        let report = crate::store::verify::verify(store.path(), &[]).unwrap();
        assert_eq!(report.problem, None, "the row's hash verifies");
        back.pop().expect("the row")
    });
}

#[tokio::test]
async fn a_dead_letter_keeps_the_whole_identity() {
    use crate::deadletter::{Failure, Reason, Store};
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("deadletters.db"), true)
        .await
        .unwrap();
    let failure = Failure {
        reason: Reason::RetriesExhausted,
        error: "gone".into(),
        attempts: 3,
        first_attempt_at: SystemTime::UNIX_EPOCH,
        last_attempt_at: SystemTime::UNIX_EPOCH,
    };
    // One forwarder per case: a second death of an event id for the same forwarder
    // only adds to its row.
    let cases = cases();
    for (changed, identity) in &cases {
        let event = Arc::new(event(identity.clone()));
        store
            .record(changed, vec![event], failure.clone())
            .await
            .unwrap();
    }
    for (changed, identity) in cases {
        let entries = store.list(Some(changed.to_owned()), None).await.unwrap();
        let [entry] = entries.as_slice() else {
            panic!("{changed}: {entries:?}");
        };
        let back = entry.to_event().unwrap();
        assert_eq!(
            differing(&identity, &back.identity),
            [] as [&str; 0],
            "dead letter, with {changed} changed: {identity:?} came back as {:?}",
            back.identity
        );
        assert_eq!(back.seq, 7);
        assert_eq!(back.envelope, envelope());
    }
}

/// A Kafka forwarder's record of the event in `format`, taken in by the Kafka
/// source [`TAKER`]: the taker is the event's source from there on, and its seq is
/// the taking exchange's to give (the seq it had is its node seq then, which the
/// event here already has).
fn through_kafka(format: crate::forward::kafka::ValueFormat, event: Event) -> Event {
    use crate::forward::kafka::{RecordEncoder, TopicTemplate};
    use crate::source::kafka::decode::{Message, decode};
    use crate::source::kafka::options::Format;
    let template = TopicTemplate::parse("events").unwrap();
    let record = RecordEncoder::new(template, format)
        .on_node("elsewhere")
        .encode(&event);
    let message = Message {
        topic: "events",
        partition: 0,
        offset: 1,
        headers: record
            .headers
            .iter()
            .map(|(k, v)| (*k, v.as_bytes()))
            .collect(),
        value: record.value.as_deref(),
    };
    let back = decode(&message, Format::Auto, &Arc::from(TAKER)).unwrap();
    assert_eq!(back.seq, 0, "the taking exchange gives it its seq");
    assert_eq!(back.identity.source, Source::Kafka(TAKER.into()));
    Event::from_identity(event.seq, back.identity, back.envelope)
}

#[test]
fn a_kafka_record_keeps_the_whole_identity_but_the_source() {
    use crate::forward::kafka::ValueFormat;
    for format in [
        ValueFormat::Protobuf,
        ValueFormat::Json,
        ValueFormat::CloudeventsBinary,
        ValueFormat::CloudeventsStructured,
    ] {
        let codec = format!("kafka record ({format:?})");
        assert_round_trips(&codec, &["source"], |event| through_kafka(format, event));
    }
}

/// A node's own event (no node source yet) is taken in with the source it entered
/// the node by as its node source, in every format: what a central copy needs to
/// hash as the node's store did.
#[test]
fn a_kafka_record_of_a_nodes_own_event_carries_its_source_as_the_node_source() {
    use crate::forward::kafka::ValueFormat;
    for format in [
        ValueFormat::Protobuf,
        ValueFormat::Json,
        ValueFormat::CloudeventsBinary,
        ValueFormat::CloudeventsStructured,
    ] {
        for source in [
            Source::Upstream("containerd".into()),
            Source::Publish,
            Source::Forward,
            Source::Internal,
        ] {
            let mut identity = base();
            identity.source = source.clone();
            identity.node_seq = None;
            identity.node_source = None;
            let back = through_kafka(format, event(identity));
            assert_eq!(
                back.identity.node_source.as_deref(),
                Some(source.describe().as_ref()),
                "{format:?}"
            );
            assert_eq!(back.identity.node_seq, Some(7), "{format:?}");
        }
    }
}

#[test]
fn a_resume_record_keeps_the_identity_but_the_arrival_time_and_node_seq() {
    use crate::resume::record::{from_record, to_record};
    assert_round_trips(
        "resume record",
        &["received_at", "node_seq", "node_source"],
        |event| from_record(to_record(&event)).unwrap(),
    );
}

/// Write-only codecs: every case but the first changes what is written.
fn assert_every_field_changes(codec: &str, left_out: &[&str], write: impl Fn(&Event) -> Vec<u8>) {
    let mut cases = cases().into_iter();
    let (_, base) = cases.next().expect("the base case");
    let written = write(&event(base));
    for (changed, identity) in cases {
        let same = write(&event(identity)) == written;
        assert_eq!(
            same,
            left_out.contains(&changed),
            "{codec}: changing {changed} changed what is written: {}",
            !same
        );
    }
}

#[test]
fn the_audit_chain_hash_covers_the_whole_identity() {
    use crate::store::{EventRow, chain};
    assert_every_field_changes("audit chain hash", &["node_source"], |event| {
        let row = EventRow::from_event(event);
        chain::row_hash(&chain::ZERO, &chain::values(7, &row)).to_vec()
    });
}

#[test]
fn a_json_line_covers_the_identity_but_the_arrival_time() {
    assert_every_field_changes("JSON line", &["received_at"], |event| {
        crate::render::event_json(event).into_bytes()
    });
}
