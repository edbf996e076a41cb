//! `eventgate query` and `eventgate stats` over hand-built audit stores, as a person
//! runs them: every output format, time bounds, follow mode, hostile input, bad files.

use crate::support;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::Duration;

use eventgate::event::{Event, EventId, Source};
use eventgate::internal::store::{EventRow, WriterOptions, insert_rows, open_writer};
use eventgate::proto::Registry;
use eventgate::proto::containerd::types::Envelope;
use serde_json::Value;
use support::*;

const T0: i64 = 1_714_557_600; // 2024-05-01T10:00:00Z

fn exit_event(seq: u64, secs: i64, namespace: &str, container: &str) -> Event {
    let json = serde_json::json!({"container_id": container, "id": container, "pid": 42, "exit_status": 1});
    let any = Registry::global()
        .encode_json("containerd.events.TaskExit", &json.to_string())
        .unwrap();
    Event::new(
        seq,
        EventId::generate(),
        Source::Upstream("node-a".into()),
        Envelope {
            timestamp: Some(prost_types::Timestamp {
                seconds: secs,
                nanos: 500_000_000,
            }),
            namespace: namespace.into(),
            topic: "/tasks/exit".into(),
            event: Some(any),
        },
    )
}

fn start_event(seq: u64, secs: i64) -> Event {
    let any = Registry::global()
        .encode_json(
            "containerd.events.TaskStart",
            r#"{"container_id":"web","pid":42}"#,
        )
        .unwrap();
    Event::new(
        seq,
        EventId::generate(),
        Source::Publish,
        Envelope {
            timestamp: Some(prost_types::Timestamp {
                seconds: secs,
                nanos: 0,
            }),
            namespace: "default".into(),
            topic: "/tasks/start".into(),
            event: Some(any),
        },
    )
}

fn insert(path: &Path, events: &[Event]) {
    let mut conn = open_writer(path, &WriterOptions::default()).unwrap();
    let rows: Vec<EventRow<'_>> = events.iter().map(EventRow::from_event).collect();
    insert_rows(&mut conn, &rows).unwrap();
}

/// Four events over two hours: exits in two namespaces and one start.
fn sample_store(dir: &Path) -> PathBuf {
    let path = dir.join("audit.db");
    insert(
        &path,
        &[
            exit_event(1, T0, "default", "web"),
            start_event(2, T0 + 60),
            exit_event(3, T0 + 1800, "k8s.io", "db"),
            exit_event(4, T0 + 4000, "default", "api"),
        ],
    );
    path
}

fn query(db: &Path, args: &[&str]) -> (bool, String, String) {
    let out = eventgate()
        .arg("query")
        .arg("--db")
        .arg(db)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn json_lines_carry_the_file_forwarders_shape_filtered_and_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let db = sample_store(dir.path());
    let (ok, out, err) = query(&db, &["--format", "json", r#"topic=="/tasks/exit""#]);
    assert!(ok, "{err}");
    let lines = json_lines(&out);
    let containers: Vec<&str> = lines
        .iter()
        .map(|l| l["event"]["container_id"].as_str().unwrap())
        .collect();
    assert_eq!(containers, ["web", "db", "api"]);
    assert_eq!(lines[0]["source"], "upstream:node-a");
    assert_eq!(lines[0]["seq"], 1);
    assert_eq!(lines[0]["timestamp"], "2024-05-01T10:00:00.500000000Z");
    assert_eq!(lines[0]["type_url"], "containerd.events.TaskExit");

    let (ok, out, err) = query(
        &db,
        &[
            "--format",
            "json",
            "--since",
            "2024-05-01T10:30:00Z",
            "--until",
            "2024-05-01T12:00:00+01:00", // 11:00Z
            "namespace==default",
            "event.container_id==db",
        ],
    );
    assert!(ok, "{err}");
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 1, "{out}");
    assert_eq!(lines[0]["namespace"], "k8s.io");

    let (ok, out, _) = query(&db, &["--format", "json", "--limit", "2"]);
    assert!(ok);
    assert_eq!(json_lines(&out).len(), 2);
}

#[test]
fn regex_filters_are_answered_too() {
    let dir = tempfile::tempdir().unwrap();
    let db = sample_store(dir.path());
    let (ok, out, err) = query(
        &db,
        &[
            "--format",
            "json",
            "--limit",
            "1",
            "event.container_id~=^(db|api)$",
        ],
    );
    assert!(ok, "{err}");
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["event"]["container_id"], "db");
}

#[test]
fn ctr_lines_match_ctr_events() {
    let dir = tempfile::tempdir().unwrap();
    let db = sample_store(dir.path());
    let (ok, out, err) = query(&db, &["--format", "ctr", "--limit", "1"]);
    assert!(ok, "{err}");
    assert_eq!(
        out,
        "2024-05-01 10:00:00.5 +0000 UTC default /tasks/exit \
         {\"container_id\":\"web\",\"id\":\"web\",\"pid\":42,\"exit_status\":1}\n"
    );
}

#[test]
fn the_table_is_aligned_in_utc_or_local_time() {
    let dir = tempfile::tempdir().unwrap();
    let db = sample_store(dir.path());
    let (ok, out, err) = query(&db, &["--utc"]);
    assert!(ok, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 5, "{out}");
    assert!(lines[0].starts_with("TIME"), "{out}");
    assert!(
        lines[1].starts_with("2024-05-01T10:00:00.500000000Z"),
        "{out}"
    );
    for column in ["NAMESPACE", "TOPIC", "SOURCE", "EVENT"] {
        let at = lines[0].find(column).unwrap();
        for line in &lines[1..] {
            assert_eq!(
                &line[at - 2..at],
                "  ",
                "column {column} not aligned:\n{out}"
            );
            assert_ne!(
                &line[at..at + 1],
                " ",
                "column {column} not aligned:\n{out}"
            );
        }
    }
    // Without --utc: local time, with its offset.
    let with_tz = eventgate()
        .args(["query", "--db"])
        .arg(&db)
        .env("TZ", "Asia/Kolkata")
        .output()
        .unwrap();
    let kolkata = String::from_utf8_lossy(&with_tz.stdout).into_owned();
    assert!(
        kolkata
            .lines()
            .nth(1)
            .unwrap()
            .starts_with("2024-05-01 15:30:00.500 +05:30"),
        "{kolkata}"
    );
}

#[test]
fn sql_in_filters_and_flags_is_only_ever_data() {
    let dir = tempfile::tempdir().unwrap();
    let db = sample_store(dir.path());
    for filter in [
        r#"namespace=="default' OR '1'='1""#,
        r#"topic=="x'); DROP TABLE events; --""#,
        r#"event.container_id=="web\" OR 1=1 --""#,
        r#"event.labels."a') OR 1=1 --"=="x""#,
    ] {
        let (ok, out, err) = query(&db, &["--format", "json", filter]);
        assert!(ok, "{filter}: {err}");
        assert_eq!(out, "", "{filter}");
    }
    let (ok, _, err) = query(&db, &["--since", "'; DROP TABLE events; --"]);
    assert!(!ok);
    assert!(err.contains("RFC 3339"), "{err}");
    let (ok, _, err) = query(&db, &["--limit", "1; DELETE FROM events"]);
    assert!(!ok);
    assert!(err.contains("--limit"), "{err}");
    let (ok, out, _) = query(&db, &["--format", "json"]);
    assert!(ok);
    assert_eq!(json_lines(&out).len(), 4, "the store is untouched");
}

#[test]
fn bad_files_and_bad_filters_get_precise_messages() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.db");
    let (ok, _, err) = query(&missing, &[]);
    assert!(!ok);
    assert!(
        err.contains("no audit store at") && err.contains("nope.db"),
        "{err}"
    );

    let garbage = dir.path().join("garbage.db");
    std::fs::write(&garbage, vec![0x5a; 8192]).unwrap();
    let (ok, _, err) = query(&garbage, &[]);
    assert!(!ok);
    assert!(err.contains("is not a SQLite database"), "{err}");

    let foreign = dir.path().join("foreign.db");
    rusqlite::Connection::open(&foreign)
        .unwrap()
        .execute_batch("CREATE TABLE events (x); INSERT INTO events VALUES (1);")
        .unwrap();
    let (ok, _, err) = query(&foreign, &[]);
    assert!(!ok);
    assert!(err.contains("another application"), "{err}");

    let db = sample_store(dir.path());
    let (ok, _, err) = query(&db, &["topic~=(unclosed"]);
    assert!(!ok);
    assert!(
        err.contains("filters: parse error") && err.contains("invalid regular expression"),
        "{err}"
    );
    let (ok, _, err) = query(&db, &["--follow", "--until", "1h"]);
    assert!(!ok);
    assert!(err.contains("--until") && err.contains("--follow"), "{err}");

    // Durations humantime takes but no date can hold: refused, never a panic.
    for flag in ["--since", "--until"] {
        let (ok, _, err) = query(&db, &[flag, "1000000y"]);
        assert!(!ok);
        assert!(
            err.contains(flag) && err.contains("more than 100 years") && !err.contains("panicked"),
            "{err}"
        );
    }
}

#[test]
fn follow_prints_rows_stored_while_it_runs() {
    let dir = tempfile::tempdir().unwrap();
    let db = sample_store(dir.path());
    let mut child = eventgate()
        .args(["query", "--follow", "--format", "json", "--db"])
        .arg(&db)
        .arg("namespace==k8s.io")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if tx.send(line.unwrap()).is_err() {
                return;
            }
        }
    });
    let next = || -> Value {
        let line = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("a line within 10 s");
        serde_json::from_str(&line).unwrap()
    };
    assert_eq!(next()["event"]["container_id"], "db");
    insert(
        &db,
        &[
            exit_event(5, T0 + 5000, "default", "skipped"),
            exit_event(6, T0 + 5001, "k8s.io", "late"),
        ],
    );
    assert_eq!(next()["event"]["container_id"], "late");
    insert(&db, &[exit_event(7, T0 + 5002, "k8s.io", "later")]);
    assert_eq!(next()["event"]["container_id"], "later");
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(rx.try_recv().is_err(), "nothing else matched");
}

#[test]
fn stats_count_per_group_per_bucket() {
    let dir = tempfile::tempdir().unwrap();
    let db = sample_store(dir.path());
    let stats = |args: &[&str]| {
        let out = eventgate()
            .args(["stats", "--utc", "--db"])
            .arg(&db)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let by_topic = stats(&[]);
    let rows: Vec<Vec<&str>> = by_topic
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows,
        [
            vec!["BUCKET", "TOPIC", "COUNT"],
            vec!["2024-05-01T10:00:00.000000000Z", "/tasks/exit", "2"],
            vec!["2024-05-01T10:00:00.000000000Z", "/tasks/start", "1"],
            vec!["2024-05-01T11:00:00.000000000Z", "/tasks/exit", "1"],
        ]
    );
    // The same counts whether SQL or the matcher answers the filter.
    let exact = stats(&[
        "--by",
        "namespace",
        "--bucket",
        "1d",
        r#"topic=="/tasks/exit""#,
    ]);
    let matched = stats(&[
        "--by",
        "namespace",
        "--bucket",
        "1d",
        "topic~=^/tasks/exit$",
    ]);
    assert_eq!(exact, matched);
    assert!(
        exact.contains("default    2") || exact.contains("default  2"),
        "{exact}"
    );
    let out = eventgate()
        .args(["stats", "--bucket", "1500ms", "--db"])
        .arg(&db)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("whole number of seconds"));
}
