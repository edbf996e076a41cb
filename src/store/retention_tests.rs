use std::time::{Duration, SystemTime};

use rusqlite::Connection;

use super::*;
use crate::event::Event;
use crate::store::{EventRow, insert_rows};
use crate::testing::{self, T0, TempStore};

const HOUR: Duration = Duration::from_secs(3600);

/// Stores one event per entry of `ages`, received that long before `now`: OOMs of
/// containers whose ids are padded with `padding` bytes.
fn store(conn: &mut Connection, now: SystemTime, ages: &[Duration], padding: usize) {
    let events: Vec<Event> = (1..=ages.len() as u64)
        .map(|seq| {
            let json = format!(r#"{{"container_id":"c{seq}{}"}}"#, "x".repeat(padding));
            testing::event(seq)
                .at(T0 + seq as i64)
                .topic("/tasks/oom")
                .json("containerd.events.TaskOOM", &json)
                .build()
        })
        .collect();
    let rows: Vec<EventRow<'_>> = events
        .iter()
        .zip(ages)
        .map(|(e, age)| EventRow {
            received_at: rfc3339_nanos(&prost_types::Timestamp::from(now - *age)),
            ..EventRow::from_event(e)
        })
        .collect();
    insert_rows(conn, &rows).unwrap();
}

fn seqs(conn: &Connection) -> Vec<i64> {
    conn.prepare("SELECT seq FROM events ORDER BY row_id")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

fn stored_hash(conn: &Connection, seq: i64) -> Option<Vec<u8>> {
    conn.query_row("SELECT hash FROM events WHERE seq = ?1", [seq], |r| {
        r.get(0)
    })
    .unwrap()
}

type ChainRow = (i64, Option<i64>, Option<Vec<u8>>, i64, Option<String>);

fn checkpoint(conn: &Connection) -> ChainRow {
    conn.query_row(
        "SELECT pruned_row_id, pruned_seq, pruned_hash, pruned_rows, pruned_at FROM audit_chain",
        [],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
    )
    .unwrap()
}

/// Runs steps until the policy holds, as the forwarder's rounds do.
fn prune(conn: &mut Connection, policy: &Policy, now: SystemTime, limit: usize) -> Vec<u64> {
    let mut stored = count_rows(conn).unwrap();
    let mut steps = Vec::new();
    loop {
        let step = prune_step(conn, policy, stored, now, limit).unwrap();
        stored -= step.deleted;
        steps.push(step.deleted);
        if step.deleted < limit as u64 {
            return steps;
        }
    }
}

#[test]
fn max_rows_keeps_the_newest_rows_in_small_steps_and_moves_the_checkpoint() {
    let audit = TempStore::new();
    let mut conn = audit.writer();
    let now = SystemTime::now();
    store(&mut conn, now, &[Duration::ZERO; 10], 0);
    let hash_of_6 = stored_hash(&conn, 6);

    let policy = Policy {
        max_age: None,
        max_rows: Some(4),
    };
    assert_eq!(prune(&mut conn, &policy, now, 4), [4, 2]);
    assert_eq!(seqs(&conn), [7, 8, 9, 10]);
    let (row_id, seq, hash, pruned, at) = checkpoint(&conn);
    assert_eq!((row_id, seq, pruned), (6, Some(6), 6));
    assert_eq!(
        hash, hash_of_6,
        "the checkpoint keeps the last pruned row's hash"
    );
    assert!(at.is_some());

    // Within the policy now: a step changes nothing.
    assert_eq!(prune(&mut conn, &policy, now, 4), [0]);
    assert_eq!(checkpoint(&conn).3, 6);
}

#[test]
fn max_age_deletes_only_the_old_front_and_stops_at_the_first_young_row() {
    let audit = TempStore::new();
    let mut conn = audit.writer();
    let now = SystemTime::now();
    // Row 4 is old again (a clock stepped back when it was received): the front
    // stops at row 3, so the remaining rows stay one contiguous stretch.
    let ages = [48 * HOUR, 30 * HOUR, HOUR, 30 * HOUR, Duration::ZERO];
    store(&mut conn, now, &ages, 0);
    let policy = Policy {
        max_age: Some(24 * HOUR),
        max_rows: None,
    };
    assert_eq!(prune(&mut conn, &policy, now, 100), [2]);
    assert_eq!(seqs(&conn), [3, 4, 5]);
    assert_eq!(checkpoint(&conn).1, Some(2));
}

#[test]
fn both_limits_delete_what_either_one_says() {
    let audit = TempStore::new();
    let mut conn = audit.writer();
    let now = SystemTime::now();
    let ages = [3 * HOUR, 2 * HOUR, HOUR, Duration::ZERO, Duration::ZERO];
    store(&mut conn, now, &ages, 0);
    // Age alone would delete 1; count alone 2: together 2, and then 3 once age
    // catches up.
    let mut policy = Policy {
        max_age: Some(150 * 60 * Duration::from_secs(1)),
        max_rows: Some(3),
    };
    prune(&mut conn, &policy, now, 10);
    assert_eq!(seqs(&conn), [3, 4, 5]);
    policy.max_age = Some(HOUR / 2);
    prune(&mut conn, &policy, now, 10);
    assert_eq!(seqs(&conn), [4, 5]);
    assert_eq!(checkpoint(&conn).3, 3);
}

#[test]
fn inserts_after_pruning_everything_keep_increasing_row_ids() {
    let audit = TempStore::new();
    let mut conn = audit.writer();
    let now = SystemTime::now();
    store(&mut conn, now, &[2 * HOUR; 3], 0);
    let policy = Policy {
        max_age: Some(HOUR),
        max_rows: None,
    };
    prune(&mut conn, &policy, now, 10);
    assert!(seqs(&conn).is_empty());
    store(&mut conn, now, &[Duration::ZERO], 0);
    let row_id: i64 = conn
        .query_row("SELECT row_id FROM events", [], |r| r.get(0))
        .unwrap();
    assert!(
        row_id > checkpoint(&conn).0,
        "row {row_id} would sit inside the pruned range"
    );
}

#[test]
fn a_new_store_gives_pruned_pages_back_and_the_file_shrinks() {
    let audit = TempStore::new();
    let path = audit.path().to_path_buf();
    let mut conn = audit.writer();
    assert!(shrinks(&conn).unwrap());
    let now = SystemTime::now();
    store(&mut conn, now, &[2 * HOUR; 2000], 2000);
    checkpoint_wal(&conn).unwrap();
    let before = std::fs::metadata(&path).unwrap().len();

    let policy = Policy {
        max_age: Some(HOUR),
        max_rows: None,
    };
    prune(&mut conn, &policy, now, 500);
    let mut freed = 0;
    loop {
        let pages = vacuum_step(&conn, 100).unwrap();
        if pages == 0 {
            break;
        }
        freed += pages;
    }
    assert!(freed > 0);
    assert_eq!(free_pages(&conn).unwrap(), 0);
    checkpoint_wal(&conn).unwrap();
    let after = std::fs::metadata(&path).unwrap().len();
    assert!(
        after * 4 < before,
        "the file went from {before} to {after} bytes"
    );
}

#[test]
fn a_store_created_without_incremental_vacuum_says_it_cannot_shrink() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.db");
    // Created by an older eventgate: any table makes the mode fixed at NONE.
    Connection::open(&path)
        .unwrap()
        .execute_batch("CREATE TABLE t (x)")
        .unwrap();
    let conn = Connection::open(&path).unwrap();
    assert!(!shrinks(&conn).unwrap());
}

/// Verification after real pruning: the first remaining row links to the checkpoint,
/// and deleting past it by hand is still caught.
#[test]
fn the_chain_verifies_after_pruning_and_a_deletion_beyond_it_is_caught() {
    use crate::store::verify;
    let audit = TempStore::new();
    let path = audit.path().to_path_buf();
    let mut conn = audit.writer();
    let now = SystemTime::now();
    store(&mut conn, now, &[Duration::ZERO; 20], 0);
    let policy = Policy {
        max_age: None,
        max_rows: Some(12),
    };
    assert_eq!(prune(&mut conn, &policy, now, 3), [3, 3, 2]);
    // More rows after pruning, chained onto the same head.
    store(&mut conn, now, &[Duration::ZERO; 5], 0);

    let report = verify::verify(&path, &[]).unwrap();
    assert!(report.problem.is_none(), "{:?}", report.problem);
    assert_eq!(report.verified, 17);

    // Deleting the first remaining row without moving the checkpoint is tampering.
    conn.execute("DELETE FROM events WHERE row_id = 9", [])
        .unwrap();
    let report = verify::verify(&path, &[]).unwrap();
    let problem = report.problem.expect("the deletion is found");
    assert!(problem.to_string().contains("deleted"), "{problem}");
}
