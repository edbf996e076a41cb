//! Audit stores for the replay tests, written with the store's own writer: sample
//! events ten minutes apart, and the CLI calls that read them back.

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

use eventgate::event::{Event, EventId, Source};
use eventgate::internal::query::{Query, Reader, RowRange, StoredEvent};
use eventgate::internal::store::{EventRow, WriterOptions, insert_rows, open_writer};
use eventgate::proto::Registry;
use eventgate::proto::containerd::types::Envelope;
use serde_json::Value;

use super::{eventgate, path_str};

pub const T0: i64 = 1_714_557_600; // 2024-05-01T10:00:00Z

/// The node the sample store's events were captured on.
pub const NODE: &str = "host-a";

/// Event `i` of a sample store: namespaces alternate, every third is a start, the
/// rest exits; ten minutes apart; container `c<i>` so each is recognisable after a
/// Forward gave it a new id; captured on node [`NODE`].
pub fn sample_event(i: u64, namespace: &str) -> Event {
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

pub fn write_store(path: &Path, events: &[Event]) {
    let mut conn = open_writer(path, &WriterOptions::default()).unwrap();
    let rows: Vec<EventRow<'_>> = events.iter().map(EventRow::from_event).collect();
    insert_rows(&mut conn, &rows).unwrap();
}

/// `count` events in `dir/audit.db`, alternating between `default` and `k8s.io`.
pub fn sample_store(dir: &Path, count: u64) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join("audit.db");
    let events: Vec<Event> = (1..=count)
        .map(|i| sample_event(i, ["default", "k8s.io"][i as usize % 2]))
        .collect();
    write_store(&path, &events);
    path
}

pub fn run(args: &[&str]) -> Output {
    eventgate()
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `eventgate query --format json` for the same selection: what a replay must send.
pub fn query_json(db: &Path, selection: &[&str]) -> Vec<Value> {
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

pub fn stored(db: &Path) -> Vec<StoredEvent> {
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

/// Ninety task exits of six containers (pid = position), their events interleaved,
/// with runs of one container too.
pub fn interleaved_store(db: &Path) -> Vec<Event> {
    let events: Vec<Event> = (1..=90)
        .map(|i| {
            let mut event = sample_event(i, "default");
            let container = format!("c{}", (i / 4) % 6);
            let any = Registry::global()
                .encode_json(
                    "containerd.events.TaskExit",
                    &format!(r#"{{"container_id":"{container}","pid":{i}}}"#),
                )
                .unwrap();
            event.envelope.event = Some(any);
            event
        })
        .collect();
    write_store(db, &events);
    events
}

/// `received` (container, pid) in arrival order holds every pid of
/// [`interleaved_store`] once, and each container's in increasing order.
pub fn assert_each_once_in_container_order(received: &[(String, u64)], count: usize) {
    let mut pids: Vec<u64> = received.iter().map(|(_, pid)| *pid).collect();
    pids.sort_unstable();
    assert_eq!(
        pids,
        (1..=count as u64).collect::<Vec<u64>>(),
        "each event once"
    );
    for c in 0..6 {
        let name = format!("c{c}");
        let of: Vec<u64> = received
            .iter()
            .filter(|(who, _)| *who == name)
            .map(|(_, pid)| *pid)
            .collect();
        assert!(of.is_sorted(), "{name}'s events out of order: {of:?}");
    }
}
