//! eventgate next to a real containerd: containers run with `ctr run`, their lifecycle
//! events captured through the upstream subscription into the SQLite store, the log
//! file and Kafka; containerd crashing, restarting, or starting late; upstream filters.

use crate::support;

use std::path::{Path, PathBuf};

use eventgate::proto::Registry;
use support::audit::{Row, markers, stored, wait_stored};
use support::config::Config;
use support::containerd::Containerd;
use support::*;

// For the one test that also reads Kafka (the `kafka-tests` feature).
#[cfg(feature = "kafka-tests")]
use eventgate::proto::containerd::types::Envelope;
#[cfg(feature = "kafka-tests")]
use prost::Message as _;
#[cfg(feature = "kafka-tests")]
use rdkafka::message::{Headers, Message};
#[cfg(feature = "kafka-tests")]
use rusqlite::{Connection, OpenFlags};
#[cfg(feature = "kafka-tests")]
use serde_json::Value;
#[cfg(feature = "kafka-tests")]
use support::tansu::{Tansu, consume};

/// What a container run publishes, in order, for the container itself.
const LIFECYCLE: [&str; 6] = [
    "/containers/create",
    "/tasks/create",
    "/tasks/start",
    "/tasks/exit",
    "/tasks/delete",
    "/containers/delete",
];

const CONNECTED: &str = "/eventgate/upstream/connected";
const DISCONNECTED: &str = "/eventgate/upstream/disconnected";

/// Runs a container that exits 0 and waits until its whole lifecycle is stored, in
/// order; every row then.
fn run_and_record(containerd: &Containerd, db: &Path, id: &str) -> Vec<Row> {
    assert_eq!(containerd.run(id, "exit 0"), 0);
    let rows = wait_stored(db, "the container's delete event", |r| {
        r.topic == "/containers/delete" && r.container() == Some(id)
    });
    assert_eq!(topics(&lifecycle_of(&rows, id)), LIFECYCLE);
    rows
}

/// The topics of one container's events, in stored order.
fn lifecycle_of<'a>(rows: &'a [Row], container: &str) -> Vec<&'a Row> {
    rows.iter()
        .filter(|r| LIFECYCLE.contains(&r.topic.as_str()) && r.container() == Some(container))
        .collect()
}

fn topics(rows: &[&Row]) -> Vec<String> {
    rows.iter().map(|r| r.topic.clone()).collect()
}

/// A unique container id: runc's cgroup paths are per namespace and id, shared by
/// every containerd on the machine.
fn container_id(test: &str) -> String {
    format!("eg-{test}-{}", std::process::id())
}

fn write_config(dir: &Path, upstream: &str, forwarders: &str) -> String {
    Config::new()
        .toml(forwarders)
        .toml("\n")
        .toml(upstream)
        .write(dir)
}

fn upstream_table(containerd: &Containerd, extra: &str) -> String {
    format!(
        "[[upstream]]\nname = \"node\"\naddress = \"{}\"\nreconnect = {{ initial = \"50ms\", max = \"1s\" }}\n{extra}\n",
        containerd.address()
    )
}

const AUDIT_ONLY: &str =
    "[[forwarder]]\nname = \"audit\"\nkind = \"sqlite\"\npath = \"audit.db\"\n";

fn audit_db(gateway: &Gateway) -> PathBuf {
    gateway.dir.path().join("data/audit.db")
}

#[cfg(feature = "kafka-tests")]
#[test]
fn a_container_exit_is_stored_in_order_in_sqlite_the_log_and_kafka() {
    let tansu = Tansu::start();
    let containerd = Containerd::start();
    containerd.import_busybox();
    let dir = tempfile::tempdir().expect("tempdir");
    let forwarders = format!(
        "{AUDIT_ONLY}
[[forwarder]]
name = \"log\"
kind = \"file\"
path = \"events.jsonl\"

[[forwarder]]
name = \"kafka\"
kind = \"kafka\"
brokers = \"{}\"
topic = \"node-events\"
create_topic = true
partitions = 1
replication_factor = 1
",
        tansu.brokers()
    );
    let config = write_config(dir.path(), &upstream_table(&containerd, ""), &forwarders);
    let mut gateway = Gateway::start_in(dir, &["--config", &config]);
    let db = audit_db(&gateway);
    wait_stored(&db, "the connected marker", |r| r.topic == CONNECTED);

    let id = container_id("exit3");
    assert_eq!(
        containerd.run(&id, "exit 3"),
        3,
        "the container's exit code"
    );
    let rows = wait_stored(&db, "the container's delete event", |r| {
        r.topic == "/containers/delete" && r.container() == Some(id.as_str())
    });
    let lifecycle = lifecycle_of(&rows, &id);
    assert_eq!(topics(&lifecycle), LIFECYCLE, "stored in order");
    assert!(lifecycle.iter().all(|r| r.namespace == "default"));
    assert!(lifecycle.iter().all(|r| r.source == "upstream:node"));
    assert_eq!(markers(&rows, CONNECTED)[0].source, "eventgate");
    // What a user would query: the exit code, straight from the decoded JSON.
    let conn = Connection::open_with_flags(&db, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let status: i64 = conn
        .query_row(
            "SELECT json_extract(event, '$.exit_status') FROM events
             WHERE topic = '/tasks/exit' AND json_extract(event, '$.container_id') = ?1",
            [&id],
            |r| r.get(0),
        )
        .expect("the exit row");
    assert_eq!(status, 3);

    // The log file and the Kafka topic hold the same events, in the same order.
    let ids: Vec<String> = rows.iter().map(|r| r.id.clone()).collect();
    let log = gateway.dir.path().join("data/events.jsonl");
    let logged: Vec<String> = wait_for("the log file to hold every stored event", DEADLINE, || {
        let text = std::fs::read_to_string(&log).ok()?;
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("JSON lines"))
            .collect();
        (lines.len() >= ids.len()).then(|| {
            lines
                .iter()
                .map(|l| l["id"].as_str().expect("id").to_owned())
                .collect()
        })
    });
    assert_eq!(logged[..ids.len()], ids[..]);
    let exit_line = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|l| l["topic"] == "/tasks/exit")
        .expect("the exit line");
    assert_eq!(exit_line["event"]["exit_status"], 3);

    let messages = consume(&tansu.brokers(), "node-events", ids.len());
    let kafka_ids: Vec<String> = messages
        .iter()
        .map(|m| {
            let header = m
                .headers()
                .and_then(|h| h.iter().find(|h| h.key == "event_id"))
                .and_then(|h| h.value)
                .expect("event_id header");
            String::from_utf8_lossy(header).into_owned()
        })
        .collect();
    assert_eq!(kafka_ids[..ids.len()], ids[..]);
    let exit = messages
        .iter()
        .map(|m| Envelope::decode(m.payload().expect("value")).expect("an Envelope"))
        .find(|e| e.topic == "/tasks/exit")
        .expect("the exit message");
    let decoded = Registry::global()
        .decode(exit.event.as_ref().expect("payload"))
        .expect("decodes");
    assert_eq!(
        decoded
            .get_field_by_name("exit_status")
            .and_then(|v| v.as_u32()),
        Some(3)
    );

    let status = gateway.terminate();
    assert!(status.success(), "{}", gateway.stderr_text());
    // Stopping records where the record ends.
    let rows = stored(&db);
    let last = rows.last().expect("rows");
    assert_eq!(last.topic, DISCONNECTED);
    assert_eq!(last.event["reason"], "eventgate is stopping");
}

#[test]
fn containerd_and_eventgate_restarts_are_recorded_and_capture_resumes() {
    let mut containerd = Containerd::start();
    containerd.import_busybox();
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(dir.path(), &upstream_table(&containerd, ""), AUDIT_ONLY);
    let mut gateway = Gateway::start_in(dir, &["--config", &config]);
    let db = audit_db(&gateway);
    wait_stored(&db, "the first connected marker", |r| r.topic == CONNECTED);

    containerd.kill9();
    let rows = wait_stored(&db, "the disconnected marker", |r| r.topic == DISCONNECTED);
    let down = markers(&rows, DISCONNECTED)[0].clone();
    assert_eq!(down.namespace, "eventgate");
    assert_eq!(down.event["upstream"], "node");
    assert_eq!(down.event["address"], containerd.address());
    assert!(
        !down.event["reason"].as_str().unwrap_or_default().is_empty(),
        "{down:?}"
    );

    containerd.restart();
    let rows = wait_for("a second connected marker", DEADLINE, || {
        let rows = stored(&db);
        (markers(&rows, CONNECTED).len() == 2).then_some(rows)
    });
    let up = markers(&rows, CONNECTED)[1].clone();
    assert!(up.row_id > down.row_id);
    // The gap runs exactly from the break to the reconnection.
    assert_eq!(up.event["gap_started_at"], down.event["disconnected_at"]);

    let id = container_id("restart");
    let rows = run_and_record(&containerd, &db, &id);
    let lifecycle = lifecycle_of(&rows, &id);
    assert!(lifecycle.iter().all(|r| r.row_id > up.row_id));

    // eventgate's own restart: the stop is recorded, and the new process's first
    // connection says the gap began when it started.
    assert!(gateway.restart().success(), "{}", gateway.stderr_text());
    let rows = wait_for("a third connected marker", DEADLINE, || {
        let rows = stored(&db);
        (markers(&rows, CONNECTED).len() == 3).then_some(rows)
    });
    let stop = markers(&rows, DISCONNECTED)[1].clone();
    assert_eq!(stop.event["reason"], "eventgate is stopping");
    let again = markers(&rows, CONNECTED)[2].clone();
    assert_eq!(again.event["attempts"], 1, "{}", gateway.stderr_text());
    assert!(
        again.event["gap_started_at"].as_str() > stop.event["disconnected_at"].as_str(),
        "the new process started after the old one stopped: {again:?} {stop:?}"
    );
    let id = container_id("after-restart");
    run_and_record(&containerd, &db, &id);
    assert!(gateway.terminate().success(), "{}", gateway.stderr_text());
}

#[test]
fn eventgate_started_before_containerd_connects_when_it_comes_up() {
    let mut containerd = Containerd::not_started();
    // The command-line form, with the embedded default forwarders (log + audit).
    let flag = format!("node={}", containerd.address());
    let mut gateway = Gateway::start(&["--upstream", &flag]);
    let db = audit_db(&gateway);
    let mut log = String::new();
    wait_for(
        "the gateway to report the upstream unreachable",
        DEADLINE,
        || {
            log.push_str(&gateway.stderr_text());
            log.contains("upstream unreachable").then_some(())
        },
    );
    assert!(markers(&stored(&db), CONNECTED).is_empty());

    containerd.restart();
    containerd.import_busybox();
    wait_stored(&db, "the connected marker", |r| r.topic == CONNECTED);
    let id = container_id("late");
    run_and_record(&containerd, &db, &id);
    assert!(gateway.terminate().success(), "{}", gateway.stderr_text());
}

#[test]
fn upstream_filters_keep_only_matching_events() {
    let containerd = Containerd::start();
    containerd.import_busybox();
    let dir = tempfile::tempdir().expect("tempdir");
    let upstream = upstream_table(&containerd, "filters = ['topic~=\"^/tasks/\"']");
    let config = write_config(dir.path(), &upstream, AUDIT_ONLY);
    let mut gateway = Gateway::start_in(dir, &["--config", &config]);
    let db = audit_db(&gateway);
    wait_stored(&db, "the connected marker", |r| r.topic == CONNECTED);

    let id = container_id("filters");
    assert_eq!(containerd.run(&id, "exit 0"), 0);
    // containerd delivers in order, so once an event published after the run is
    // stored, everything the run published has been through the filter.
    let sentinel = Registry::global()
        .encode_json(
            "containerd.events.TaskOOM",
            r#"{"container_id":"sentinel"}"#,
        )
        .expect("encode");
    containerd.publish("default", "/tasks/oom", &sentinel);
    let rows = wait_stored(&db, "the sentinel", |r| r.topic == "/tasks/oom");
    for row in &rows {
        assert!(
            row.topic.starts_with("/tasks/") || row.namespace == "eventgate",
            "{row:?} passed the upstream filter"
        );
    }
    assert_eq!(
        topics(&lifecycle_of(&rows, &id)),
        [
            "/tasks/create",
            "/tasks/start",
            "/tasks/exit",
            "/tasks/delete"
        ]
    );
    assert!(gateway.terminate().success(), "{}", gateway.stderr_text());
}

const WAKEUPS: &str = "eventgate_upstream_socket_wakeups_total";
const FAILURES: &str = "eventgate_upstream_connect_failures_total";

fn node_metric(gateway: &mut Gateway, name: &str) -> f64 {
    scrape(gateway)
        .get(name, &[("upstream", "node")])
        .unwrap_or(0.0)
}

fn timestamp(row: &Row, field: &str) -> std::time::SystemTime {
    let text = row.event[field].as_str().unwrap_or_default();
    humantime::parse_rfc3339(text).unwrap_or_else(|e| panic!("{field} in {row:?}: {e}"))
}

#[test]
fn a_restarted_containerd_is_resubscribed_as_soon_as_its_socket_accepts() {
    const ROUNDS: usize = 3;
    // The socket below the daemon's directory, so that the directory can go away
    // with the daemon, as a state dir under /run does.
    let mut containerd = Containerd::not_started_in("run/containerd");
    containerd.restart();
    let dir = tempfile::tempdir().expect("tempdir");
    // A slow backoff: after a failed attempt the timer waits 2 to 4 s, so only the
    // socket watch can reconnect within the bound below.
    let upstream = format!(
        "[[upstream]]\nname = \"node\"\naddress = \"{}\"\nreconnect = {{ initial = \"2s\", max = \"4s\" }}\n",
        containerd.address()
    );
    let config = write_config(dir.path(), &upstream, AUDIT_ONLY);
    let mut gateway = Gateway::start_in(dir, &["--config", &config]);
    let db = audit_db(&gateway);
    wait_stored(&db, "the connected marker", |r| r.topic == CONNECTED);

    let mut latencies = Vec::new();
    for round in 1..=ROUNDS {
        containerd.kill9();
        wait_for("the disconnected marker", DEADLINE, || {
            (markers(&stored(&db), DISCONNECTED).len() == round).then_some(())
        });
        if round == ROUNDS {
            std::fs::remove_dir_all(containerd.dir.path().join("run"))
                .expect("remove the socket's directories");
        }
        // eventgate has found the daemon gone and is waiting out its backoff.
        let failures = node_metric(&mut gateway, FAILURES);
        wait_for("a failed attempt on the dead socket", DEADLINE, || {
            (node_metric(&mut gateway, FAILURES) > failures).then_some(())
        });

        let accepting = containerd.restart_timed();
        let rows = wait_for("the next connected marker", DEADLINE, || {
            let rows = stored(&db);
            (markers(&rows, CONNECTED).len() == round + 1).then_some(rows)
        });
        let connected_at = timestamp(markers(&rows, CONNECTED)[round], "connected_at");
        // Signed: eventgate may be subscribed before the test's own probe gets in.
        let latency_ms = match connected_at.duration_since(accepting) {
            Ok(after) => after.as_secs_f64() * 1e3,
            Err(before) => -before.duration().as_secs_f64() * 1e3,
        };
        eprintln!("round {round}: subscribed {latency_ms:.1} ms after the socket accepted");
        latencies.push(latency_ms);
    }
    // The goal is 100 ms; the bound leaves room for a loaded 2-core machine and is
    // still well below what the backoff alone could do (2 s at the least).
    for (round, latency) in latencies.iter().enumerate() {
        assert!(
            *latency < 500.0,
            "round {}: resubscribed {latency:.1} ms after the socket accepted: {latencies:?}\n{}",
            round + 1,
            gateway.stderr_text()
        );
    }
    assert_eq!(
        node_metric(&mut gateway, WAKEUPS),
        ROUNDS as f64,
        "one socket wake-up per restart"
    );

    // Capture goes on after the directories were made again.
    containerd.import_busybox();
    let id = container_id("socket-watch");
    run_and_record(&containerd, &db, &id);
    assert!(gateway.terminate().success(), "{}", gateway.stderr_text());
}

#[test]
fn an_upstream_whose_socket_stays_away_keeps_its_backoff() {
    let mut containerd = Containerd::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(dir.path(), &upstream_table(&containerd, ""), AUDIT_ONLY);
    let mut gateway = Gateway::start_in(dir, &["--config", &config]);
    // Read from the log before the test reads the log itself.
    gateway.admin_addr();
    let db = audit_db(&gateway);
    wait_stored(&db, "the connected marker", |r| r.topic == CONNECTED);
    containerd.kill9();
    wait_stored(&db, "the disconnected marker", |r| r.topic == DISCONNECTED);

    // A socket appears that nothing answers on (a daemon that binds and dies): one
    // wake-up, a bounded burst of quick attempts, then the backoff again.
    let _ = std::fs::remove_file(&containerd.socket);
    drop(std::os::unix::net::UnixListener::bind(&containerd.socket).expect("bind"));
    let mut log = String::new();
    wait_for("the burst to end", DEADLINE, || {
        log.push_str(&gateway.stderr_text());
        log.contains("nothing answered on it").then_some(())
    });
    assert_eq!(node_metric(&mut gateway, WAKEUPS), 1.0, "{log}");

    // Over a few seconds of a socket that never answers, with everything else that
    // happens in a daemon's directory going on, attempts come at the backoff's pace
    // (initial 50ms, max 1s: delays of at least 25, 50, 100, 200, 400, 500, 500...
    // ms), not at the burst's 10 ms. The window is a measurement, not a wait.
    let before = node_metric(&mut gateway, FAILURES);
    let window = std::time::Instant::now() + std::time::Duration::from_secs(3);
    let mut churn = 0;
    while std::time::Instant::now() < window {
        let other = containerd.dir.path().join(format!("churn-{churn}"));
        std::fs::write(&other, b"x").expect("write a file beside the socket");
        std::fs::remove_file(&other).expect("remove it");
        std::fs::set_permissions(
            &containerd.socket,
            std::os::unix::fs::PermissionsExt::from_mode(0o600 + (churn % 2) * 0o060),
        )
        .expect("chmod the stale socket");
        churn += 1;
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let attempts = node_metric(&mut gateway, FAILURES) - before;
    eprintln!("{attempts} failed attempts in 3 s after the burst");
    assert!(
        (1.0..=10.0).contains(&attempts),
        "{attempts} failed attempts in 3 s; the backoff allows 1 to 10"
    );
    assert_eq!(
        node_metric(&mut gateway, WAKEUPS),
        1.0,
        "nothing but the socket's creation wakes the upstream"
    );
    assert!(gateway.terminate().success(), "{}", gateway.stderr_text());
}
