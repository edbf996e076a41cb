//! Stores tampered with in plain SQL: each kind reported at the right row.

use rusqlite::types::ValueRef;
use rusqlite::{Connection, params};

use super::*;

#[test]
fn a_modified_column_is_reported_at_its_row() {
    for (column, value) in [
        (
            "event",
            r#"'{"container_id":"c5","pid":5,"exit_status":0}'"#,
        ),
        ("payload", "x'00'"),
        ("namespace", "'k8s.io'"),
        ("timestamp", "'2024-05-01T09:00:00.000000000Z'"),
        ("timestamp", "NULL"),
        ("payload", "CAST(payload AS TEXT)"),
        // A publisher given to a row that had none.
        ("publisher_uid", "0"),
        ("publisher_subject", "'CN=someone else'"),
        // A live row passed off as reconstructed, or given a clock.
        ("origin", "'reconciled'"),
        ("origin_clock", "'daemon'"),
        // A pod given to a row about no container's record.
        ("pod_name", "'web-7'"),
        ("labels", "'{}'"),
        // A live row given a witness or a reason.
        ("reconciled_from", "'cri'"),
        ("reason", "'OOMKilled'"),
    ] {
        let store = ten_events();
        let path = store.path().to_path_buf();
        sql(
            &path,
            &format!("UPDATE events SET {column} = {value} WHERE seq = 5"),
        );
        let found = problem(&path);
        assert_at(&found, Kind::Modified, 5, 5);
        assert!(found.what.contains("no longer matches"), "{found}");
    }
}

#[test]
fn a_row_deleted_in_the_middle_is_reported_between_its_neighbours() {
    let store = ten_events();
    let path = store.path().to_path_buf();
    sql(&path, "DELETE FROM events WHERE row_id = 5");
    let found = problem(&path);
    assert_at(&found, Kind::Deleted, 6, 6);
    assert!(found.what.contains("between row_id 4 (seq 4"), "{found}");
    assert!(found.what.contains("(row_id 5: 1 row)"), "{found}");
}

#[test]
fn rows_deleted_at_the_start_or_the_end_are_reported() {
    let store = ten_events();
    let path = store.path().to_path_buf();
    sql(&path, "DELETE FROM events WHERE row_id <= 2");
    let found = problem(&path);
    assert_at(&found, Kind::Deleted, 3, 3);
    assert!(found.what.contains("chain's start"), "{found}");
    assert!(found.what.contains("(row_id 1 to 2: 2 rows)"), "{found}");

    // The same after pruning: the first row must link to the checkpoint.
    let store = ten_events();
    let path = store.path().to_path_buf();
    prune(&path, 3);
    sql(&path, "DELETE FROM events WHERE row_id = 4");
    let found = problem(&path);
    assert_at(&found, Kind::Deleted, 5, 5);
    assert!(found.what.contains("retention checkpoint"), "{found}");

    let store = ten_events();
    let path = store.path().to_path_buf();
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
    let store = ten_events();
    let path = store.path().to_path_buf();
    sql(
        &path,
        "INSERT INTO events (seq, id, received_at, namespace, topic) VALUES (99, 'x', 't', 'default', '/x')",
    );
    assert_at(&problem(&path), Kind::Inserted, 11, 99);

    // In the middle, with a made-up hash.
    let store = ten_events();
    let path = store.path().to_path_buf();
    open_a_gap_at_5(&path);
    sql(
        &path,
        "INSERT INTO events (row_id, seq, id, timestamp, received_at, namespace, topic, type_url, payload, event, source, prev_hash, hash) \
         SELECT 5, 77, 'forged', timestamp, received_at, namespace, topic, type_url, payload, event, source, prev_hash, randomblob(32) FROM events WHERE row_id = 6",
    );
    let found = problem(&path);
    assert_at(&found, Kind::Inserted, 5, 77);
    assert!(found.what.contains("does not match its content"), "{found}");

    // In the middle, its own hash computed right and linked to the row before.
    let store = ten_events();
    let path = store.path().to_path_buf();
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
        ValueRef::Null,
        ValueRef::Null,
        ValueRef::Null,
        ValueRef::Null,
        ValueRef::Text(b"live"),
        ValueRef::Null,
        ValueRef::Null,
        ValueRef::Null,
        ValueRef::Null,
        ValueRef::Null,
        ValueRef::Null,
        ValueRef::Null,
        ValueRef::Null,
        ValueRef::Null,
        ValueRef::Null,
        ValueRef::Null,
        ValueRef::Null,
    ];
    conn.execute(
        "INSERT INTO events (row_id, seq, id, timestamp, received_at, namespace, topic, type_url, payload, event, source, prev_hash, hash) \
         VALUES (5, 77, 'forged', NULL, 't', 'default', '/x', NULL, NULL, NULL, 'publish', ?1, ?2)",
        params![prev, chain::row_hash(&prev, &values)],
    )
    .unwrap();
    drop(conn);
    let found = problem(&path);
    assert_at(&found, Kind::Inserted, 5, 77);
    assert!(found.what.contains("both link to the same row"), "{found}");

    // Appended with a computed hash but without moving the recorded head.
    let store = ten_events();
    let path = store.path().to_path_buf();
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
    let store = ten_events();
    let path = store.path().to_path_buf();
    sql(
        &path,
        "UPDATE events SET row_id = 100 WHERE row_id = 5;
         UPDATE events SET row_id = 5 WHERE row_id = 6;
         UPDATE events SET row_id = 6 WHERE row_id = 100;",
    );
    assert_at(&problem(&path), Kind::Reordered, 5, 6);

    let store = ten_events();
    let path = store.path().to_path_buf();
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
        let store = ten_events();
        let path = store.path().to_path_buf();
        sql(&path, statements);
        assert_eq!(problem(&path).kind, Kind::ChainTable, "{statements}");
    }
    // The recorded head moved back over intact rows.
    let store = ten_events();
    let path = store.path().to_path_buf();
    sql(
        &path,
        "UPDATE audit_chain SET head_row_id = 9, head_seq = 9, head_hash = (SELECT hash FROM events WHERE row_id = 9)",
    );
    assert_at(&problem(&path), Kind::Inserted, 10, 10);
}

#[test]
fn only_an_anchor_catches_a_chain_recomputed_after_an_edit() {
    let store = ten_events();
    let path = store.path().to_path_buf();
    let anchor = head_anchor(&path);
    let report = verify(&path, &[anchor]).unwrap();
    assert_eq!((report.problem, report.anchors), (None, vec![anchor]));

    sql(
        &path,
        "UPDATE events SET namespace = 'k8s.io' WHERE row_id = 3",
    );
    rehash_from(&path, 3);
    intact(&path);
    let found = verify(&path, &[anchor]).unwrap().problem.unwrap();
    assert_at(&found, Kind::Rewritten, 10, 10);

    // Rows deleted at the end, the head moved back to match.
    let store = ten_events();
    let path = store.path().to_path_buf();
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
    let store = ten_events();
    let path = store.path().to_path_buf();
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
    assert!(
        error.to_string().contains("deleted by retention"),
        "{error}"
    );
}

/// Hashes wiped and the chain's start moved past every row: verify alone sees an
/// upgraded store of legacy rows; an anchor recorded earlier does not.
#[test]
fn unchaining_every_row_is_caught_by_an_anchor() {
    let store = ten_events();
    let path = store.path().to_path_buf();
    let anchor = head_anchor(&path);
    sql(
        &path,
        "UPDATE events SET prev_hash = NULL, hash = NULL, event = NULL WHERE row_id = 3;
         UPDATE events SET prev_hash = NULL, hash = NULL;
         UPDATE audit_chain SET first_row_id = 11, head_seq = NULL, head_hash = NULL",
    );
    assert_eq!(intact(&path).legacy, 10);
    let found = verify(&path, &[anchor]).unwrap().problem.unwrap();
    assert_at(&found, Kind::Rewritten, 10, 10);
    assert!(found.what.contains("start was moved"), "{found}");
}
