//! Verification of hand-built stores: written by the real writer, then tampered
//! with in plain SQL, as someone with the file and the sqlite3 shell would.

use std::path::{Path, PathBuf};

use rusqlite::{Connection, params};
use tempfile::TempDir;

use super::*;
use crate::event::{Event, EventId, Source};
use crate::proto::Registry;
use crate::proto::containerd::types::Envelope;
use crate::store::{EventRow, WriterOptions, insert_rows, open_writer};

const T0: i64 = 1_714_557_600;

fn event(seq: u64) -> Event {
    let json = format!(r#"{{"container_id":"c{seq}","pid":{seq},"exit_status":1}}"#);
    let any = Registry::global()
        .encode_json("containerd.events.TaskExit", &json)
        .unwrap();
    Event::new(
        seq,
        EventId::generate(),
        Source::Publish,
        Envelope {
            timestamp: Some(prost_types::Timestamp {
                seconds: T0 + seq as i64,
                nanos: 0,
            }),
            namespace: "default".into(),
            topic: "/tasks/exit".into(),
            event: Some(any),
        },
    )
}

fn write(path: &Path, seqs: std::ops::RangeInclusive<u64>) -> Vec<Event> {
    let events: Vec<Event> = seqs.map(event).collect();
    let mut conn = open_writer(path, &WriterOptions::default()).unwrap();
    let rows: Vec<EventRow<'_>> = events.iter().map(EventRow::from_event).collect();
    insert_rows(&mut conn, &rows).unwrap();
    events
}

/// Ten events, seq 1..=10 at row_id 1..=10.
fn store() -> (TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.db");
    write(&path, 1..=10);
    (dir, path)
}

fn sql(path: &Path, statements: &str) {
    Connection::open(path)
        .unwrap()
        .execute_batch(statements)
        .unwrap();
}

fn intact(path: &Path) -> Report {
    let report = verify(path, &[]).unwrap();
    assert_eq!(report.problem, None, "{report:?}");
    report
}

fn problem(path: &Path) -> Problem {
    verify(path, &[]).unwrap().problem.expect("a problem")
}

fn assert_at(problem: &Problem, kind: Kind, row_id: i64, seq: i64) {
    assert_eq!(problem.kind, kind, "{problem}");
    let row = problem.row.as_ref().expect("a row");
    assert_eq!((row.row_id, row.seq), (row_id, Some(seq)), "{problem}");
    assert!(
        problem.to_string().contains(&format!("seq {seq}")),
        "{problem}"
    );
}

/// Retention as its contract says: deletes a prefix and moves the checkpoint in the
/// same transaction.
fn prune(path: &Path, up_to: i64) {
    let conn = Connection::open(path).unwrap();
    conn.execute(
        "UPDATE audit_chain SET pruned_row_id = ?1,
             pruned_seq = (SELECT seq FROM events WHERE row_id = ?1),
             pruned_timestamp = (SELECT timestamp FROM events WHERE row_id = ?1),
             pruned_hash = (SELECT hash FROM events WHERE row_id = ?1),
             pruned_rows = pruned_rows + (SELECT count(*) FROM events WHERE row_id <= ?1),
             pruned_at = '2024-06-01T00:00:00.000000000Z'
         WHERE id = 1;
         ",
        [up_to],
    )
    .unwrap();
    conn.execute("DELETE FROM events WHERE row_id <= ?1", [up_to])
        .unwrap();
}

/// What an attacker with the format at hand does after editing a row: recomputes
/// every hash from there on and the head, so the chain is consistent again.
fn rehash_from(path: &Path, from: i64) {
    let conn = Connection::open(path).unwrap();
    let mut prev: Hash = conn
        .query_row(
            "SELECT coalesce((SELECT hash FROM events WHERE row_id = ?1 - 1), zeroblob(32))",
            [from],
            |r| r.get(0),
        )
        .unwrap();
    let mut stmt = conn
        .prepare("SELECT row_id, seq, id, timestamp, received_at, namespace, topic, type_url, payload, event, source FROM events WHERE row_id >= ?1 ORDER BY row_id")
        .unwrap();
    let mut rows = stmt.query([from]).unwrap();
    let mut updates = Vec::new();
    while let Some(row) = rows.next().unwrap() {
        let values = super::values(row).unwrap();
        let hash = chain::row_hash(&prev, &values);
        updates.push((row.get::<_, i64>(0).unwrap(), prev, hash));
        prev = hash;
    }
    drop(rows);
    for (row_id, p, h) in updates {
        conn.execute(
            "UPDATE events SET prev_hash = ?2, hash = ?3 WHERE row_id = ?1",
            params![row_id, p, h],
        )
        .unwrap();
    }
    conn.execute("UPDATE audit_chain SET head_hash = ?1", [prev])
        .unwrap();
}

fn head_anchor(path: &Path) -> Anchor {
    let head = head(path).unwrap().unwrap();
    Anchor {
        row_id: head.state.head_row_id,
        hash: head.hash.unwrap(),
    }
}

#[test]
fn an_untouched_store_verifies_and_reports_its_head() {
    let (_dir, path) = store();
    let report = intact(&path);
    assert_eq!((report.verified, report.legacy), (10, 0));
    let head = report.head.unwrap();
    assert_eq!((head.row_id, head.seq), (10, Some(10)));
    assert_eq!(head.time.as_deref(), Some("2024-05-01T10:00:10.000000000Z"));
    let state = report.state.unwrap();
    assert_eq!((state.first_row_id, state.head_row_id), (1, 10));

    let empty = tempfile::tempdir().unwrap();
    let path = empty.path().join("audit.db");
    drop(open_writer(&path, &WriterOptions::default()).unwrap());
    let report = intact(&path);
    assert_eq!((report.verified, report.head), (0, None));
}

#[test]
fn a_store_verifies_after_pruning_and_after_pruning_everything() {
    let (_dir, path) = store();
    prune(&path, 4);
    let report = intact(&path);
    assert_eq!(report.verified, 6);
    assert_eq!(report.state.as_ref().unwrap().pruned_rows, 4);
    write(&path, 11..=12);
    assert_eq!(intact(&path).verified, 8);

    prune(&path, 12);
    assert_eq!(intact(&path).verified, 0);
    write(&path, 13..=14);
    let report = intact(&path);
    assert_eq!(report.verified, 2);
    assert_eq!(report.head.unwrap().row_id, 14);
}

#[test]
fn an_upgraded_schema_2_store_counts_its_legacy_rows_then_chains_new_ones() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.db");
    {
        let conn = Connection::open(&path).unwrap();
        conn.pragma_update(None, "application_id", crate::store::migrate::APPLICATION_ID)
            .unwrap();
        for migration in &crate::store::migrate::MIGRATIONS[..2] {
            conn.execute_batch(migration.sql).unwrap();
        }
        conn.pragma_update(None, "user_version", 2).unwrap();
        for i in 1..=3 {
            conn.execute(
                "INSERT INTO events (seq, id, received_at, namespace, topic) VALUES (?1, ?2, 't', 'default', '/x')",
                params![i, format!("old-{i}")],
            )
            .unwrap();
        }
    }
    write(&path, 4..=6);
    let report = intact(&path);
    assert_eq!((report.verified, report.legacy), (3, 3));
    assert_eq!(report.state.unwrap().first_row_id, 4);

    // Pruning legacy rows only: the checkpoint has no hash, the chain still starts
    // at zeros.
    prune(&path, 2);
    let report = intact(&path);
    assert_eq!((report.verified, report.legacy), (3, 1));
    prune(&path, 5);
    assert_eq!(intact(&path).verified, 1);

    // A legacy row edited is not detected (it has no hash), but moving the chain's
    // start over chained rows is.
    sql(&path, "UPDATE audit_chain SET first_row_id = 7");
    let found = problem(&path);
    assert_eq!(found.kind, Kind::ChainTable, "{found}");
}

#[test]
fn a_modified_column_is_reported_at_its_row() {
    for (column, value) in [
        ("event", r#"'{"container_id":"c5","pid":5,"exit_status":0}'"#),
        ("payload", "x'00'"),
        ("namespace", "'k8s.io'"),
        ("timestamp", "'2024-05-01T09:00:00.000000000Z'"),
        ("timestamp", "NULL"),
        ("payload", "CAST(payload AS TEXT)"),
    ] {
        let (_dir, path) = store();
        sql(&path, &format!("UPDATE events SET {column} = {value} WHERE seq = 5"));
        let found = problem(&path);
        assert_at(&found, Kind::Modified, 5, 5);
        assert!(found.what.contains("no longer matches"), "{found}");
    }
}

#[test]
fn a_row_deleted_in_the_middle_is_reported_between_its_neighbours() {
    let (_dir, path) = store();
    sql(&path, "DELETE FROM events WHERE row_id = 5");
    let found = problem(&path);
    assert_at(&found, Kind::Deleted, 6, 6);
    assert!(found.what.contains("between row_id 4 (seq 4"), "{found}");
    assert!(found.what.contains("(row_id 5: 1 row)"), "{found}");
}

#[test]
fn rows_deleted_at_the_start_or_the_end_are_reported() {
    let (_dir, path) = store();
    sql(&path, "DELETE FROM events WHERE row_id <= 2");
    let found = problem(&path);
    assert_at(&found, Kind::Deleted, 3, 3);
    assert!(found.what.contains("chain's start"), "{found}");
    assert!(found.what.contains("(row_id 1 to 2: 2 rows)"), "{found}");

    // The same after pruning: the first row must link to the checkpoint.
    let (_dir, path) = store();
    prune(&path, 3);
    sql(&path, "DELETE FROM events WHERE row_id = 4");
    let found = problem(&path);
    assert_at(&found, Kind::Deleted, 5, 5);
    assert!(found.what.contains("retention checkpoint"), "{found}");

    let (_dir, path) = store();
    sql(&path, "DELETE FROM events WHERE row_id >= 9");
    let found = problem(&path);
    assert_at(&found, Kind::Deleted, 8, 8);
    assert!(found.what.contains("row_id 10 (seq 10)"), "{found}");
}

/// Makes room at row_id 5 by moving rows 5.. up by one.
fn open_a_gap_at_5(path: &Path) {
    sql(
        path,
        "UPDATE events SET row_id = row_id + 1000 WHERE row_id >= 5;
         UPDATE events SET row_id = row_id - 999 WHERE row_id > 1000;",
    );
}

#[test]
fn an_inserted_row_is_reported_with_a_forged_or_a_computed_hash() {
    // Appended with the sqlite3 shell: no hash.
    let (_dir, path) = store();
    sql(
        &path,
        "INSERT INTO events (seq, id, received_at, namespace, topic) VALUES (99, 'x', 't', 'default', '/x')",
    );
    assert_at(&problem(&path), Kind::Inserted, 11, 99);

    // In the middle, with a made-up hash.
    let (_dir, path) = store();
    open_a_gap_at_5(&path);
    sql(
        &path,
        "INSERT INTO events SELECT 5, 77, 'forged', timestamp, received_at, namespace, topic, type_url, payload, event, source, prev_hash, randomblob(32) FROM events WHERE row_id = 6",
    );
    let found = problem(&path);
    assert_at(&found, Kind::Inserted, 5, 77);
    assert!(found.what.contains("does not match its content"), "{found}");

    // In the middle, its own hash computed right and linked to the row before.
    let (_dir, path) = store();
    open_a_gap_at_5(&path);
    let conn = Connection::open(&path).unwrap();
    let prev: Hash = conn
        .query_row("SELECT hash FROM events WHERE row_id = 4", [], |r| r.get(0))
        .unwrap();
    let values = [
        ValueRef::Integer(77),
        ValueRef::Text(b"forged"),
        ValueRef::Null,
        ValueRef::Text(b"t"),
        ValueRef::Text(b"default"),
        ValueRef::Text(b"/x"),
        ValueRef::Null,
        ValueRef::Null,
        ValueRef::Null,
        ValueRef::Text(b"publish"),
    ];
    conn.execute(
        "INSERT INTO events VALUES (5, 77, 'forged', NULL, 't', 'default', '/x', NULL, NULL, NULL, 'publish', ?1, ?2)",
        params![prev, chain::row_hash(&prev, &values)],
    )
    .unwrap();
    drop(conn);
    let found = problem(&path);
    assert_at(&found, Kind::Inserted, 5, 77);
    assert!(found.what.contains("both link to the same row"), "{found}");

    // Appended with a computed hash but without moving the recorded head.
    let (_dir, path) = store();
    sql(
        &path,
        "INSERT INTO events (seq, id, received_at, namespace, topic) VALUES (99, 'x', 't', 'default', '/x')",
    );
    rehash_from(&path, 11);
    sql(
        &path,
        "UPDATE audit_chain SET head_hash = (SELECT hash FROM events WHERE row_id = 10)",
    );
    assert_at(&problem(&path), Kind::Inserted, 11, 99);
}

#[test]
fn swapped_rows_and_a_changed_row_id_are_reported() {
    let (_dir, path) = store();
    sql(
        &path,
        "UPDATE events SET row_id = 100 WHERE row_id = 5;
         UPDATE events SET row_id = 5 WHERE row_id = 6;
         UPDATE events SET row_id = 6 WHERE row_id = 100;",
    );
    assert_at(&problem(&path), Kind::Reordered, 5, 6);

    let (_dir, path) = store();
    sql(&path, "UPDATE events SET row_id = 50 WHERE row_id = 10");
    assert_at(&problem(&path), Kind::Modified, 50, 10);
}

#[test]
fn a_tampered_chain_table_is_reported_as_such() {
    for statements in [
        "UPDATE audit_chain SET head_hash = randomblob(32)",
        "UPDATE audit_chain SET head_seq = 3",
        "UPDATE audit_chain SET head_hash = 'text'",
        "DELETE FROM audit_chain",
        "DROP TABLE audit_chain",
        "UPDATE audit_chain SET pruned_row_id = 12",
    ] {
        let (_dir, path) = store();
        sql(&path, statements);
        assert_eq!(problem(&path).kind, Kind::ChainTable, "{statements}");
    }
    // The recorded head moved back over intact rows.
    let (_dir, path) = store();
    sql(
        &path,
        "UPDATE audit_chain SET head_row_id = 9, head_seq = 9, head_hash = (SELECT hash FROM events WHERE row_id = 9)",
    );
    assert_at(&problem(&path), Kind::Inserted, 10, 10);
}

#[test]
fn only_an_anchor_catches_a_chain_recomputed_after_an_edit() {
    let (_dir, path) = store();
    let anchor = head_anchor(&path);
    let report = verify(&path, &[anchor]).unwrap();
    assert_eq!((report.problem, report.anchors), (None, vec![anchor]));

    sql(&path, "UPDATE events SET namespace = 'k8s.io' WHERE row_id = 3");
    rehash_from(&path, 3);
    intact(&path);
    let found = verify(&path, &[anchor]).unwrap().problem.unwrap();
    assert_at(&found, Kind::Rewritten, 10, 10);

    // Rows deleted at the end, the head moved back to match.
    let (_dir, path) = store();
    let anchor = head_anchor(&path);
    sql(
        &path,
        "DELETE FROM events WHERE row_id = 10;
         UPDATE audit_chain SET head_row_id = 9, head_seq = 9, head_hash = (SELECT hash FROM events WHERE row_id = 9)",
    );
    intact(&path);
    let found = verify(&path, &[anchor]).unwrap().problem.unwrap();
    assert_at(&found, Kind::Rewritten, 9, 9);

    // An anchor on the checkpoint is checked against it; one before it cannot be.
    let (_dir, path) = store();
    let hash_4: Hash = Connection::open(&path)
        .unwrap()
        .query_row("SELECT hash FROM events WHERE row_id = 4", [], |r| r.get(0))
        .unwrap();
    let at_4 = Anchor {
        row_id: 4,
        hash: hash_4,
    };
    prune(&path, 4);
    assert_eq!(verify(&path, &[at_4]).unwrap().anchors, [at_4]);
    let wrong = Anchor {
        row_id: 4,
        hash: chain::ZERO,
    };
    let found = verify(&path, &[wrong]).unwrap().problem.unwrap();
    assert_at(&found, Kind::Rewritten, 4, 4);
    prune(&path, 6);
    let error = verify(&path, &[at_4]).unwrap_err();
    assert!(error.to_string().contains("deleted by retention"), "{error}");
}

#[test]
fn redelivery_and_a_rolled_back_batch_leave_the_chain_intact() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.db");
    let events = write(&path, 1..=3);
    let mut conn = open_writer(&path, &WriterOptions::default()).unwrap();
    let before = head(&path).unwrap().unwrap();
    let again: Vec<EventRow<'_>> = events.iter().map(EventRow::from_event).collect();
    assert_eq!(insert_rows(&mut conn, &again).unwrap(), 0);
    let after = head(&path).unwrap().unwrap();
    assert_eq!(
        (after.state.head_row_id, after.hash),
        (before.state.head_row_id, before.hash)
    );

    // A batch refused at its third row (a seq SQLite cannot store) is rolled back,
    // chain head included.
    let mut batch: Vec<Event> = (4..=6).map(event).collect();
    batch[2].seq = u64::MAX;
    let rows: Vec<EventRow<'_>> = batch.iter().map(EventRow::from_event).collect();
    let error = insert_rows(&mut conn, &rows).unwrap_err();
    assert_eq!(error.row, Some(2));
    assert_eq!(head(&path).unwrap().unwrap().hash, before.hash);

    // Mixed: one known id, two new ones: only the new ones take row_ids.
    let fresh: Vec<Event> = (7..=8).map(event).collect();
    let mut mixed: Vec<EventRow<'_>> = vec![EventRow::from_event(&events[0])];
    mixed.extend(fresh.iter().map(EventRow::from_event));
    assert_eq!(insert_rows(&mut conn, &mixed).unwrap(), 2);
    let report = intact(&path);
    assert_eq!(report.verified, 5);
    assert_eq!(report.head.unwrap(), RowRef {
        row_id: 5,
        seq: Some(8),
        time: Some("2024-05-01T10:00:08.000000000Z".into())
    });
}

#[test]
fn verify_reads_while_a_writer_holds_its_transaction_open() {
    let (_dir, path) = store();
    let mut writer = open_writer(&path, &WriterOptions::default()).unwrap();
    let tx = writer
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .unwrap();
    tx.execute("UPDATE audit_chain SET head_seq = 999", []).unwrap();
    // The uncommitted change is invisible to the reader's snapshot.
    assert_eq!(intact(&path).verified, 10);
    drop(tx);
}
