//! The `file` forwarder as a user meets it: configured in TOML, run by the real
//! binary (or built through its kind, to drive batches exactly), and judged by
//! reading the files back: active, rotated and gzipped.

use crate::support;

use std::fs;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use eventgate::event::{Event, EventId, Source};
use eventgate::forward::{Batch, Context, Forwarder, Kind, Options};
use eventgate::internal::forward::file::{FileKind, Format, render_line};
use eventgate::internal::render;
use eventgate::proto::containerd::types::Envelope;
use serde_json::Value;
use support::config::Config;
use support::*;

fn write_config(dir: &Path, forwarder: &str) -> PathBuf {
    Config::new()
        .forwarder("archive", "file", forwarder)
        .write_to(&dir.join("eventgate.toml"))
}

/// Starts the gateway with only a file forwarder configured by `forwarder` (TOML keys).
fn gateway(forwarder: &str) -> Gateway {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), forwarder);
    Gateway::start_in(dir, &["--config", path_str(&config)])
}

fn data_dir(gw: &Gateway) -> PathBuf {
    gw.dir.path().join("data")
}

/// Waits until the file holds a whole line containing `needle`; returns that line.
fn wait_for_line(path: &Path, needle: &str) -> String {
    wait_for(
        &format!("a line with {needle} in {path:?}"),
        DEADLINE,
        || {
            let text = fs::read_to_string(path).ok()?;
            text.lines()
                .take(text.matches('\n').count())
                .find(|line| line.contains(needle))
                .map(str::to_owned)
        },
    )
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o777
}

fn publish_exit(gw: &Gateway) {
    let (ok, err) = publish_json(
        &gw.address(),
        "default",
        "/tasks/exit",
        "containerd.events.TaskExit",
        r#"{"container_id":"c1","exit_status":3}"#,
    );
    assert!(ok, "publish failed: {err}");
}

#[test]
fn jsonl_lines_carry_the_envelope_the_event_and_its_identity() {
    let gw = gateway("");
    publish_exit(&gw);
    let path = data_dir(&gw).join("events.jsonl");
    let line = wait_for_line(&path, "/tasks/exit");
    let object: Value = serde_json::from_str(&line).unwrap();
    let keys: Vec<&str> = object
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.as_str())
        .collect();
    assert_eq!(
        keys,
        [
            "event",
            "id",
            "namespace",
            "node",
            "origin",
            "publisher",
            "seq",
            "source",
            "timestamp",
            "topic",
            "type_url"
        ]
    );
    assert_eq!(object["source"], "publish");
    // Without `node` the host name (tests/plain/node.rs compares it with gethostname).
    assert!(
        object["node"].as_str().is_some_and(|n| !n.is_empty()),
        "{object}"
    );
    assert_eq!(object["origin"], "live", "as received");
    // `eventgate publish`, a process on the unix socket (tests/plain/publisher.rs has the rest).
    assert!(object["publisher"]["pid"].is_u64(), "{object}");
    assert_eq!(object["namespace"], "default");
    assert_eq!(object["topic"], "/tasks/exit");
    assert_eq!(object["type_url"], "containerd.events.TaskExit");
    assert_eq!(object["event"]["container_id"], "c1");
    assert_eq!(object["event"]["exit_status"], 3);
    assert_eq!(object["seq"], 1);
    let id = object["id"].as_str().unwrap();
    assert_eq!(
        uuid::Uuid::parse_str(id).unwrap().get_version_num(),
        7,
        "{id}"
    );
    // RFC 3339, UTC, nine fraction digits: 2024-05-01T10:00:00.123456789Z
    let ts = object["timestamp"].as_str().unwrap();
    assert_eq!(ts.len(), 30, "{ts}");
    assert!(
        ts.ends_with('Z') && &ts[10..11] == "T" && &ts[19..20] == ".",
        "{ts}"
    );
    assert_eq!(mode(&path), 0o640);
}

#[test]
fn ctr_format_matches_what_eventgate_events_prints() {
    let gw = gateway("format = \"ctr\"\npath = \"ctr.log\"");
    let mut cmd = eventgate();
    cmd.args(["events", "--address", &gw.address(), "--format", "ctr"]);
    let watcher = Watcher::spawn(cmd);
    prove_live(&gw.address(), &watcher);
    publish_exit(&gw);
    let printed = watcher
        .stdout
        .until("/tasks/exit", |l| l.contains("/tasks/exit"));
    let printed = printed.last().unwrap();
    assert!(
        printed.ends_with(r#" default /tasks/exit {"container_id":"c1","exit_status":3}"#),
        "{printed}"
    );
    let archived = wait_for_line(&data_dir(&gw).join("ctr.log"), "/tasks/exit");
    assert_eq!(&archived, printed);
}

#[test]
fn a_missing_directory_is_created() {
    let gw = gateway("path = \"archive/2024/events.jsonl\"");
    publish_exit(&gw);
    let path = data_dir(&gw).join("archive/2024/events.jsonl");
    wait_for_line(&path, "/tasks/exit");
    assert_eq!(mode(&data_dir(&gw).join("archive")), 0o750);
    assert_eq!(mode(&data_dir(&gw).join("archive/2024")), 0o750);
    assert_eq!(mode(&path), 0o640);
}

#[test]
fn an_unusable_path_stops_the_start_naming_path_and_cause() {
    // Tests run as root, which ignores permission bits: a regular file where a
    // directory should be fails for everyone.
    let dir = tempfile::tempdir().unwrap();
    let blocker = dir.path().join("file.txt");
    fs::write(&blocker, "not a directory").unwrap();
    let wanted = blocker.join("sub");
    let config = write_config(
        dir.path(),
        &format!("path = \"{}/events.jsonl\"", wanted.display()),
    );
    let check = eventgate()
        .args(["check-config", path_str(&config)])
        .output()
        .unwrap();
    assert!(check.status.success(), "{check:?}");
    assert!(!wanted.exists());

    let out = eventgate()
        .arg("serve")
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .args(["--config", path_str(&config)])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains(&wanted.display().to_string()), "{stderr}");
    assert!(stderr.contains("Not a directory"), "{stderr}");
    assert!(stderr.contains("archive"), "names the forwarder: {stderr}");
}

#[test]
fn invalid_options_stop_the_start_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    for (keys, named) in [
        ("max_size = \"lots\"", "`max_size`"),
        ("fsync = \"sometimes\"", "`fsync`"),
        ("rotate = true", "`rotate`"),
    ] {
        let config = write_config(dir.path(), keys);
        let out = eventgate()
            .arg("serve")
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .args(["--config", path_str(&config)])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{keys}");
        assert!(stderr.contains(named), "{keys}: {stderr}");
    }
}

/// `eventgate dlq list --format json` for the gateway's data directory.
fn dead_letters(data: &Path) -> Vec<Value> {
    let out = eventgate()
        .args([
            "dlq",
            "list",
            "--format",
            "json",
            "--data-dir",
            path_str(data),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A full disk (the forwarder pointed at /dev/full, where every write fails with
/// ENOSPC) buries an event once its retries run out. With room again (the path
/// fixed, the gateway restarted) and a newer event written, `eventgate dlq retry`
/// writes the buried one: exactly once, with its original id, seq, publisher and
/// node (the node it was captured on, though the gateway was renamed meanwhile), and
/// only then is its dead letter gone.
#[test]
fn a_dead_letter_retried_after_newer_events_is_written_once() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("eventgate.toml");
    let configure = |path: &str, node: &str| {
        fs::write(
            &config,
            format!(
                "node = \"{node}\"\n[dead_letter]\npoll_interval = \"50ms\"\n\
                 [[forwarder]]\nname = \"archive\"\nkind = \"file\"\npath = \"{path}\"\n\
                 batch = {{ events = 1, linger = \"0s\" }}\n\
                 retry = {{ initial = \"10ms\", max = \"10ms\", attempts = 2 }}\n"
            ),
        )
        .unwrap()
    };
    configure("/dev/full", "web-1");
    let mut gw = Gateway::start_in(dir, &["--config", path_str(&config)]);
    let data = data_dir(&gw);
    let (ok, err) = publish_json(
        &gw.address(),
        "default",
        "/tasks/exit",
        "containerd.events.TaskExit",
        r#"{"container_id":"buried"}"#,
    );
    assert!(ok, "{err}");
    let buried = wait_for("the event to be buried", DEADLINE, || {
        dead_letters(&data).pop()
    });
    assert_eq!(buried["dead_letter"]["reason"], "retries_exhausted");
    assert_eq!(buried["event"]["container_id"], "buried");
    assert!(buried["publisher"]["pid"].is_u64(), "{buried}");
    assert_eq!(buried["node"], "web-1", "{buried}");

    configure("events.jsonl", "web-2");
    gw.restart();
    let (ok, err) = publish_json(
        &gw.address(),
        "default",
        "/tasks/exit",
        "containerd.events.TaskExit",
        r#"{"container_id":"newer"}"#,
    );
    assert!(ok, "{err}");
    let path = data.join("events.jsonl");
    wait_for_line(&path, "\"newer\"");

    let out = eventgate()
        .args([
            "dlq",
            "retry",
            "--forwarder",
            "archive",
            "--data-dir",
            path_str(&data),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_for_line(&path, "\"buried\"");
    wait_for("the dead letter to be deleted", DEADLINE, || {
        dead_letters(&data).is_empty().then_some(())
    });
    let lines: Vec<Value> = fs::read_to_string(&path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let containers: Vec<&str> = lines
        .iter()
        .map(|l| l["event"]["container_id"].as_str().unwrap())
        .collect();
    assert_eq!(containers, ["newer", "buried"], "each once");
    let written = &lines[1];
    assert_eq!(written["id"], buried["id"]);
    assert_eq!(written["seq"], buried["seq"]);
    assert!(
        written["seq"].as_u64() < lines[0]["seq"].as_u64(),
        "an older seq"
    );
    assert_eq!(written["publisher"], buried["publisher"]);
    assert_eq!(lines[0]["node"], "web-2", "the gateway's new node");
    assert_eq!(written["node"], "web-1", "the node it was captured on");
}

// ---- Driving the forwarder directly, batch by batch ----

fn event(seq: u64) -> Arc<Event> {
    task_exit_event(seq, &format!("c{seq}"), (seq % 256) as u32)
}

async fn forwarder(dir: &Path, toml: &str) -> Arc<dyn Forwarder> {
    let options: Options = toml::from_str(toml).unwrap();
    let context = Context {
        name: "archive".into(),
        data_dir: dir.to_path_buf(),
    };
    match FileKind.build(&context, &options).await {
        Ok(forwarder) => forwarder,
        Err(error) => panic!("build: {error}"),
    }
}

async fn send_all(forwarder: &dyn Forwarder, events: &[Arc<Event>], per_batch: usize) {
    for chunk in events.chunks(per_batch) {
        let batch = Batch::new(chunk.to_vec(), 0);
        forwarder.send(&batch).await.unwrap();
    }
}

/// The files of the set, oldest first (rotated by name, then the active file), with
/// their content (gunzipped where compressed).
fn read_set(dir: &Path, active: &str) -> Vec<(String, Vec<u8>)> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        // The forwarder's checkpoint record lives in `checkpoints/` of the data dir.
        .filter(|e| e.file_type().unwrap().is_file())
        .map(|e| e.file_name().into_string().unwrap())
        .filter(|n| n != active)
        .collect();
    names.sort();
    names.push(active.to_owned());
    names
        .into_iter()
        .map(|name| {
            let raw = fs::read(dir.join(&name)).unwrap();
            let content = if name.ends_with(".gz") {
                let mut out = Vec::new();
                flate2::read::GzDecoder::new(raw.as_slice())
                    .read_to_end(&mut out)
                    .unwrap_or_else(|e| panic!("{name} is not valid gzip: {e}"));
                out
            } else {
                raw
            };
            (name, content)
        })
        .collect()
}

fn seqs(content: &[u8]) -> Vec<u64> {
    std::str::from_utf8(content)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["seq"]
                .as_u64()
                .unwrap()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn size_rotation_with_gzip_keeps_every_line_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let events: Vec<_> = (1..=500).map(event).collect();
    let line_len = render_line(&events[0], Format::Jsonl).len();
    let fw = forwarder(
        dir.path(),
        &format!("max_size = {}\nkeep = 0\ncompress = true", line_len * 40),
    )
    .await;
    send_all(&*fw, &events, 33).await;
    // Close waits for the pending compression.
    fw.close().await.unwrap();

    let set = read_set(dir.path(), "events.jsonl");
    assert!(set.len() > 10, "{} files", set.len());
    let (rotated, active) = set.split_at(set.len() - 1);
    for (name, content) in rotated {
        assert!(
            name.starts_with("events-") && name.ends_with(".jsonl.gz"),
            "{name}"
        );
        assert_eq!(mode(&dir.path().join(name)), 0o640, "{name}");
        assert!(content.len() <= line_len * 40, "{name}");
    }
    assert_eq!(mode(&dir.path().join(&active[0].0)), 0o640);
    // The set, read in name order, is exactly the lines rendered for the events.
    let written: Vec<u8> = set.iter().flat_map(|(_, c)| c.clone()).collect();
    let expected: Vec<u8> = events
        .iter()
        .flat_map(|e| render_line(e, Format::Jsonl))
        .collect();
    assert!(
        written == expected,
        "the archive differs from the rendered lines"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn keep_bounds_the_rotated_files_and_the_rest_is_a_gapless_tail() {
    let dir = tempfile::tempdir().unwrap();
    let events: Vec<_> = (1..=300).map(event).collect();
    let line_len = render_line(&events[0], Format::Jsonl).len();
    let fw = forwarder(
        dir.path(),
        &format!("max_size = {}\nkeep = 3", line_len * 10),
    )
    .await;
    send_all(&*fw, &events, 7).await;
    fw.close().await.unwrap();

    let set = read_set(dir.path(), "events.jsonl");
    assert_eq!(set.len(), 3 + 1, "3 rotated files and the active one");
    let seen: Vec<u64> = set.iter().flat_map(|(_, c)| seqs(c)).collect();
    let first = seen[0];
    assert_eq!(seen, (first..=300).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread")]
async fn an_idle_file_is_rotated_once_its_first_line_is_max_age_old() {
    let dir = tempfile::tempdir().unwrap();
    let fw = forwarder(
        dir.path(),
        "max_age = \"200ms\"\nformat = \"ctr\"\npath = \"ctr.log\"",
    )
    .await;
    let events: Vec<_> = (1..=3).map(event).collect();
    send_all(&*fw, &events, 3).await;
    let rotated = wait_for("a rotation by age", DEADLINE, || {
        fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .find(|n| n.starts_with("ctr-") && n.ends_with(".log"))
    });
    let expected: String = events
        .iter()
        .map(|e| format!("{}\n", render::ctr_line(&e.envelope).unwrap()))
        .collect();
    assert_eq!(
        fs::read_to_string(dir.path().join(rotated)).unwrap(),
        expected
    );
    // The new active file appears just after the rename.
    let active = wait_for("the new active file", DEADLINE, || {
        fs::read_to_string(dir.path().join("ctr.log")).ok()
    });
    assert_eq!(active, "");
    fw.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn ctr_format_keeps_undecodable_payloads() {
    let dir = tempfile::tempdir().unwrap();
    let fw = forwarder(dir.path(), "format = \"ctr\"\npath = \"ctr.log\"").await;
    let envelope = Envelope {
        timestamp: Some(prost_types::Timestamp {
            seconds: 1_714_557_600,
            nanos: 0,
        }),
        namespace: "default".into(),
        topic: "/custom".into(),
        event: Some(prost_types::Any {
            type_url: "example.Custom".into(),
            value: vec![1, 2, 3],
        }),
    };
    let event = Arc::new(Event::new(
        1,
        EventId::generate(),
        Source::Publish,
        envelope,
    ));
    send_all(&*fw, &[event], 1).await;
    fw.close().await.unwrap();
    assert_eq!(
        fs::read_to_string(dir.path().join("ctr.log")).unwrap(),
        "2024-05-01 10:00:00 +0000 UTC default /custom {\"raw\":\"AQID\",\"type_url\":\"example.Custom\"}\n"
    );
}
