//! Who published each event, through the real binary: the unix peer's uid, gid and
//! pid (the test process itself, and child processes) and the client certificate's
//! subject over mutual TLS, as the JSON lines, the audit store's columns and
//! `eventgate query --format json` show them; kept across a crash by the spool.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Stdio;

use eventgate::proto::containerd::services::events::v1::ForwardRequest;
use eventgate::proto::containerd::types::Envelope;
use rusqlite::{Connection, OpenFlags};
use serde_json::{Value, json};
use support::config::Config;
use support::*;

fn config(dir: &Path, file_forwarder_extra: &str) -> PathBuf {
    Config::new()
        .file("log", "events.jsonl", file_forwarder_extra)
        .sqlite("audit", "audit.db", "")
        .write_to(&dir.join("eventgate.toml"))
}

/// `eventgate publish` of a `/tasks/exit` for `container` as a child process, with
/// `extra` flags (TLS); returns the child's pid once it exited successfully.
fn publish_child(address: &str, container: &str, extra: &[&str]) -> u32 {
    let child = eventgate()
        .args([
            "publish",
            "--address",
            address,
            "-n",
            "default",
            "-t",
            "/tasks/exit",
        ])
        .args(["--event-type", "containerd.events.TaskExit"])
        .args(["--json", &format!(r#"{{"container_id":"{container}"}}"#)])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn eventgate publish");
    let pid = child.id();
    let out = child.wait_with_output().expect("wait for publish");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    pid
}

/// The JSON line of each container, once the file holds `containers` whole lines.
fn lines_by_container(path: &Path, containers: &[&str]) -> Vec<Value> {
    wait_for(
        &format!("lines for {containers:?} in {}", path.display()),
        DEADLINE,
        || {
            let text = std::fs::read_to_string(path).ok()?;
            let lines: Vec<Value> = text
                .lines()
                .take(text.matches('\n').count())
                .map(|l| serde_json::from_str(l).expect("a JSON line"))
                .collect();
            containers
                .iter()
                .map(|c| {
                    let mut found = lines.iter().filter(|l| l["event"]["container_id"] == *c);
                    let line = found.next().cloned();
                    assert!(found.next().is_none(), "{c} written twice");
                    line
                })
                .collect()
        },
    )
}

/// `(container, uid, gid, pid, subject)` for every row of the audit store.
type Row = (
    String,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<String>,
);

fn rows(db: &Path, count: usize) -> Vec<Row> {
    wait_for(
        &format!("{count} rows in {}", db.display()),
        DEADLINE,
        || {
            let conn = Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY).ok()?;
            let mut statement = conn
                .prepare(
                    "SELECT json_extract(event, '$.container_id'), publisher_uid, publisher_gid, \
                 publisher_pid, publisher_subject FROM events ORDER BY row_id",
                )
                .ok()?;
            let rows: Vec<Row> = statement
                .query_map([], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
                })
                .ok()?
                .collect::<Result<_, _>>()
                .ok()?;
            (rows.len() >= count).then_some(rows)
        },
    )
}

/// `eventgate query --format json` on `db`: the publisher of each container.
fn queried_publishers(db: &Path) -> Vec<(String, Value)> {
    let out = eventgate()
        .args(["query", "--db", path_str(db), "--format", "json"])
        .output()
        .expect("run query");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("JSON");
            (
                v["event"]["container_id"].as_str().unwrap_or("").to_owned(),
                v["publisher"].clone(),
            )
        })
        .collect()
}

fn process(pid: u32) -> Value {
    // SO_PEERCRED reports the effective ids at connect time.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    json!({ "uid": uid, "gid": gid, "pid": pid })
}

fn process_row(container: &str, pid: u32) -> Row {
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    (
        container.into(),
        Some(i64::from(uid)),
        Some(i64::from(gid)),
        Some(i64::from(pid)),
        None,
    )
}

/// Publish and Forward from this process and Publish from two child processes over
/// the unix socket: each event carries the uid, gid and pid of the process that
/// sent it, in the JSON line, the SQLite columns and `eventgate query`, and the hash
/// chain covering them verifies.
#[tokio::test(flavor = "multi_thread")]
async fn unix_peers_are_recorded_with_uid_gid_and_pid() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(dir.path(), "");
    let gw = Gateway::start_in(dir, &["--config", path_str(&config)]);
    let data = gw.dir.path().join("data");

    let mut client = gw.client().await;
    client
        .publish(exit_request("from-test"))
        .await
        .expect("publish");
    let forwarded = exit_request("forwarded").into_inner();
    let envelope = Envelope {
        timestamp: Some(prost_types::Timestamp {
            seconds: 1_714_557_600,
            nanos: 0,
        }),
        namespace: "default".into(),
        topic: forwarded.topic,
        event: forwarded.event,
    };
    client
        .forward(ForwardRequest {
            envelope: Some(envelope),
        })
        .await
        .expect("forward");
    let first = publish_child(&gw.address(), "from-child-1", &[]);
    let second = publish_child(&gw.address(), "from-child-2", &[]);
    assert_ne!(first, second);
    let me = std::process::id();

    let expected = [
        ("from-test", me),
        ("forwarded", me),
        ("from-child-1", first),
        ("from-child-2", second),
    ];
    let containers: Vec<&str> = expected.iter().map(|(c, _)| *c).collect();
    let lines = lines_by_container(&data.join("events.jsonl"), &containers);
    for (line, (container, pid)) in lines.iter().zip(expected) {
        assert_eq!(line["publisher"], process(pid), "{container}: {line}");
    }
    assert_eq!(lines[1]["source"], "forward");

    let db = data.join("audit.db");
    let stored = rows(&db, expected.len());
    let wanted: Vec<Row> = expected
        .iter()
        .map(|(c, pid)| process_row(c, *pid))
        .collect();
    assert_eq!(stored, wanted);
    let queried = queried_publishers(&db);
    let wanted: Vec<(String, Value)> = expected
        .iter()
        .map(|(c, pid)| (c.to_string(), process(*pid)))
        .collect();
    assert_eq!(queried, wanted);

    let verify = eventgate()
        .args(["audit", "verify", "--db", path_str(&db)])
        .output()
        .expect("run audit verify");
    assert!(
        verify.status.success(),
        "{}{}",
        String::from_utf8_lossy(&verify.stdout),
        String::from_utf8_lossy(&verify.stderr)
    );
}

/// Over mutual TLS the publisher is the client certificate's subject; a client of a
/// TLS listener without client certificates has none (null), like upstream events.
#[tokio::test(flavor = "multi_thread")]
async fn mutual_tls_clients_are_recorded_by_certificate_subject() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pki = certs::generate(dir.path(), "pub");
    let config = config(dir.path(), "");
    let mut mutual = Gateway::start(&[
        "--config",
        path_str(&config),
        "--listen",
        "127.0.0.1:0",
        "--tls-cert",
        path_str(&pki.server_cert),
        "--tls-key",
        path_str(&pki.server_key),
        "--tls-client-ca",
        path_str(&pki.ca),
    ]);
    let addr = mutual.tcp_addr().to_string();
    publish_child(
        &addr,
        "with-certificate",
        &[
            "--tls-ca",
            path_str(&pki.ca),
            "--tls-cert",
            path_str(&pki.client_cert),
            "--tls-key",
            path_str(&pki.client_key),
        ],
    );
    let data = mutual.dir.path().join("data");
    let subject = "CN=eventgate test client";
    let lines = lines_by_container(&data.join("events.jsonl"), &["with-certificate"]);
    assert_eq!(lines[0]["publisher"], json!({ "subject": subject }));
    let db = data.join("audit.db");
    assert_eq!(
        rows(&db, 1),
        [(
            "with-certificate".to_owned(),
            None,
            None,
            None,
            Some(subject.to_owned())
        )]
    );
    assert_eq!(
        queried_publishers(&db),
        [("with-certificate".to_owned(), json!({ "subject": subject }))]
    );

    let mut server_only = Gateway::start(&[
        "--config",
        path_str(&config),
        "--listen",
        "127.0.0.1:0",
        "--tls-cert",
        path_str(&pki.server_cert),
        "--tls-key",
        path_str(&pki.server_key),
    ]);
    let addr = server_only.tcp_addr().to_string();
    publish_child(&addr, "anonymous", &["--tls-ca", path_str(&pki.ca)]);
    let data = server_only.dir.path().join("data");
    let lines = lines_by_container(&data.join("events.jsonl"), &["anonymous"]);
    assert_eq!(lines[0]["publisher"], Value::Null);
    assert_eq!(
        rows(&data.join("audit.db"), 1),
        [("anonymous".to_owned(), None, None, None, None)]
    );
}

/// Accepted means in the spool: events acknowledged but not yet delivered when the
/// gateway is killed reach the forwarders after the restart with their publisher.
#[tokio::test(flavor = "multi_thread")]
async fn the_publisher_survives_a_crash_before_delivery() {
    let dir = tempfile::tempdir().expect("tempdir");
    // The file forwarder holds its batch for an hour: nothing is delivered before
    // the kill.
    let config = config(dir.path(), "batch = { events = 1000, linger = \"1h\" }");
    let mut gw = Gateway::start_in(dir, &["--config", path_str(&config)]);
    let data = gw.dir.path().join("data");
    let child = publish_child(&gw.address(), "before-crash", &[]);
    let mut client = gw.client().await;
    client
        .publish(exit_request("from-test"))
        .await
        .expect("publish");
    drop(client);
    let log = data.join("events.jsonl");
    assert_eq!(
        std::fs::read_to_string(&log).unwrap_or_default(),
        "",
        "not delivered yet"
    );
    gw.kill9();

    std::fs::write(
        &config,
        std::fs::read_to_string(&config)
            .expect("config")
            .replace("linger = \"1h\"", "linger = \"0s\""),
    )
    .expect("rewrite config");
    gw.crash_restart();
    let lines = lines_by_container(&log, &["before-crash", "from-test"]);
    assert_eq!(lines[0]["publisher"], process(child));
    assert_eq!(lines[1]["publisher"], process(std::process::id()));
}
