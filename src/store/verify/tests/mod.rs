//! Verification of hand-built stores: written by the real writer, then tampered
//! with in plain SQL, as someone with the file and the sqlite3 shell would.

mod intact;
mod tampered;

use std::path::{Path, PathBuf};

use rusqlite::{Connection, params};
use tempfile::TempDir;

pub use super::*;
use crate::event::Event;
use crate::store::{EventRow, WriterOptions, insert_rows, open_writer};

const T0: i64 = 1_714_557_600;

fn event(seq: u64) -> Event {
    let json = format!(r#"{{"container_id":"c{seq}","pid":{seq},"exit_status":1}}"#);
    crate::event::sample(
        seq,
        T0 + seq as i64,
        "/tasks/exit",
        "containerd.events.TaskExit",
        &json,
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
        .prepare("SELECT row_id, seq, id, timestamp, received_at, namespace, topic, type_url, payload, event, source, \
                  publisher_uid, publisher_gid, publisher_pid, publisher_subject FROM events WHERE row_id >= ?1 ORDER BY row_id")
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
