use rusqlite::Connection;

use super::*;
use crate::store::{EventRow, insert_rows, open_writer};
use crate::testing;

fn rows(n: usize) -> Vec<crate::event::Event> {
    (0..n)
        .map(|i| testing::event(i as u64 + 1).build())
        .collect()
}

fn insert(conn: &mut Connection, events: &[crate::event::Event]) {
    let rows: Vec<EventRow<'_>> = events.iter().map(EventRow::from_event).collect();
    insert_rows(conn, &rows).unwrap();
}

/// The leaves the rows give, recomputed from what is stored.
fn leaves(conn: &Connection) -> Vec<Hash> {
    let mut stmt = conn
        .prepare(&format!(
            "SELECT row_id, {} FROM events ORDER BY row_id",
            crate::store::chain::COLUMNS.join(", ")
        ))
        .unwrap();
    let mut rows = stmt.query([]).unwrap();
    let mut hasher = crate::store::chain::RowHasher::default();
    let mut out = Vec::new();
    while let Some(row) = rows.next().unwrap() {
        let values = crate::store::verify::values_at(row, 1).unwrap();
        out.push(crate::tlog::leaf_hash(&hasher.record(&values)));
    }
    out
}

fn memory_root(leaves: &[Hash]) -> Hash {
    let mut frontier = Frontier::default();
    let mut sink = Vec::new();
    for leaf in leaves {
        frontier.append(*leaf, &mut sink);
    }
    frontier.root()
}

#[test]
fn every_batch_extends_the_tree_over_its_rows() {
    let dir = tempfile::tempdir().unwrap();
    let mut conn = open_writer(&dir.path().join("audit.db"), &Default::default()).unwrap();
    let events = rows(400);
    // Batches of uneven sizes cross chunk boundaries (126 hashes) at odd places.
    let mut at = 0;
    for size in [1, 2, 61, 126, 127, 83] {
        insert(&mut conn, &events[at..at + size]);
        at += size;
        let state = state(&conn).unwrap().unwrap();
        assert_eq!(state.size, at as u64);
        let leaves = leaves(&conn);
        assert_eq!(root(&conn, state.size).unwrap(), memory_root(&leaves));
    }
    // A re-delivered row is no new leaf.
    insert(&mut conn, &events[..10]);
    assert_eq!(state(&conn).unwrap().unwrap().size, at as u64);
    // Storage stays near two hashes per leaf.
    let bytes: i64 = conn
        .query_row(
            "SELECT sum(length(hashes)) FROM audit_tree_hashes",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(
        bytes as u64,
        crate::tlog::stored::stored_hash_count(at as u64) * 32
    );
}

#[test]
fn a_store_without_a_tree_gains_it_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.db");
    let events = rows(300);
    {
        let mut conn = open_writer(&path, &Default::default()).unwrap();
        insert(&mut conn, &events);
        // What a store of schema version 13 holds: rows and no tree.
        conn.execute_batch("DELETE FROM audit_tree_hashes; UPDATE audit_tree SET size = 0;")
            .unwrap();
    }
    let mut shown = Vec::new();
    let mut conn = Connection::open(&path).unwrap();
    let added = catch_up(&mut conn, |done, total| shown.push((done, total))).unwrap();
    assert_eq!(added, 300);
    assert_eq!(shown.last(), Some(&(300, 300)));
    let state = state(&conn).unwrap().unwrap();
    assert_eq!(state.size, 300);
    assert_eq!(root(&conn, 300).unwrap(), memory_root(&leaves(&conn)));
    // Reopening adds nothing and the writer continues from it.
    drop(conn);
    let mut conn = open_writer(&path, &Default::default()).unwrap();
    insert(&mut conn, &rows(310)[300..]);
    assert_eq!(root(&conn, 310).unwrap(), memory_root(&leaves(&conn)));
}

#[test]
fn a_tree_behind_its_chain_stops_the_writer() {
    let dir = tempfile::tempdir().unwrap();
    let mut conn = open_writer(&dir.path().join("audit.db"), &Default::default()).unwrap();
    insert(&mut conn, &rows(5));
    conn.execute("UPDATE audit_tree SET size = 3", []).unwrap();
    let events = rows(6);
    let rows: Vec<EventRow<'_>> = events[5..].iter().map(EventRow::from_event).collect();
    let error = insert_rows(&mut conn, &rows).unwrap_err();
    assert!(
        error.to_string().contains("the tree ends at row_id 3"),
        "{error}"
    );
}
