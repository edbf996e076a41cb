use std::time::Duration;

use rusqlite::Connection;

use super::migrate::{APPLICATION_ID, LATEST};
use super::*;
use crate::event::Source;
use crate::forward::ErrorKind;
use crate::forward::sqlite::classify;
use crate::testing::{self, T0, TempStore};

/// `json` as `type_name` on `topic`, published at a time with nanoseconds.
fn event(seq: u64, topic: &str, type_name: &str, json: &str) -> Event {
    testing::event(seq)
        .at_nanos(T0, 5)
        .topic(topic)
        .json(type_name, json)
        .build()
}

fn count(conn: &Connection) -> i64 {
    conn.query_row("SELECT count(*) FROM events", [], |r| r.get(0))
        .unwrap()
}

fn pragma(conn: &Connection, name: &str) -> i64 {
    conn.pragma_query_value(None, name, |r| r.get(0)).unwrap()
}

#[test]
fn a_new_file_gets_the_schema_in_wal_mode_and_reopening_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested/dirs/audit.db");
    let conn = open_writer(&path, &WriterOptions::default()).unwrap();
    assert_eq!(pragma(&conn, "user_version"), LATEST);
    assert_eq!(pragma(&conn, "application_id"), i64::from(APPLICATION_ID));
    let mode: String = conn
        .pragma_query_value(None, "journal_mode", |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    assert_eq!(pragma(&conn, "synchronous"), 1, "NORMAL");
    let indexes: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'events' ORDER BY name")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        indexes,
        [
            "events_namespace_row",
            "events_namespace_timestamp",
            "events_node",
            "events_pod",
            "events_reconciled",
            "events_seq",
            "events_timestamp",
            "events_topic_row",
            "events_topic_timestamp",
            "sqlite_autoindex_events_1",
        ]
    );
    let schema = |conn: &Connection| -> Vec<String> {
        conn.prepare("SELECT sql FROM sqlite_master ORDER BY name")
            .unwrap()
            .query_map([], |r| r.get::<_, Option<String>>(0))
            .unwrap()
            .map(|s| s.unwrap().unwrap_or_default())
            .collect()
    };
    let before = schema(&conn);
    drop(conn);

    let full = WriterOptions {
        synchronous: Synchronous::Full,
        ..WriterOptions::default()
    };
    let again = open_writer(&path, &full).unwrap();
    assert_eq!(schema(&again), before);
    assert_eq!(pragma(&again, "user_version"), LATEST);
    assert_eq!(pragma(&again, "synchronous"), 2, "FULL");
    drop(again);
    open_reader(&path, Duration::from_secs(1)).unwrap();
}

#[test]
fn a_newer_schema_is_refused_naming_both_versions() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.db");
    let conn = open_writer(&path, &WriterOptions::default()).unwrap();
    conn.pragma_update(None, "user_version", LATEST + 5)
        .unwrap();
    drop(conn);
    for error in [
        open_writer(&path, &WriterOptions::default()).unwrap_err(),
        open_reader(&path, Duration::from_secs(1)).unwrap_err(),
    ] {
        assert!(matches!(error, StoreError::TooNew { .. }), "{error:?}");
        let message = error.to_string();
        assert!(
            message.contains(&format!("version {}", LATEST + 5))
                && message.contains(&format!("up to version {LATEST}"))
                && message.contains("audit.db"),
            "{message}"
        );
    }
}

#[test]
fn a_garbage_file_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.db");
    let garbage =
        b"this is a text file, not a database; it is long enough to hold a header".repeat(20);
    std::fs::write(&path, &garbage).unwrap();
    let error = open_writer(&path, &WriterOptions::default()).unwrap_err();
    assert!(
        matches!(error, StoreError::NotADatabase { .. }),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("is not a SQLite database"),
        "{error}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), garbage);
    assert!(open_reader(&path, Duration::from_secs(1)).is_err());
}

#[test]
fn another_applications_database_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("other.db");
    let other = Connection::open(&path).unwrap();
    other
        .execute_batch("CREATE TABLE accounts (id INTEGER PRIMARY KEY, name TEXT);")
        .unwrap();
    drop(other);
    let before = std::fs::read(&path).unwrap();
    let error = open_writer(&path, &WriterOptions::default()).unwrap_err();
    assert!(matches!(error, StoreError::Foreign { .. }), "{error:?}");
    assert!(error.to_string().contains("another application"), "{error}");
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "not even WAL mode set"
    );

    // Same with an application id of its own and no tables.
    let path = dir.path().join("stamped.db");
    let other = Connection::open(&path).unwrap();
    other.pragma_update(None, "application_id", 42).unwrap();
    drop(other);
    let error = open_writer(&path, &WriterOptions::default()).unwrap_err();
    assert!(error.to_string().contains("application_id 0x2a"), "{error}");
}

#[test]
fn readers_do_not_create_or_migrate() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.db");
    assert!(open_reader(&missing, Duration::from_secs(1)).is_err());
    assert!(!missing.exists());

    let empty = dir.path().join("empty.db");
    Connection::open(&empty).unwrap();
    let error = open_reader(&empty, Duration::from_secs(1)).unwrap_err();
    assert!(
        matches!(error, StoreError::TooOld { found: 0, .. }),
        "{error:?}"
    );
}

#[test]
fn a_parent_that_is_a_file_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("file"), b"").unwrap();
    let error =
        open_writer(&dir.path().join("file/audit.db"), &WriterOptions::default()).unwrap_err();
    assert!(matches!(error, StoreError::CreateDir { .. }), "{error:?}");
    assert!(
        error.to_string().contains("cannot create the directory"),
        "{error}"
    );
}

#[test]
fn rows_carry_the_envelope_and_the_decoded_event() {
    let exit = event(
        7,
        "/tasks/exit",
        "containerd.events.TaskExit",
        r#"{"container_id":"c1","exit_status":3}"#,
    );
    let row = EventRow::from_event(&exit);
    assert_eq!(row.seq, 7);
    assert_eq!(row.source, "publish");
    assert_eq!(row.id, exit.identity.id.to_string());
    assert_eq!(
        row.timestamp.as_deref(),
        Some("2024-05-01T10:00:00.000000005Z")
    );
    assert_eq!(row.received_at.len(), row.timestamp.as_ref().unwrap().len());
    assert_eq!(row.type_url, Some("containerd.events.TaskExit"));
    let json: serde_json::Value = serde_json::from_str(row.event.unwrap()).unwrap();
    assert_eq!(json["exit_status"], 3);
    assert_eq!(
        json["pid"], 0,
        "defaults are present, as in the file forwarder"
    );

    let mut unknown = event(8, "/x", "containerd.events.TaskExit", "{}");
    unknown.envelope.event = Some(prost_types::Any {
        type_url: "example.com/Custom".into(),
        value: vec![1, 2, 3],
    });
    let row = EventRow::from_event(&unknown);
    assert_eq!(row.event, None);
    assert_eq!(row.payload, Some(&[1u8, 2, 3][..]));

    unknown.envelope.event = None;
    unknown.envelope.timestamp = None;
    let row = EventRow::from_event(&unknown);
    assert_eq!(
        (row.type_url, row.payload, row.timestamp),
        (None, None, None)
    );
}

#[test]
fn a_version_1_store_is_upgraded_in_place_keeping_its_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.db");
    {
        // A store as the first release wrote it, with one row.
        let conn = Connection::open(&path).unwrap();
        conn.pragma_update(None, "application_id", APPLICATION_ID)
            .unwrap();
        conn.execute_batch(super::migrate::MIGRATIONS[0].sql)
            .unwrap();
        conn.pragma_update(None, "user_version", 1).unwrap();
        conn.execute(
            "INSERT INTO events (seq, id, received_at, namespace, topic) VALUES (1, 'old', 't', 'default', '/x')",
            [],
        )
        .unwrap();
    }
    let mut conn = open_writer(&path, &WriterOptions::default()).unwrap();
    assert_eq!(pragma(&conn, "user_version"), LATEST);
    let mut upstream = event(2, "/tasks/exit", "containerd.events.TaskExit", "{}");
    upstream.identity.source = Source::Upstream("node".into());
    insert_rows(&mut conn, &[EventRow::from_event(&upstream)]).unwrap();
    let sources: Vec<(String, Option<String>)> = conn
        .prepare("SELECT id, source FROM events ORDER BY row_id")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        sources,
        [
            ("old".to_owned(), None),
            (
                upstream.identity.id.to_string(),
                Some("upstream:node".to_owned())
            )
        ]
    );
}

#[test]
fn insert_skips_known_ids_and_raw_insert_writes_the_same_rows() {
    let store = TempStore::new();
    let mut conn = store.writer();
    // Rows with and without a workload, mixed in one batch (the writer has a
    // statement for each).
    let events: Vec<Event> = (1..=4)
        .map(|seq| {
            let event = event(
                seq,
                "/tasks/oom",
                "containerd.events.TaskOOM",
                r#"{"container_id":"c"}"#,
            );
            let workload = crate::event::Workload {
                pod_name: Some(format!("web-{seq}")),
                labels: [("app".to_owned(), "web".to_owned())].into(),
                ..Default::default()
            };
            event.with_workload((seq % 2 == 0).then(|| std::sync::Arc::new(workload)))
        })
        .collect();
    let rows: Vec<EventRow<'_>> = events.iter().map(EventRow::from_event).collect();
    assert_eq!(insert_rows(&mut conn, &rows).unwrap(), 4);
    assert_eq!(insert_rows(&mut conn, &rows).unwrap(), 0);
    assert_eq!(count(&conn), 4);

    let raw_store = TempStore::new();
    let mut raw = raw_store.writer();
    raw_insert_rows(&mut raw, &rows).unwrap();
    type Dump = (
        i64,
        String,
        String,
        Vec<u8>,
        String,
        Option<String>,
        Option<String>,
    );
    let dump = |conn: &Connection| -> Vec<Dump> {
        conn.prepare(
            "SELECT seq, id, timestamp, payload, event, pod_name, labels FROM events ORDER BY row_id",
        )
        .unwrap()
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
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
    };
    let stored = dump(&conn);
    assert_eq!(stored, dump(&raw));
    let pods: Vec<Option<&str>> = stored.iter().map(|d| d.5.as_deref()).collect();
    assert_eq!(pods, [None, Some("web-2"), None, Some("web-4")]);
    assert_eq!(stored[1].6.as_deref(), Some(r#"{"app":"web"}"#));
}

/// SQLITE_FULL, made real with a page limit: the batch is rolled back, the error is
/// retryable, and once there is room the same rows go in.
#[test]
fn a_full_disk_is_retryable_and_leaves_nothing_half_written() {
    let store = TempStore::new();
    let mut conn = store.writer();
    let big = format!(r#"{{"container_id":"{}"}}"#, "x".repeat(64 * 1024));
    let events: Vec<Event> = (1..=20)
        .map(|seq| event(seq, "/tasks/oom", "containerd.events.TaskOOM", &big))
        .collect();
    let rows: Vec<EventRow<'_>> = events.iter().map(EventRow::from_event).collect();
    let pages = pragma(&conn, "page_count");
    conn.pragma_update(None, "max_page_count", pages + 8)
        .unwrap();

    let error = insert_rows(&mut conn, &rows).unwrap_err();
    assert_eq!(error.source.sqlite_error_code(), Some(ErrorCode::DiskFull));
    assert_eq!(classify(&error.source), ErrorKind::Retryable);
    assert!(
        conn.is_autocommit(),
        "the failed transaction was rolled back"
    );
    assert_eq!(count(&conn), 0);

    conn.pragma_update(None, "max_page_count", 1_000_000)
        .unwrap();
    assert_eq!(insert_rows(&mut conn, &rows).unwrap(), 20);
}

/// A row added by hand where the writer's next row goes: the batch fails with a
/// message naming the cause, retryably (the events stay queued), and nothing of it
/// is kept.
#[test]
fn a_row_added_at_the_next_row_id_stops_the_writer_with_a_clear_retryable_error() {
    let store = TempStore::new();
    let mut conn = store.writer();
    let first = event(1, "/tasks/oom", "containerd.events.TaskOOM", "{}");
    insert_rows(&mut conn, &[EventRow::from_event(&first)]).unwrap();
    conn.execute(
        "INSERT INTO events (seq, id, received_at, namespace, topic) VALUES (9, 'x', 't', 'default', '/x')",
        [],
    )
    .unwrap();
    let second = event(2, "/tasks/oom", "containerd.events.TaskOOM", "{}");
    let error = insert_rows(&mut conn, &[EventRow::from_event(&second)]).unwrap_err();
    assert_eq!(error.row, Some(0));
    assert_eq!(classify(&error.source), ErrorKind::Retryable);
    let message = error.to_string();
    assert!(
        message.contains("row_id 2") && message.contains("eventgate audit verify"),
        "{message}"
    );
    assert_eq!(count(&conn), 2);

    conn.execute("DELETE FROM audit_chain", []).unwrap();
    let error = insert_rows(&mut conn, &[EventRow::from_event(&second)]).unwrap_err();
    assert_eq!(classify(&error.source), ErrorKind::Retryable);
    assert!(error.to_string().contains("lost its row"), "{error}");
}
