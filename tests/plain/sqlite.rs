//! The SQLite audit store as its users see it: real database files, read back with SQL.

use crate::support;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use eventgate::event::Event;
use eventgate::forward::{Batch, ErrorKind, Forwarder};
use eventgate::internal::forward::sqlite::SqliteForwarder;
use eventgate::internal::store::{self, Synchronous, WriterOptions};
use eventgate::proto::Registry;
use eventgate::proto::containerd::services::events::v1::PublishRequest;
use rusqlite::Connection;
use support::audit::{wait_rows, write_sqlite_config};
use support::*;

fn task_exit(seq: u64, container: &str, status: u32) -> Arc<Event> {
    task_exit_event(seq, container, status)
}

fn batch(events: &[Arc<Event>]) -> Batch {
    Batch::new(events.to_vec(), 0)
}

fn count(conn: &Connection) -> i64 {
    conn.query_row("SELECT count(*) FROM events", [], |r| r.get(0))
        .expect("count")
}

/// Rows as a user reads them, in insertion order.
type Row = (i64, String, String, String, String, String, Vec<u8>, String);

fn rows(conn: &Connection) -> Vec<Row> {
    conn.prepare(
        "SELECT seq, id, timestamp, namespace, topic, type_url, payload, event
         FROM events ORDER BY row_id",
    )
    .expect("prepare")
    .query_map([], |r| {
        Ok((
            r.get(0)?,
            r.get(1)?,
            r.get(2)?,
            r.get(3)?,
            r.get(4)?,
            r.get(5)?,
            r.get(6)?,
            r.get(7)?,
        ))
    })
    .expect("query")
    .collect::<Result<_, _>>()
    .expect("rows")
}

async fn open(path: &Path, busy_timeout: Duration) -> SqliteForwarder {
    let options = WriterOptions {
        synchronous: Synchronous::Normal,
        busy_timeout,
    };
    SqliteForwarder::open("audit", path.to_path_buf(), options)
        .await
        .expect("open the audit store")
}

#[tokio::test]
async fn a_batch_becomes_rows_and_sending_it_again_adds_none() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("audit.db");
    let forwarder = open(&path, Duration::from_secs(5)).await;
    let events: Vec<_> = (1..=3)
        .map(|seq| task_exit(seq, "c1", seq as u32))
        .collect();
    forwarder.send(&batch(&events)).await.expect("first send");
    forwarder.send(&batch(&events)).await.expect("re-send");
    // A retry after a partly failed delivery overlaps the previous batch.
    let more = vec![Arc::clone(&events[2]), task_exit(4, "c2", 4)];
    forwarder
        .send(&batch(&more))
        .await
        .expect("overlapping send");

    let conn = store::open_reader(&path, Duration::from_secs(1)).expect("reader");
    let got = rows(&conn);
    assert_eq!(got.len(), 4, "each event once");
    for (row, event) in got.iter().zip(events.iter().chain(&more[1..])) {
        let any = event.envelope.event.as_ref().expect("payload");
        assert_eq!(row.0, event.seq as i64);
        assert_eq!(row.1, event.identity.id.to_string());
        assert_eq!(row.2, format!("2024-05-01T10:00:0{}.123456789Z", event.seq));
        assert_eq!((row.3.as_str(), row.4.as_str()), ("default", "/tasks/exit"));
        assert_eq!(row.5, "containerd.events.TaskExit");
        assert_eq!(row.6, any.value, "the raw Any bytes");
        let json: serde_json::Value = serde_json::from_str(&row.7).expect("json");
        assert_eq!(json["exit_status"], event.seq);
    }
    let since: i64 = conn
        .query_row(
            "SELECT count(*) FROM events WHERE timestamp >= '2024-05-01T10:00:03'",
            [],
            |r| r.get(0),
        )
        .expect("time query");
    assert_eq!(since, 2, "times compare as text");
}

/// Another connection holds the write lock: the forwarder's send fails retryably
/// (after its busy_timeout) with nothing kept; once the lock is gone the same batch
/// goes in, exactly once.
#[tokio::test]
async fn a_busy_database_is_retryable_and_the_retried_batch_goes_in_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("audit.db");
    let forwarder = open(&path, Duration::from_millis(50)).await;
    let first: Vec<_> = (1..=2).map(|seq| task_exit(seq, "c", 0)).collect();
    forwarder
        .send(&batch(&first))
        .await
        .expect("before the lock");

    let other = Connection::open(&path).expect("other connection");
    other
        .execute_batch("BEGIN IMMEDIATE")
        .expect("take the lock");
    let events: Vec<_> = (3..=6).map(|seq| task_exit(seq, "c", 0)).collect();
    let error = forwarder.send(&batch(&events)).await.expect_err("busy");
    assert_eq!(error.kind, ErrorKind::Retryable, "{error}");
    assert!(error.message.contains("locked"), "{error}");

    other.execute_batch("ROLLBACK").expect("release the lock");
    forwarder.send(&batch(&events)).await.expect("retry");
    let seqs: Vec<i64> = rows(&other).into_iter().map(|r| r.0).collect();
    assert_eq!(seqs, [1, 2, 3, 4, 5, 6]);
}

const EXIT_QUERY: &str =
    "select json_extract(event,'$.exit_status') from events where topic='/tasks/exit'";

#[test]
fn json_extract_reads_a_published_task_exit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_sqlite_config(dir.path(), "");
    let gw = Gateway::start_in(dir, &["--config", path_str(&config)]);
    let (ok, err) = publish_json(
        &gw.address(),
        "default",
        "/tasks/exit",
        "containerd.events.TaskExit",
        r#"{"container_id":"c1","exit_status":3}"#,
    );
    assert!(ok, "{err}");
    let conn = wait_rows(&gw.dir.path().join("data/audit.db"), 1);
    let status: i64 = conn
        .query_row(EXIT_QUERY, [], |r| r.get(0))
        .expect("json_extract");
    assert_eq!(status, 3);
}

/// The real binary with only the sqlite forwarder: every published event becomes one
/// row, in gateway order, and a clean shutdown leaves a complete database.
#[tokio::test(flavor = "multi_thread")]
async fn every_published_event_is_one_row_in_gateway_order() {
    const N: u32 = 500;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_sqlite_config(
        dir.path(),
        "synchronous = \"full\"\nbusy_timeout = \"2s\"\nbatch = { events = 64 }\n",
    );
    let mut gw = Gateway::start_in(dir, &["--config", path_str(&config)]);
    let mut client = gw.client().await;
    for i in 0..N {
        let event = Registry::global()
            .encode_json(
                "containerd.events.TaskExit",
                &format!(r#"{{"container_id":"c{i}","exit_status":{i}}}"#),
            )
            .expect("encode");
        let ns = if i % 2 == 0 { "default" } else { "k8s.io" };
        let mut request = tonic::Request::new(PublishRequest {
            topic: "/tasks/exit".into(),
            event: Some(event),
        });
        request
            .metadata_mut()
            .insert("containerd-namespace", ns.parse().expect("header"));
        client.publish(request).await.expect("publish");
    }
    let db = gw.dir.path().join("data/audit.db");
    let conn = tokio::task::spawn_blocking(move || wait_rows(&db, i64::from(N)))
        .await
        .expect("wait");

    let mut stmt = conn
        .prepare(
            "SELECT seq, namespace, json_extract(event, '$.container_id'),
                    json_extract(event, '$.exit_status'), timestamp, received_at, id
             FROM events ORDER BY seq",
        )
        .expect("prepare");
    let got: Vec<(i64, String, String, i64, String, String, String)> = stmt
        .query_map([], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
                r.get(6)?,
            ))
        })
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows");
    assert_eq!(got.len(), N as usize);
    let first_seq = got[0].0;
    for (i, row) in got.iter().enumerate() {
        assert_eq!(row.0, first_seq + i as i64, "consecutive seq");
        let ns = if i % 2 == 0 { "default" } else { "k8s.io" };
        assert_eq!(row.1, ns);
        assert_eq!(row.2, format!("c{i}"), "published order is seq order");
        assert_eq!(row.3, i as i64);
        for time in [&row.4, &row.5] {
            assert!(
                time.len() == 30 && time.ends_with('Z'),
                "RFC 3339 nanos: {time}"
            );
        }
    }
    let ids: std::collections::HashSet<&str> = got.iter().map(|r| r.6.as_str()).collect();
    assert_eq!(ids.len(), N as usize);
    let by_rowid: Vec<i64> = conn
        .prepare("SELECT seq FROM events ORDER BY row_id")
        .expect("prepare")
        .query_map([], |r| r.get(0))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows");
    assert!(
        by_rowid.windows(2).all(|w| w[0] < w[1]),
        "inserted in order"
    );
    drop(stmt);
    drop(conn);

    assert!(gw.terminate().success(), "{}", gw.stderr_text());
    let after = Connection::open(gw.dir.path().join("data/audit.db")).expect("reopen");
    assert_eq!(count(&after), i64::from(N));
}

/// seq restarts with the gateway; the store keeps both runs' rows (seq is not a key).
#[test]
fn a_restarted_gateway_appends_even_though_seq_starts_again() {
    let store_dir = tempfile::tempdir().expect("tempdir");
    let db = store_dir.path().join("audit.db");
    for run in 1..=2 {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("eventgate.toml");
        std::fs::write(
            &config,
            format!(
                "[[forwarder]]\nname = \"audit\"\nkind = \"sqlite\"\npath = {:?}\n",
                path_str(&db)
            ),
        )
        .expect("write config");
        let mut gw = Gateway::start_in(dir, &["--config", path_str(&config)]);
        let (ok, err) = publish_json(
            &gw.address(),
            "default",
            "/tasks/exit",
            "containerd.events.TaskExit",
            &format!(r#"{{"container_id":"run{run}"}}"#),
        );
        assert!(ok, "{err}");
        drop(wait_rows(&db, run));
        assert!(gw.terminate().success(), "{}", gw.stderr_text());
    }
    let conn = store::open_reader(&db, Duration::from_secs(1)).expect("reader");
    let got: Vec<(i64, String)> = conn
        .prepare("SELECT seq, json_extract(event, '$.container_id') FROM events ORDER BY row_id")
        .expect("prepare")
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows");
    assert_eq!(got.len(), 2);
    assert_eq!((got[0].1.as_str(), got[1].1.as_str()), ("run1", "run2"));
    assert_eq!(
        got[0].0, got[1].0,
        "both runs numbered their first event alike"
    );
}
