//! `eventgate replay` into a tansu broker: the selected events, with their ids. The
//! rest: tests/plain/replay.rs.

use crate::support;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

use eventgate::event::{Event, EventId, Source};
use eventgate::internal::query::{Query, Reader, RowRange, StoredEvent};
use eventgate::internal::store::{EventRow, WriterOptions, insert_rows, open_writer};
use eventgate::proto::Registry;
use eventgate::proto::containerd::types::Envelope;
use serde_json::Value;
use support::*;

const T0: i64 = 1_714_557_600; // 2024-05-01T10:00:00Z

/// The node the sample store's events were captured on.
const NODE: &str = "host-a";

/// Event `i` of a sample store: namespaces alternate, every third is a start, the
/// rest exits; ten minutes apart; container `c<i>` so each is recognisable after a
/// Forward gave it a new id; captured on node [`NODE`].
fn sample_event(i: u64, namespace: &str) -> Event {
    let (topic, type_name) = match i % 3 {
        0 => ("/tasks/start", "containerd.events.TaskStart"),
        _ => ("/tasks/exit", "containerd.events.TaskExit"),
    };
    let any = Registry::global()
        .encode_json(
            type_name,
            &format!(r#"{{"container_id":"c{i}","pid":{i}}}"#),
        )
        .unwrap();
    Event::new(
        i,
        EventId::generate(),
        Source::Upstream("node-a".into()),
        Envelope {
            timestamp: Some(prost_types::Timestamp {
                seconds: T0 + i as i64 * 600,
                nanos: 123_456_789,
            }),
            namespace: namespace.into(),
            topic: topic.into(),
            event: Some(any),
        },
    )
    .with_node(Some(NODE.into()))
}

fn write_store(path: &Path, events: &[Event]) {
    let mut conn = open_writer(path, &WriterOptions::default()).unwrap();
    let rows: Vec<EventRow<'_>> = events.iter().map(EventRow::from_event).collect();
    insert_rows(&mut conn, &rows).unwrap();
}

/// `count` events in `dir/audit.db`, alternating between `default` and `k8s.io`.
fn sample_store(dir: &Path, count: u64) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join("audit.db");
    let events: Vec<Event> = (1..=count)
        .map(|i| sample_event(i, ["default", "k8s.io"][i as usize % 2]))
        .collect();
    write_store(&path, &events);
    path
}

fn run(args: &[&str]) -> Output {
    eventgate()
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `eventgate query --format json` for the same selection: what a replay must send.
fn query_json(db: &Path, selection: &[&str]) -> Vec<Value> {
    let out = run(&[
        &["query", "--db", path_str(db), "--format", "json"],
        selection,
    ]
    .concat());
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn stored(db: &Path) -> Vec<StoredEvent> {
    let Ok(reader) = Reader::open(db) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    reader
        .each(&Query::default(), RowRange::ALL, |e| {
            out.push(e);
            true
        })
        .unwrap();
    out
}

// ---------------------------------------------------------------- forwarder target

// ---------------------------------------------------------------- exchange target

// ---------------------------------------------------------------- kafka

/// The backfill: a time range and a filter replayed into a real broker through the
/// configured kafka forwarder; the messages are exactly the selected events, in
/// order, with their original ids, seqs and nodes in the headers and envelopes as
/// stored.
#[tokio::test(flavor = "multi_thread")]
async fn kafka_is_backfilled_with_the_selected_events_and_their_ids() {
    use prost::Message as _;
    use rdkafka::message::{Headers, Message};
    let tansu = support::tansu::Tansu::start();
    let dir = tempfile::tempdir().unwrap();
    let db = sample_store(&dir.path().join("src"), 50);
    let config = dir.path().join("kafka.toml");
    std::fs::write(
        &config,
        format!(
            "data_dir = {:?}\n[[forwarder]]\nname = \"kafka\"\nkind = \"kafka\"\nbrokers = \"{}\"\n\
             topic = \"backfill\"\ncreate_topic = true\npartitions = 1\nreplication_factor = 1\n",
            path_str(&dir.path().join("data")),
            tansu.brokers()
        ),
    )
    .unwrap();
    let selection = [
        "--since",
        "2024-05-01T11:00:00Z",
        "--until",
        "2024-05-01T16:00:00+00:00",
        r#"topic=="/tasks/exit""#,
        "namespace==k8s.io",
    ];
    let expected = query_json(&db, &selection);
    assert!(expected.len() >= 5);
    let args: Vec<String> = [
        &["replay", "--db", path_str(&db), "--to-forwarder", "kafka"][..],
        &["--config", path_str(&config), "--batch", "4"],
        &selection,
    ]
    .concat()
    .iter()
    .map(|s| s.to_string())
    .collect();
    let out = tokio::task::spawn_blocking(move || eventgate().args(&args).output().unwrap())
        .await
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));

    let brokers = tansu.brokers();
    let count = expected.len();
    let messages =
        tokio::task::spawn_blocking(move || support::tansu::consume(&brokers, "backfill", count))
            .await
            .unwrap();
    assert_eq!(messages.len(), expected.len(), "exactly the selection");
    let originals: HashMap<String, Event> = stored(&db)
        .into_iter()
        .map(|s| (s.event.identity.id.to_string(), s.event))
        .collect();
    for (message, want) in messages.iter().zip(&expected) {
        let header = |name: &str| {
            message
                .headers()
                .and_then(|h| h.iter().find(|h| h.key == name))
                .and_then(|h| h.value)
                .map(|v| String::from_utf8_lossy(v).into_owned())
        };
        let id = header("event_id").unwrap();
        assert_eq!(id, want["id"].as_str().unwrap(), "in store order");
        assert_eq!(header("seq").unwrap(), want["seq"].to_string());
        assert_eq!(
            header("node").as_deref(),
            Some(NODE),
            "the node it was captured on"
        );
        let envelope = Envelope::decode(message.payload().unwrap()).unwrap();
        assert_eq!(envelope, originals[&id].envelope);
    }
}
