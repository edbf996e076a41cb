//! `eventgate replay` into a real containerd: several in flight keep each container's
//! order. The rest: tests/plain/replay.rs.

use crate::support;

use std::path::Path;
use std::process::{Output, Stdio};

use eventgate::event::{Event, EventId, Source};
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

// ---------------------------------------------------------------- forwarder target

// ---------------------------------------------------------------- exchange target

/// Ninety task exits of six containers (pid = position), their events interleaved,
/// with runs of one container too.
fn interleaved_store(db: &Path) -> Vec<Event> {
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
fn assert_each_once_in_container_order(received: &[(String, u64)], count: usize) {
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

/// The same into a real containerd, watched with the real `ctr events`: its exchange
/// takes the Forwards, and each container's events come out in their order.
#[test]
fn several_in_flight_into_a_real_containerd_keep_each_containers_order() {
    let containerd = support::containerd::Containerd::start();
    let address = containerd.address();
    let ctr = Watcher::spawn({
        let mut cmd = std::process::Command::new("ctr");
        cmd.args(["--address", &address, "events"]);
        cmd
    });
    prove_live(&address, &ctr);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("audit.db");
    let events = interleaved_store(&db);
    let out = run(&[
        "replay",
        "--db",
        path_str(&db),
        "--to-address",
        &address,
        "--in-flight",
        "4",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));

    let mut received = Vec::new();
    while received.len() < events.len() {
        let lines = ctr
            .stdout
            .until("the replayed events", |l| !l.contains("/probe"));
        for line in without_probes(lines) {
            // "<date> <time> +0000 UTC <namespace> <topic> <json>"
            let json: Value = serde_json::from_str(line.splitn(7, ' ').nth(6).unwrap()).unwrap();
            received.push((
                json["container_id"].as_str().unwrap().to_owned(),
                json["pid"].as_u64().unwrap(),
            ));
        }
    }
    assert_each_once_in_container_order(&received, events.len());
}

// ---------------------------------------------------------------- kafka
