//! The workload columns as stored: what they hold, the filters on them (SQL in
//! `query` and `stats`, the matcher in `replay`'s route), the hash chain over them,
//! and a store from before them.

use std::path::Path;

use eventgate::event::{Event, EventId, Source};
use eventgate::internal::store::EventRow;
use eventgate::internal::store::chain;
use eventgate::internal::store::migrate::{APPLICATION_ID, MIGRATIONS};
use rusqlite::{Connection, params};
use serde_json::Value;

use super::history::{T0, exit, history, json_lines, run, stdout, store};
use super::support::path_str;

fn columns(db: &Path, row_id: i64) -> Vec<Option<String>> {
    let conn = Connection::open(db).unwrap();
    conn.query_row(
        "SELECT pod_name, pod_namespace, pod_uid, container_name, container_kind, image, labels \
         FROM events WHERE row_id = ?1",
        [row_id],
        |r| (0..7).map(|i| r.get(i)).collect(),
    )
    .unwrap()
}

fn some(values: [Option<&str>; 7]) -> Vec<Option<String>> {
    values.iter().map(|v| v.map(str::to_owned)).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_columns_hold_the_workload_and_filters_verify_and_replay_use_them() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let db_path = store(&data, &history()).await;
    let db = path_str(&db_path);
    let logged = json_lines(&std::fs::read_to_string(data.join("events.jsonl")).unwrap());

    assert_eq!(
        columns(&db_path, 5),
        some([
            Some("web-7"),
            Some("shop"),
            Some("uid-shop-web-7"),
            Some("nginx"),
            Some("container"),
            Some("docker.io/library/nginx:1.27"),
            Some(r#"{"app.kubernetes.io/name":"web-7"}"#),
        ])
    );
    assert_eq!(
        columns(&db_path, 1)[3],
        None,
        "a sandbox has no container name"
    );
    assert_eq!(
        columns(&db_path, 21),
        vec![None; 7],
        "an event about no container"
    );

    for (filter, wanted) in [
        ("pod.name==db-0", vec![18, 19]),
        ("pod.uid==uid-staging-web-7", vec![16, 17]),
        ("container.kind==sandbox", vec![0, 1, 2, 14, 15]),
        (r#"container.name==nginx,topic=="/tasks/exit""#, vec![5, 11]),
        (
            r#"container.labels."app.kubernetes.io/name"==db-0"#,
            vec![18, 19],
        ),
        ("container.image~=pause", vec![0, 1, 2, 14, 15]),
        ("pod.namespace!=shop", vec![16, 17, 20]),
        ("container.labels.missing", vec![]),
    ] {
        let out = stdout(&run(&["query", "--db", db, "--format", "json", filter]));
        let wanted: Vec<Value> = wanted.iter().map(|&i| logged[i].clone()).collect();
        assert_eq!(json_lines(&out), wanted, "{filter}");
    }

    // stats takes the same filters.
    let out = stdout(&run(&[
        "stats",
        "--db",
        db,
        "--utc",
        "--bucket",
        "1d",
        "--by",
        "namespace",
        "container.kind==sandbox",
    ]));
    assert!(
        out.lines()
            .nth(1)
            .is_some_and(|l| l.ends_with("k8s.io     5")),
        "{out}"
    );

    // The chain is whole; a pod name changed by hand is found at its row.
    let verified = run(&["audit", "verify", "--db", db]);
    assert!(
        verified.status.success(),
        "{}",
        String::from_utf8_lossy(&verified.stdout)
    );
    let copy = dir.path().join("copy.db");
    std::fs::copy(&db_path, &copy).unwrap();
    Connection::open(&copy)
        .unwrap()
        .execute("UPDATE events SET pod_name = 'web-8' WHERE row_id = 5", [])
        .unwrap();
    let tampered = run(&["audit", "verify", "--db", path_str(&copy)]);
    let text = String::from_utf8_lossy(&tampered.stdout);
    assert_eq!(tampered.status.code(), Some(1), "{text}");
    assert!(
        text.contains("TAMPERED") && text.contains("row_id 5"),
        "{text}"
    );

    // Replayed through a forwarder whose route filter is on the pod: the events come
    // with their workload, lines as first written.
    let config = dir.path().join("replay.toml");
    std::fs::write(
        &config,
        format!(
            "data_dir = {:?}\n[[forwarder]]\nname = \"again\"\nkind = \"file\"\n\
             path = \"replayed.jsonl\"\nfilters = ['pod.name==db-0']\n",
            path_str(&dir.path().join("out"))
        ),
    )
    .unwrap();
    stdout(&run(&[
        "replay",
        "--db",
        db,
        "--to-forwarder",
        "again",
        "--config",
        path_str(&config),
        "--progress",
        "never",
        "container.kind==container",
    ]));
    let replayed =
        json_lines(&std::fs::read_to_string(dir.path().join("out/replayed.jsonl")).unwrap());
    assert_eq!(replayed, logged[18..20]);
    assert_eq!(replayed[0]["pod"]["name"], "db-0");
}

/// The hash a schema 7 writer gave a row: the ten columns, as migrations/README.md
/// documents them.
fn schema_7_hash(prev: &[u8; 32], row: &EventRow<'_>, seq: i64) -> [u8; 32] {
    use rusqlite::types::ValueRef;
    use sha2::{Digest, Sha256};
    let mut bytes = b"eventgate.audit.v1".to_vec();
    bytes.extend_from_slice(prev);
    for value in &chain::values(seq, row)[..10] {
        let (tag, body): (u8, Vec<u8>) = match *value {
            ValueRef::Null => {
                bytes.push(0);
                continue;
            }
            ValueRef::Integer(i) => (1, i.to_be_bytes().to_vec()),
            ValueRef::Text(t) => (3, t.to_vec()),
            ValueRef::Blob(b) => (4, b.to_vec()),
            ValueRef::Real(_) => unreachable!(),
        };
        bytes.push(tag);
        bytes.extend_from_slice(&(body.len() as u64).to_be_bytes());
        bytes.extend_from_slice(&body);
    }
    Sha256::digest(&bytes).into()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_schema_7_store_migrates_keeps_verifying_and_takes_pods() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let db_path = data.join("audit.db");
    {
        // A store as a version 7 gateway left it: three chained exits.
        let conn = Connection::open(&db_path).unwrap();
        conn.pragma_update(None, "application_id", APPLICATION_ID)
            .unwrap();
        for migration in &MIGRATIONS[..7] {
            conn.execute_batch(migration.sql).unwrap();
        }
        conn.pragma_update(None, "user_version", 7).unwrap();
        let mut prev = [0u8; 32];
        for seq in 1..=3i64 {
            let any = eventgate::proto::Registry::global()
                .encode_json("containerd.events.TaskExit", &exit("old", 1))
                .unwrap();
            let event = Event::new(
                seq as u64,
                EventId::generate(),
                Source::Publish,
                eventgate::proto::containerd::types::Envelope {
                    timestamp: Some(prost_types::Timestamp {
                        seconds: T0 - 100 + seq,
                        nanos: 0,
                    }),
                    namespace: "default".into(),
                    topic: "/tasks/exit".into(),
                    event: Some(any),
                },
            );
            let row = EventRow::from_event(&event);
            let hash = schema_7_hash(&prev, &row, seq);
            conn.execute(
                "INSERT INTO events (row_id, seq, id, timestamp, received_at, namespace, topic, type_url, \
                 payload, event, source, prev_hash, hash) VALUES (?1, ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
                params![seq, row.id, row.timestamp, row.received_at, row.namespace, row.topic,
                        row.type_url, row.payload, row.event, row.source, prev, hash],
            )
            .unwrap();
            conn.execute(
                "UPDATE audit_chain SET head_row_id = ?1, head_seq = ?1, head_hash = ?2",
                params![seq, hash],
            )
            .unwrap();
            prev = hash;
        }
    }
    // Readers do not migrate: the store must meet a gateway first.
    let early = run(&["audit", "verify", "--db", path_str(&db_path)]);
    assert_eq!(early.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&early.stderr).contains("version 7"));

    store(&data, &history()).await;
    let verified = stdout(&run(&["audit", "verify", "--db", path_str(&db_path)]));
    assert!(verified.contains("24 rows (row_id 1 to 24)"), "{verified}");
    assert_eq!(columns(&db_path, 1), vec![None; 7]);

    let db = path_str(&db_path);
    let old = json_lines(&stdout(&run(&[
        "query", "--db", db, "--format", "json", "--limit", "3",
    ])));
    assert!(
        old.iter()
            .all(|l| l.get("pod").is_none() && l.get("container").is_none())
    );
    let timeline = stdout(&run(&["query", "--db", db, "--pod", "db-0"]));
    assert!(timeline.starts_with("pod shop/db-0"), "{timeline}");
}
