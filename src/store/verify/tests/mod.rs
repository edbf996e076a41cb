//! Verification of hand-built stores: written by the real writer, then tampered
//! with in plain SQL, as someone with the file and the sqlite3 shell would.

mod intact;
mod node;
mod origin;
mod reconciled;
mod signed_checkpoints;
mod tampered;
mod tree_heads;
mod workload;

use std::path::Path;

use rusqlite::types::ValueRef;
use rusqlite::{Connection, params};

pub use super::*;
use crate::event::Event;
use crate::store::{EventRow, insert_rows};
use crate::testing::{self, T0, TempStore};

/// Event `seq`: an exit of container `c{seq}`, `seq` seconds after [`T0`].
fn event(seq: u64) -> Event {
    let json = format!(r#"{{"container_id":"c{seq}","pid":{seq},"exit_status":1}}"#);
    testing::event(seq)
        .at(T0 + seq as i64)
        .json("containerd.events.TaskExit", &json)
        .build()
}

/// Writes events `seqs` with the store's own writer to the store at `path`.
fn write(path: &Path, seqs: std::ops::RangeInclusive<u64>) -> Vec<Event> {
    let events: Vec<Event> = seqs.map(event).collect();
    testing::insert(path, &events);
    events
}

/// Ten events, seq 1..=10 at row_id 1..=10.
fn ten_events() -> TempStore {
    let store = TempStore::new();
    write(store.path(), 1..=10);
    store
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
                  publisher_uid, publisher_gid, publisher_pid, publisher_subject, origin, origin_clock, \
                  pod_name, pod_namespace, pod_uid, container_name, container_kind, image, labels, node, node_seq, reconciled_from, reason FROM events WHERE row_id >= ?1 ORDER BY row_id")
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
        row_id: head.row.unwrap().row_id,
        hash: head.hash.unwrap(),
    }
}

/// A store as a binary that knew only the first `version` migrations left it.
pub(super) fn store_at_version(path: &std::path::Path, version: usize) -> Connection {
    let conn = Connection::open(path).unwrap();
    conn.pragma_update(
        None,
        "application_id",
        crate::store::migrate::APPLICATION_ID,
    )
    .unwrap();
    for migration in &crate::store::migrate::MIGRATIONS[..version] {
        conn.execute_batch(migration.sql).unwrap();
    }
    conn.pragma_update(None, "user_version", version as i64)
        .unwrap();
    conn
}

/// A row's hash computed here on its own from the values an earlier writer hashed
/// (the ten columns for schema 3 and 4, the fourteen of a row with a publisher for
/// schema 5), as `migrations/README.md` documents the encoding.
fn hand_hash(prev: &chain::Hash, values: &[ValueRef<'_>]) -> chain::Hash {
    use sha2::{Digest, Sha256};
    let mut bytes = chain::DOMAIN.to_vec();
    bytes.extend_from_slice(prev);
    for value in values {
        match *value {
            ValueRef::Null => bytes.push(0),
            ValueRef::Integer(i) => {
                bytes.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0, 8]);
                bytes.extend_from_slice(&i.to_be_bytes());
            }
            ValueRef::Text(b) | ValueRef::Blob(b) => {
                bytes.push(if matches!(value, ValueRef::Text(_)) {
                    3
                } else {
                    4
                });
                bytes.extend_from_slice(&(b.len() as u64).to_be_bytes());
                bytes.extend_from_slice(b);
            }
            ValueRef::Real(_) => unreachable!("the writer stores no REAL"),
        }
    }
    Sha256::digest(&bytes).into()
}
