//! Node identity through the real binary: `serve --node` (or the host name by
//! default) is on every event the gateway captures, in the file forwarder's JSON
//! lines, the audit store (`query`, `stats`) and the resumable Subscribe; `query`,
//! `stats` and Subscribe filters select by it; `check-config` refuses a node name
//! that cannot be one.

use crate::support;

use std::path::Path;

use serde_json::Value;
use support::config::Config;
use support::*;

/// A gateway's config: a JSON lines file and an audit store, both in its data dir.
fn write_config(dir: &Path) -> String {
    Config::new()
        .file("log", "events.jsonl", "")
        .sqlite("audit", "audit.db", "")
        .write(dir)
}

fn publish(gw: &Gateway, topic: &str, type_name: &str, container: &str) {
    let (ok, err) = publish_json(
        &gw.address(),
        "default",
        topic,
        type_name,
        &format!(r#"{{"container_id":"{container}"}}"#),
    );
    assert!(ok, "{err}");
}

/// Two exits and an OOM.
fn publish_three(gw: &Gateway) {
    publish(gw, "/tasks/exit", "containerd.events.TaskExit", "c1");
    publish(gw, "/tasks/oom", "containerd.events.TaskOOM", "c1");
    publish(gw, "/tasks/exit", "containerd.events.TaskExit", "c2");
}

/// The whole lines of a JSON lines file once it has `count` of them.
fn wait_lines(path: &Path, count: usize) -> Vec<Value> {
    wait_for("the JSON lines", DEADLINE, || {
        let text = std::fs::read_to_string(path).ok()?;
        let lines: Vec<&str> = text.lines().collect();
        // Only whole lines: the gateway may be writing the last one.
        (lines.len() >= count && text.ends_with('\n')).then(|| {
            lines
                .iter()
                .map(|l| serde_json::from_str(l).expect("a JSON line"))
                .collect()
        })
    })
}

/// Runs an eventgate command that must succeed; its stdout.
fn stdout(args: &[&str]) -> String {
    let out = eventgate().args(args).output().expect("run eventgate");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// `eventgate query --format json` over the gateway's audit store, with `args`.
fn query(data: &Path, args: &[&str]) -> Vec<Value> {
    let base = ["query", "--data-dir", path_str(data), "--format", "json"];
    stdout(&[&base[..], args].concat())
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

fn containers(events: &[Value]) -> Vec<&str> {
    events
        .iter()
        .map(|e| e["event"]["container_id"].as_str().expect("a container id"))
        .collect()
}

/// `stats --utc` rows as (group, count), summed over buckets (the events may fall
/// on both sides of an hour).
fn stats(data: &Path, args: &[&str]) -> Vec<(String, u64)> {
    let base = ["stats", "--data-dir", path_str(data), "--utc"];
    let text = stdout(&[&base[..], args].concat());
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().expect("a header").split_whitespace().collect();
    assert_eq!(header.len(), 3, "{text}");
    let mut sums: Vec<(String, u64)> = Vec::new();
    for line in lines {
        let [_, group, count] = line.split_whitespace().collect::<Vec<_>>()[..] else {
            panic!("a row of three columns: {line:?}");
        };
        let count: u64 = count.parse().expect("a count");
        match sums.iter_mut().find(|(g, _)| g == group) {
            Some((_, sum)) => *sum += count,
            None => sums.push((group.to_owned(), count)),
        }
    }
    sums.sort();
    sums
}

/// `serve --node web-1`: every JSON line and every stored row says web-1, and that
/// name selects them in `query` (as a filter or `--node`, AND'd with other filters)
/// and groups them in `stats --by node`; another name selects nothing.
#[test]
fn a_named_node_is_on_every_event_and_selects_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(dir.path());
    let mut gw = Gateway::start_in(dir, &["--config", &config, "--node", "web-1"]);
    let data = gw.dir.path().join("data");
    publish_three(&gw);

    let lines = wait_lines(&data.join("events.jsonl"), 3);
    assert_eq!(containers(&lines), ["c1", "c1", "c2"]);
    for line in &lines {
        assert_eq!(line["node"], "web-1", "{line}");
    }
    let raw = std::fs::read_to_string(data.join("events.jsonl")).expect("the file");
    assert_eq!(raw.matches(r#""node":"web-1""#).count(), 3, "{raw}");

    let stored = wait_for("three stored rows", DEADLINE, || {
        let rows = query(&data, &[]);
        (rows.len() == 3).then_some(rows)
    });
    assert!(stored.iter().all(|r| r["node"] == "web-1"), "{stored:?}");
    let ids =
        |events: &[Value]| -> Vec<String> { events.iter().map(|e| e["id"].to_string()).collect() };
    assert_eq!(ids(&stored), ids(&lines), "the same events");

    assert_eq!(query(&data, &["node==web-1"]).len(), 3);
    assert_eq!(query(&data, &["--node", "web-1"]).len(), 3);
    assert_eq!(query(&data, &["--node", "other"]), Vec::<Value>::new());
    assert_eq!(query(&data, &["node==other"]), Vec::<Value>::new());
    let exits = query(&data, &["--node", "web-1", r#"topic=="/tasks/exit""#]);
    assert_eq!(containers(&exits), ["c1", "c2"], "AND'd with the filter");
    let either = query(
        &data,
        &[
            "--node",
            "web-1",
            r#"topic=="/tasks/oom""#,
            "event.container_id==c2",
        ],
    );
    assert_eq!(
        containers(&either),
        ["c1", "c2"],
        "with each of several filters"
    );
    let none = query(&data, &["--node", "other", r#"topic=="/tasks/exit""#]);
    assert_eq!(none, Vec::<Value>::new());

    assert_eq!(stats(&data, &["--by", "node"]), [("web-1".to_owned(), 3)]);
    assert_eq!(
        stats(&data, &["--by", "node", "--node", "other"]),
        Vec::<(String, u64)>::new()
    );
    assert_eq!(
        stats(&data, &["--node", "web-1", r#"topic~="/tasks/.*""#]),
        [("/tasks/exit".to_owned(), 2), ("/tasks/oom".to_owned(), 1)]
    );

    // The resumable Subscribe hands the node on (`events --after 0` prints it) and
    // filters on it.
    let until = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true);
    let address = gw.address();
    let resume = |filter: &str| -> Vec<Value> {
        let args = ["events", "--address", &address, "--format", "json"];
        let window = ["--after", "0", "--until", &until, filter];
        stdout(&[&args[..], &window].concat())
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect()
    };
    let resumed = resume("node==web-1");
    assert_eq!(containers(&resumed), ["c1", "c1", "c2"]);
    assert!(resumed.iter().all(|e| e["node"] == "web-1"), "{resumed:?}");
    assert_eq!(resume("node==other"), Vec::<Value>::new());

    // containerd's Subscribe filters on it too: the probes, captured on web-1, reach
    // a subscriber asking for node==web-1.
    let mut live = eventgate();
    live.args(["events", "--address", &address, "node==web-1"]);
    let watcher = Watcher::spawn(live);
    prove_live(&address, &watcher);

    let status = gw.terminate();
    assert!(status.success(), "{}", gw.stderr_text());
}

/// This machine's host name, as the kernel gives it.
fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its whole length.
    let status = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    assert_eq!(status, 0, "gethostname");
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8(buf[..end].to_vec()).expect("a UTF-8 host name")
}

/// Without `node` or `--node`, events are recorded as captured on this machine's
/// host name.
#[test]
fn the_default_node_is_the_host_name() {
    let host = host_name();
    assert!(!host.is_empty());
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(dir.path());
    let mut gw = Gateway::start_in(dir, &["--config", &config]);
    let data = gw.dir.path().join("data");
    publish(&gw, "/tasks/exit", "containerd.events.TaskExit", "c1");
    let lines = wait_lines(&data.join("events.jsonl"), 1);
    assert_eq!(lines[0]["node"], host.as_str());
    let stored = wait_for("the stored row", DEADLINE, || {
        query(&data, &["--node", &host]).pop()
    });
    assert_eq!(stored["id"], lines[0]["id"]);
    let status = gw.terminate();
    assert!(status.success(), "{}", gw.stderr_text());
}

/// An empty node and one with whitespace are refused by `check-config` and by
/// `serve` (from the file or `--node`), naming the key, before anything starts.
#[test]
fn check_config_and_serve_refuse_a_node_that_cannot_name_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("eventgate.toml");
    let data = dir.path().join("data");
    for (line, says) in [
        (r#"node = """#, "must not be empty"),
        (r#"node = "web 1""#, "contains ' '"),
        (r#"node = "web\t1""#, "contains '\\t'"),
    ] {
        std::fs::write(&path, format!("{line}\n")).expect("write");
        let serve = ["serve", "--data-dir", path_str(&data), "--config"];
        for command in [&["check-config"][..], &serve[..]] {
            let out = eventgate()
                .args(command)
                .arg(&path)
                .output()
                .expect("run eventgate");
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{command:?} accepted {line}");
            assert!(
                err.contains("`node`") && err.contains(says),
                "{command:?} {line}: {err}"
            );
        }
    }
    let out = eventgate()
        .args(["serve", "--data-dir", path_str(&data), "--node", "web 1"])
        .output()
        .expect("run eventgate");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "serve --node accepted a space");
    assert!(
        err.contains("`node`") && err.contains("contains ' '"),
        "{err}"
    );
    assert!(!data.join("eventgate.sock").exists(), "nothing started");
}
