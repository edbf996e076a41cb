//! `eventgate replay` as a person runs it: stores built with the store's own writer or
//! filled by a real gateway, replayed into a file forwarder and a second gateway (and
//! the very gateway that writes the store); interrupted with SIGINT and resumed;
//! refused when complete; bad targets named. Into a real containerd and a tansu broker:
//! tests/containerd/replay.rs and tests/kafka/replay.rs.

use crate::support;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use eventgate::event::{Event, EventId, Source};
use eventgate::internal::query::StoredEvent;
use eventgate::proto::containerd::services::events::v1::SubscribeRequest;
use serde_json::Value;
use support::config::Config;
use support::stores::*;
use support::*;

fn container(event: &Event) -> String {
    let json: Value = serde_json::from_str(event.payload_json().unwrap()).unwrap();
    json["container_id"].as_str().unwrap().to_owned()
}

/// Waits until `db` holds at least `count` rows and returns them all.
fn wait_rows(db: &Path, count: usize) -> Vec<StoredEvent> {
    wait_for(
        &format!("{count} rows in {}", db.display()),
        DEADLINE,
        || {
            let rows = stored(db);
            (rows.len() >= count).then_some(rows)
        },
    )
}

fn state_files(store_dir: &Path) -> Vec<PathBuf> {
    match std::fs::read_dir(store_dir.join("replay")) {
        Ok(entries) => entries
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect(),
        Err(_) => Vec::new(),
    }
}

fn state(store_dir: &Path) -> Option<Value> {
    let files = state_files(store_dir);
    let file = files.first()?;
    serde_json::from_slice(&std::fs::read(file).ok()?).ok()
}

// ---------------------------------------------------------------- forwarder target

fn file_config(dir: &Path) -> PathBuf {
    Config::new()
        .toml(&format!("data_dir = {:?}\n", path_str(&dir.join("out"))))
        .file(
            "archive",
            "replayed.jsonl",
            "filters = ['topic==\"/tasks/exit\"']\n",
        )
        .file("other", "other.jsonl", "")
        .write_to(&dir.join("replay.toml"))
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Through a configured file forwarder: exactly the selection, minus what the
/// forwarder's own filters leave out, with every original field (id, seq, times,
/// namespace, source, node); then "already completed" until --restart.
#[test]
fn a_forwarder_gets_the_selection_with_original_ids_and_refuses_a_second_run() {
    let dir = tempfile::tempdir().unwrap();
    let db = sample_store(&dir.path().join("src"), 30);
    let config = file_config(dir.path());
    let selection = [
        "--since",
        "2024-05-01T11:00:00Z",
        "--until",
        "2024-05-01T14:00:00Z",
        "namespace==default",
    ];
    let args = [
        &["replay", "--db", path_str(&db), "--to-forwarder", "archive"][..],
        &["--config", path_str(&config), "--batch", "2"],
        &selection,
    ]
    .concat();
    let out = run(&args);
    assert!(out.status.success(), "{}", text(&out.stderr));

    let selected = query_json(&db, &selection);
    let (exits, starts): (Vec<Value>, Vec<Value>) = selected
        .into_iter()
        .partition(|e| e["topic"] == "/tasks/exit");
    assert!(
        exits.len() >= 5 && !starts.is_empty(),
        "a selection worth testing"
    );
    assert!(exits.iter().all(|e| e["node"] == NODE), "{exits:?}");
    let replayed = dir.path().join("out/replayed.jsonl");
    assert_eq!(lines(&replayed), exits, "the file forwarder's lines");
    assert!(!dir.path().join("out/other.jsonl").exists());
    let summary = text(&out.stdout);
    assert!(
        summary.contains(&format!("replayed {} events", exits.len()))
            && summary.contains(&format!("{} skipped", starts.len())),
        "{summary}"
    );

    let again = run(&args);
    assert!(!again.status.success());
    let error = text(&again.stderr);
    assert!(
        error.contains("already completed at 20") && error.contains("pass --restart"),
        "{error}"
    );
    assert_eq!(lines(&replayed).len(), exits.len(), "nothing sent twice");

    let restart = run(&[&args[..], &["--restart"]].concat());
    assert!(restart.status.success(), "{}", text(&restart.stderr));
    assert_eq!(lines(&replayed), [exits.clone(), exits].concat());
}

/// A store's row order is not always seq order: a dead letter redelivered into the
/// `sqlite` forwarder is stored after newer events. Replayed into a file forwarder
/// one event per batch, every row is written, once, in store order, with its
/// original seq and publisher (none was skipped for having an older seq).
#[test]
fn rows_with_older_seqs_after_newer_ones_are_each_written_once() {
    use eventgate::publisher::Publisher;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("src")).unwrap();
    let db = dir.path().join("src/audit.db");
    // All /tasks/exit (i % 3 != 0): the forwarder's filter keeps every one.
    let mut events: Vec<Event> = [7, 8, 10, 4]
        .into_iter()
        .map(|i| sample_event(i, "default"))
        .collect();
    let redelivered = events
        .pop()
        .unwrap()
        .with_publisher(Some(Publisher::Process {
            uid: 1000,
            gid: 100,
            pid: Some(4242),
        }));
    events.push(redelivered);
    write_store(&db, &events);
    let config = file_config(dir.path());
    let out = run(&[
        "replay",
        "--db",
        path_str(&db),
        "--to-forwarder",
        "archive",
        "--config",
        path_str(&config),
        "--batch",
        "1",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let written = lines(&dir.path().join("out/replayed.jsonl"));
    assert_eq!(
        written,
        query_json(&db, &[]),
        "every row once, in store order"
    );
    let seqs: Vec<u64> = written.iter().map(|l| l["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, [7, 8, 10, 4]);
    assert_eq!(
        written[3]["publisher"],
        serde_json::json!({ "uid": 1000, "gid": 100, "pid": 4242 })
    );
    assert_eq!(written[0]["publisher"], Value::Null, "an upstream's event");
}

#[test]
fn an_unknown_forwarder_is_refused_naming_the_configured_ones() {
    let dir = tempfile::tempdir().unwrap();
    let db = sample_store(&dir.path().join("src"), 3);
    let config = file_config(dir.path());
    let out = run(&[
        "replay",
        "--db",
        path_str(&db),
        "--to-forwarder",
        "kafka",
        "--config",
        path_str(&config),
    ]);
    assert!(!out.status.success());
    let error = text(&out.stderr);
    assert!(
        error.contains(r#"has no forwarder named "kafka" (its forwarders: "archive", "other")"#),
        "{error}"
    );
    assert!(state_files(&dir.path().join("src")).is_empty());
}

#[test]
fn bad_stores_targets_and_flag_combinations_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let db = sample_store(&dir.path().join("src"), 3);
    let config = file_config(dir.path());
    let db = path_str(&db);
    let missing = dir.path().join("nothing/audit.db");
    let socket = dir.path().join("absent.sock");
    let unreadable = dir.path().join("missing.toml");
    let foreign = dir.path().join("foreign.db");
    rusqlite::Connection::open(&foreign)
        .unwrap()
        .execute_batch("CREATE TABLE notes(x)")
        .unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec![
                "--db",
                path_str(&missing),
                "--to-address",
                path_str(&socket),
            ],
            "no audit store at",
        ),
        (
            vec![
                "--db",
                path_str(&foreign),
                "--to-address",
                path_str(&socket),
            ],
            "another application",
        ),
        (
            vec!["--db", db, "--to-address", path_str(&socket)],
            "no socket at",
        ),
        (
            vec![
                "--db",
                db,
                "--to-forwarder",
                "x",
                "--config",
                path_str(&unreadable),
            ],
            "cannot read config file",
        ),
        (
            vec!["--db", db],
            "--to-forwarder <NAME>|--to-address <SOCK>",
        ),
        (
            vec!["--db", db, "--to-forwarder", "archive"],
            "--config <FILE>",
        ),
        (
            vec![
                "--db",
                db,
                "--to-address",
                "x.sock",
                "--config",
                path_str(&config),
            ],
            "cannot be used with",
        ),
        (
            vec!["--db", db, "--data-dir", "d", "--to-address", "x.sock"],
            "cannot be used with",
        ),
        (
            vec!["--db", db, "--to-address", "x.sock", "--rate", "0"],
            "--rate",
        ),
        (
            vec!["--db", db, "--to-address", "x.sock", "topic~=("],
            "invalid",
        ),
    ];
    for (args, expected) in cases {
        let out = run(&[&["replay"][..], &args].concat());
        let error = text(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(error.contains(expected), "{args:?}: {error}");
    }
}

// ---------------------------------------------------------------- exchange target

/// Into a second gateway with Forward: its subscribers and its audit store get the
/// selected envelopes in order, with their original timestamps, namespaces, topics
/// and payloads (and ids of their own: an exchange gives each event its place; and
/// its own node: Forward has no field for the node the events were captured on).
#[tokio::test(flavor = "multi_thread")]
async fn a_second_gateway_gets_the_envelopes_as_they_were() {
    let dir = tempfile::tempdir().unwrap();
    let db = sample_store(&dir.path().join("src"), 40);
    let originals: HashMap<String, Event> = stored(&db)
        .into_iter()
        .map(|s| (container(&s.event), s.event))
        .collect();
    let selection = ["--since", "2024-05-01T12:00:00Z", r#"topic=="/tasks/exit""#];
    let expected: Vec<String> = query_json(&db, &selection)
        .iter()
        .map(|e| e["event"]["container_id"].as_str().unwrap().to_owned())
        .collect();
    assert!(expected.len() > 10);

    let second = Gateway::start(&["--node", "web-2"]);
    let mut client = second.client().await;
    let mut stream = client
        .subscribe(SubscribeRequest { filters: vec![] })
        .await
        .unwrap()
        .into_inner();
    let socket = second.address();
    let db_arg = db.clone();
    let out = tokio::task::spawn_blocking(move || {
        let args = [
            &[
                "replay",
                "--db",
                path_str(&db_arg),
                "--to-address",
                &socket,
                "--batch",
                "7",
            ][..],
            &selection,
        ]
        .concat();
        run(&args)
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));

    let mut received = Vec::new();
    for _ in &expected {
        let envelope = tokio::time::timeout(DEADLINE, stream.message())
            .await
            .expect("an event within the deadline")
            .unwrap()
            .unwrap();
        let event = Event::new(0, EventId::generate(), Source::Forward, envelope);
        let original = &originals[&container(&event)];
        assert_eq!(event.envelope, original.envelope, "the envelope as stored");
        received.push(container(&event));
    }
    assert_eq!(received, expected, "in store order");

    let second_store = second.dir.path().join("data/audit.db");
    let rows = wait_rows(&second_store, expected.len());
    assert_eq!(rows.len(), expected.len());
    for row in &rows {
        let original = &originals[&container(&row.event)];
        assert_eq!(row.event.envelope, original.envelope);
        assert_eq!(row.source.as_deref(), Some("forward"));
        assert_ne!(
            row.event.identity.id, original.identity.id,
            "the exchange gives its own ids"
        );
        assert_eq!(original.node(), Some(NODE));
        assert_eq!(
            row.event.node(),
            Some("web-2"),
            "the receiving gateway's node"
        );
    }
}

/// SIGINT while a slow (--rate) replay runs: it stops after the batch in flight,
/// says how far it got and how to go on, and the same command then resumes: every
/// selected event reaches the second gateway exactly once, in order.
#[test]
fn an_interrupted_replay_resumes_and_sends_each_event_once() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let db = sample_store(&src, 60);
    let second = Gateway::start(&[]);
    let args = [
        "replay",
        "--data-dir",
        path_str(&src),
        "--to-address",
        &second.address(),
        "namespace==default",
    ];
    let total = query_json(&db, &["namespace==default"]).len() as u64;

    let mut slow = Watcher::spawn({
        let mut cmd = eventgate();
        cmd.args(args).args(["--rate", "20"]);
        cmd
    });
    let sent_before = wait_for("the state file to show progress", DEADLINE, || {
        let sent = state(&src)?["sent"].as_u64()?;
        (sent >= 4).then_some(sent)
    });
    signal(&slow.child, nix::sys::signal::Signal::SIGINT);
    let status = wait_exit(&mut slow.child, DEADLINE);
    assert!(!status.success());
    let error = slow
        .stderr
        .until("the interruption", |l| l.contains("interrupted after"));
    let last = error.last().unwrap();
    let saved = state(&src).unwrap();
    let done = saved["sent"].as_u64().unwrap();
    assert!(done >= sent_before && done < total, "{saved}");
    assert!(saved["completed_at"].is_null());
    assert!(
        last.contains(&format!("interrupted after {done} of {total} events"))
            && last.contains("run the same command again to resume"),
        "{last}"
    );

    let out = run(&args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains(&format!("resuming after row {}", saved["after"])),
        "{}",
        text(&out.stderr)
    );
    assert!(
        text(&out.stdout).contains(&format!("replayed {} events", total - done)),
        "{}",
        text(&out.stdout)
    );

    let expected: Vec<String> = stored(&db)
        .iter()
        .filter(|s| s.event.namespace() == "default")
        .map(|s| container(&s.event))
        .collect();
    let rows = wait_rows(&second.dir.path().join("data/audit.db"), expected.len());
    let received: Vec<String> = rows.iter().map(|r| container(&r.event)).collect();
    assert_eq!(received, expected, "each event once, in order");
}

/// A replay into the very gateway that writes the store: the store grows with every
/// event sent, and the replay still ends at the last row present when it started.
#[tokio::test(flavor = "multi_thread")]
async fn the_upper_bound_is_fixed_when_the_replay_starts() {
    let gateway = Gateway::start(&[]);
    let mut client = gateway.client().await;
    let count = 25;
    for i in 0..count {
        client
            .publish(exit_request(&format!("self-{i}")))
            .await
            .unwrap();
    }
    let data = gateway.dir.path().join("data");
    let db = data.join("audit.db");
    let originals = wait_rows(&db, count);
    let socket = gateway.address();
    let data_arg = data.clone();
    let out = tokio::task::spawn_blocking(move || {
        run(&[
            "replay",
            "--data-dir",
            path_str(&data_arg),
            "--to-address",
            &socket,
            "--batch",
            "3",
        ])
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains(&format!("replayed {count} events")),
        "{}",
        text(&out.stdout)
    );
    let saved = state(&data).unwrap();
    assert_eq!(saved["up_to"], count as u64);
    assert_eq!(saved["total"], count as u64);

    let rows = wait_rows(&db, 2 * count);
    let copies: Vec<&StoredEvent> = rows[count..].iter().collect();
    for (original, copy) in originals.iter().zip(&copies) {
        assert_eq!(copy.event.envelope, original.event.envelope);
        assert_eq!(copy.source.as_deref(), Some("forward"));
    }
    // The gateway wrote every copy once the last one is there; none beyond.
    assert_eq!(stored(&db).len(), 2 * count);
}

/// `--in-flight 8`: several Forwards at once, each container's events still in their
/// order at the other gateway, each event once. A forwarder target refuses it.
#[test]
fn several_in_flight_keep_each_containers_order() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    let db = src.join("audit.db");
    let events = interleaved_store(&db);
    let second = Gateway::start(&[]);
    let out = run(&[
        "replay",
        "--db",
        path_str(&db),
        "--to-address",
        &second.address(),
        "--in-flight",
        "8",
        "--batch",
        "30",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("replayed 90 events"),
        "{}",
        text(&out.stdout)
    );

    let rows = wait_rows(&second.dir.path().join("data/audit.db"), events.len());
    let received: Vec<(String, u64)> = rows
        .iter()
        .map(|r| {
            let json: Value = serde_json::from_str(r.event.payload_json().unwrap()).unwrap();
            (container(&r.event), json["pid"].as_u64().unwrap())
        })
        .collect();
    assert_each_once_in_container_order(&received, events.len());

    let refused = run(&[
        "replay",
        "--db",
        path_str(&db),
        "--to-forwarder",
        "x",
        "--config",
        "x.toml",
        "--in-flight",
        "2",
    ]);
    assert!(!refused.status.success());
    assert!(
        text(&refused.stderr).contains("cannot be used with '--in-flight <N>'"),
        "{}",
        text(&refused.stderr)
    );
}

/// An event the other exchange refuses stops the replay naming it (seq, id and the
/// status); what was taken before it is recorded, so a rerun does not repeat it.
#[test]
fn a_refused_event_stops_the_replay_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    let db = src.join("audit.db");
    let events: Vec<Event> = (1..=6)
        .map(|i| sample_event(i, if i == 4 { "bad namespace!" } else { "default" }))
        .collect();
    write_store(&db, &events);
    let second = Gateway::start(&[]);
    let out = run(&[
        "replay",
        "--db",
        path_str(&db),
        "--to-address",
        &second.address(),
    ]);
    assert!(!out.status.success());
    let error = text(&out.stderr);
    let bad = &events[3];
    assert!(
        error.contains("InvalidArgument")
            && error.contains(&format!("seq 4 (id {}", bad.identity.id))
            && error.contains("stopped after 3 of 6 events"),
        "{error}"
    );
    let saved = state(&src).unwrap();
    assert_eq!(
        (saved["sent"].as_u64(), saved["after"].as_u64()),
        (Some(3), Some(3))
    );
    let rows = wait_rows(&second.dir.path().join("data/audit.db"), 3);
    let received: Vec<String> = rows.iter().map(|r| container(&r.event)).collect();
    assert_eq!(received, ["c1", "c2", "c3"]);
}

// ---------------------------------------------------------------- kafka

/// `bench replay` end to end on a small store: it starts its gateways, replays and
/// calls, stops them, and prints one table row per window size.
#[cfg(feature = "bench")]
#[test]
fn the_replay_benchmark_prints_its_table() {
    let out = run(&[
        "bench",
        "replay",
        "--events",
        "60",
        "--rounds",
        "1",
        "--in-flight",
        "1,4",
        "--spool-fsync",
        "none",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    assert!(
        table.contains("60 events replayed into eventgate"),
        "{table}"
    );
    for row in ["| 1 | ", "| 4 | "] {
        assert!(
            table
                .lines()
                .any(|l| l.starts_with(row) && l.ends_with("x |")),
            "{table}"
        );
    }
}
