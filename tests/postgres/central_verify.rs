//! A central copy checked against its node's own signed checkpoints: two node
//! gateways sign checkpoints of their SQLite audit stores and ship every event
//! through a real Kafka-protocol broker (tansu), one in protobuf, one as JSON; a
//! central gateway stores them in PostgreSQL. `audit verify --store postgres://...
//! --node NAME` recomputes each node's chain from the central rows and reaches every
//! signed hash; an edited, removed or added row, an edited event JSON and a forged
//! note are each found, and a wrong key cannot verify anything.

use std::path::Path;
use std::process::Output;

use crate::support::postgres::Postgres;
use crate::support::tansu::Tansu;
use crate::support::*;

const TOPIC: &str = "fleet";
const EVENTS: u32 = 120;

/// `audit keygen NAME --out DIR/NAME.key`: the key file and the verifier key.
fn keygen(dir: &Path, name: &str) -> (String, String) {
    let key = dir.join(format!("{name}.key"));
    let verifier = eventgate_stdout(&["audit", "keygen", name, "--out", path_str(&key)]);
    (path_str(&key).to_owned(), verifier.trim().to_owned())
}

/// A node gateway that signs checkpoints of its SQLite store (also into its file
/// log) and ships every event to the fleet's topic as `format`.
fn node(tansu: &Tansu, name: &str, format: &str) -> (Gateway, String) {
    let dir = tempfile::tempdir().unwrap();
    let (key, verifier) = keygen(dir.path(), name);
    let config = dir.path().join("eventgate.toml");
    std::fs::write(
        &config,
        format!(
            r#"node = "{name}"

[signing]
key = "{key}"
interval = "1s"
every_rows = 40

[[forwarder]]
name = "log"
kind = "file"
path = "events.jsonl"

[[forwarder]]
name = "audit"
kind = "sqlite"
path = "audit.db"

[[forwarder]]
name = "kafka"
kind = "kafka"
brokers = "{brokers}"
topic = "{TOPIC}"
create_topic = true
partitions = 2
value_format = "{format}"
"#,
            brokers = tansu.brokers()
        ),
    )
    .unwrap();
    (
        Gateway::start_in(dir, &["--config", path_str(&config)]),
        verifier,
    )
}

fn central(tansu: &Tansu, pg: &Postgres) -> Gateway {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("eventgate.toml");
    // A file of this gateway's own: tests run in parallel, each with its own server.
    let password = dir.path().join("pg-password");
    std::fs::write(&password, pg.password()).unwrap();
    std::fs::write(
        &config,
        format!(
            r#"node = "central"

[[forwarder]]
name = "central"
kind = "postgres"
url = "postgres://postgres@127.0.0.1:{port}/history"
password_file = "{password}"
tls = "disable"
retry = {{ initial = "50ms", max = "500ms" }}

[[source]]
kind = "kafka"
name = "fleet"
brokers = "{brokers}"
topics = ["{TOPIC}"]
group = "centrals"
offsets = "central"
"#,
            port = pg.port(),
            password = password.display(),
            brokers = tansu.brokers()
        ),
    )
    .unwrap();
    Gateway::start_in(dir, &["--config", path_str(&config)])
}

fn rows_of(pg: &Postgres, node: &str) -> u64 {
    pg.try_sql_in(
        "history",
        &format!("SELECT count(*) FROM events WHERE node = '{node}'"),
    )
    .ok()
    .and_then(|n| n.parse().ok())
    .unwrap_or(0)
}

/// The node's SQLite store's row count, read after it stopped.
fn node_rows(node: &Gateway) -> u64 {
    let db = node.dir.path().join("data/audit.db");
    let conn =
        rusqlite::Connection::open_with_flags(&db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .expect("the node's store");
    conn.query_row("SELECT count(*) FROM events", [], |r| r.get::<_, i64>(0))
        .expect("count") as u64
}

fn verify(pg: &Postgres, node: &str, verifier: &str, checkpoints: &Path) -> Output {
    eventgate()
        .args(["audit", "verify", "--store"])
        .arg(format!(
            "postgres://postgres@127.0.0.1:{}/history",
            pg.port()
        ))
        .args(["--store-tls", "disable", "--node", node, "--key", verifier])
        .arg("--checkpoints")
        .arg(checkpoints)
        .env("PGPASSWORD", pg.password())
        .output()
        .expect("run audit verify")
}

fn said(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs verify and asserts its exit code and that its output names `words`.
fn expect(out: Output, code: i32, words: &[&str]) {
    let text = said(&out);
    assert_eq!(out.status.code(), Some(code), "{text}");
    for word in words {
        assert!(text.contains(word), "{word:?} not in:\n{text}");
    }
}

#[test]
fn a_central_copy_verifies_against_its_nodes_checkpoints_and_every_tampering_shows() {
    let tansu = Tansu::start();
    let pg = Postgres::start();
    pg.sql("CREATE DATABASE history");
    let (mut a, key_a) = node(&tansu, "node-a", "protobuf");
    let (mut b, key_b) = node(&tansu, "node-b", "json");
    let mut hub = central(&tansu, &pg);
    for (gw, name) in [(&a, "node-a"), (&b, "node-b")] {
        for n in 0..EVENTS {
            let (ok, err) = publish_json(
                &gw.address(),
                "default",
                "/tasks/exit",
                "containerd.events.TaskExit",
                &format!(
                    r#"{{"container_id":"{name}-c{}","pid":{n},"exit_status":{}}}"#,
                    n % 5,
                    n % 3
                ),
            );
            assert!(ok, "publish: {err}");
        }
    }
    // A stop signs a last checkpoint of everything stored; every row the node
    // stored, that checkpoint's included, reaches the central store.
    assert!(a.terminate().success(), "{}", a.stderr_text());
    assert!(b.terminate().success(), "{}", b.stderr_text());
    let (rows_a, rows_b) = (node_rows(&a), node_rows(&b));
    assert!(rows_a > u64::from(EVENTS) && rows_b > u64::from(EVENTS));
    wait_for("every node row in the central store", DEADLINE, || {
        (rows_of(&pg, "node-a") == rows_a && rows_of(&pg, "node-b") == rows_b).then_some(())
    });
    let log_a = a.dir.path().join("data/events.jsonl");
    let log_b = b.dir.path().join("data/events.jsonl");

    let out = verify(&pg, "node-a", &key_a, &log_a);
    expect(out, 0, &["central copy of node node-a", "intact", "proven"]);
    let out = verify(&pg, "node-b", &key_b, &log_b);
    expect(out, 0, &["central copy of node node-b", "intact", "proven"]);
    // Every row up to the newest checkpoint is proven, and that is every event
    // published (the stop's checkpoint signs them all).
    let out = verify(&pg, "node-a", &key_a, &log_a);
    let text = said(&out);
    let figure = |label: &str, after: &str| -> u64 {
        let line = text
            .lines()
            .find(|l| l.starts_with(label))
            .unwrap_or_else(|| panic!("no {label} line in:\n{text}"));
        line[line.find(after).unwrap_or_else(|| panic!("{line}")) + after.len()..]
            .split_whitespace()
            .next()
            .and_then(|n| n.trim_end_matches(',').parse().ok())
            .unwrap_or_else(|| panic!("{line}"))
    };
    let (proven, newest) = (figure("proven", "proven"), figure("newest", "node seq "));
    let covered = pg.sql_in(
        "history",
        &format!("SELECT count(*) FROM events WHERE node = 'node-a' AND node_seq <= {newest}"),
    );
    assert_eq!(proven.to_string(), covered, "{text}");
    let exits = pg.sql_in(
        "history",
        &format!("SELECT count(*) FROM events WHERE node = 'node-a' AND node_seq <= {newest} AND topic = '/tasks/exit'"),
    );
    assert_eq!(exits, EVENTS.to_string(), "{text}");

    // Another key proves nothing; another node's checkpoints are not this one's.
    let keys = tempfile::tempdir().unwrap();
    let (_, stranger) = keygen(keys.path(), "someone");
    expect(
        verify(&pg, "node-a", &stranger, &log_a),
        2,
        &["none of the"],
    );
    // A key by the node's name but not its key: the signing key was replaced.
    let (_, impostor) = keygen(keys.path(), "node-a");
    expect(
        verify(&pg, "node-a", &impostor, &log_a),
        1,
        &["TAMPERED", "the signing key was replaced"],
    );
    expect(
        verify(&pg, "node-a", &key_b, &log_b),
        2,
        &["none of the", "is of node \"node-a\""],
    );

    let middle = "node = 'node-a' AND node_seq = (SELECT node_seq FROM events WHERE node = 'node-a' \
                  AND topic = '/tasks/exit' ORDER BY node_seq OFFSET 50 LIMIT 1)";
    // A row's content edited.
    let namespace = pg.sql_in(
        "history",
        &format!("SELECT namespace FROM events WHERE {middle}"),
    );
    pg.sql_in(
        "history",
        &format!("UPDATE events SET namespace = 'edited' WHERE {middle}"),
    );
    expect(
        verify(&pg, "node-a", &key_a, &log_a),
        1,
        &["TAMPERED", "modified", "a row's content differs"],
    );
    pg.sql_in(
        "history",
        &format!("UPDATE events SET namespace = '{namespace}' WHERE namespace = 'edited'"),
    );
    expect(verify(&pg, "node-a", &key_a, &log_a), 0, &["intact"]);

    // The event's JSON edited, its payload left alone.
    pg.sql_in(
        "history",
        &format!("CREATE TABLE original AS SELECT id, event FROM events WHERE {middle}"),
    );
    pg.sql_in(
        "history",
        &format!(
            "UPDATE events SET event = jsonb_set(event, '{{exit_status}}', '4242') WHERE {middle}"
        ),
    );
    expect(
        verify(&pg, "node-a", &key_a, &log_a),
        1,
        &["TAMPERED", "not its payload's rendering"],
    );
    pg.sql_in(
        "history",
        &format!("UPDATE events SET event = NULL WHERE {middle}"),
    );
    expect(verify(&pg, "node-a", &key_a, &log_a), 1, &["TAMPERED"]);
    pg.sql_in(
        "history",
        "UPDATE events e SET event = o.event FROM original o WHERE e.id = o.id",
    );
    expect(verify(&pg, "node-a", &key_a, &log_a), 0, &["intact"]);

    // A row removed (kept aside, then put back: intact again).
    pg.sql_in(
        "history",
        &format!(
            "CREATE TABLE aside AS SELECT * FROM events WHERE {middle};
             DELETE FROM events WHERE {middle}"
        ),
    );
    expect(
        verify(&pg, "node-a", &key_a, &log_a),
        1,
        &["TAMPERED", "deleted"],
    );
    // A row added beside it, claiming the same node seq.
    pg.sql_in(
        "history",
        "INSERT INTO events SELECT * FROM aside;
         UPDATE aside SET id = gen_random_uuid(), row_id = row_id + 100000;
         INSERT INTO events SELECT * FROM aside",
    );
    expect(
        verify(&pg, "node-a", &key_a, &log_a),
        1,
        &["TAMPERED", "inserted", "claims node seq"],
    );
    pg.sql_in(
        "history",
        "DELETE FROM events e USING aside a WHERE e.id = a.id",
    );
    expect(verify(&pg, "node-a", &key_a, &log_a), 0, &["intact"]);

    // A checkpoint note edited after it was signed.
    let text = std::fs::read_to_string(&log_a).unwrap();
    let forged = a.dir.path().join("forged.jsonl");
    let line = text
        .lines()
        .find(|l| l.contains("/eventgate/audit/checkpoint"))
        .expect("a checkpoint line");
    let edited = line.replacen(
        "eventgate audit checkpoint v2\\nnode node-a",
        "eventgate audit checkpoint v2\\nnode node-a ",
        1,
    );
    assert_ne!(edited, line);
    std::fs::write(&forged, text.replacen(line, &edited, 1)).unwrap();
    expect(
        verify(&pg, "node-a", &key_a, &forged),
        1,
        &["TAMPERED", "does not verify"],
    );

    assert!(hub.terminate().success(), "{}", hub.stderr_text());
}
