//! Stores that must verify: untouched, pruned, upgraded, re-delivered to, rolled
//! back, read while written.

use rusqlite::Connection;
use rusqlite::params;

use super::*;

#[test]
fn an_untouched_store_verifies_and_reports_its_head() {
    let store = ten_events();
    let path = store.path().to_path_buf();
    let report = intact(&path);
    assert_eq!((report.verified, report.legacy), (10, 0));
    let head = report.head.unwrap();
    assert_eq!((head.row_id, head.seq), (10, Some(10)));
    assert_eq!(head.time.as_deref(), Some("2024-05-01T10:00:10.000000000Z"));
    let state = report.state.unwrap();
    assert_eq!((state.first_row_id, state.head_row_id), (1, 10));

    let empty = TempStore::new();
    let path = empty.path().to_path_buf();
    drop(empty.writer());
    let report = intact(&path);
    assert_eq!((report.verified, report.head), (0, None));
}

#[test]
fn a_store_verifies_after_pruning_and_after_pruning_everything() {
    let store = ten_events();
    let path = store.path().to_path_buf();
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
    let store = TempStore::new();
    let path = store.path().to_path_buf();
    {
        let conn = store_at_version(&path, 2);
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
fn a_schema_4_chain_keeps_verifying_and_rows_with_publishers_join_it() {
    use crate::publisher::Publisher;
    let store = TempStore::new();
    let path = store.path().to_path_buf();
    {
        // A store as version 4 left it: chained rows without publisher columns.
        let conn = store_at_version(&path, 4);
        let mut prev = chain::ZERO;
        for seq in 1..=3 {
            let event = event(seq);
            let row = EventRow::from_event(&event);
            let hash = hand_hash(&prev, &chain::values(seq as i64, &row)[..10]);
            conn.execute(
                "INSERT INTO events (row_id, seq, id, timestamp, received_at, namespace, topic, type_url, payload, event, source, prev_hash, hash) \
                 VALUES (?1, ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
                params![seq as i64, row.id, row.timestamp, row.received_at, row.namespace, row.topic, row.type_url, row.payload, row.event, row.source, prev, hash],
            )
            .unwrap();
            conn.execute(
                "UPDATE audit_chain SET head_row_id = ?1, head_seq = ?1, head_hash = ?2",
                params![seq as i64, hash],
            )
            .unwrap();
            prev = hash;
        }
    }
    // The writer migrates to version 5 and goes on with rows that have publishers.
    let events = [
        event(4).with_publisher(Some(Publisher::Process {
            uid: 1000,
            gid: 100,
            pid: Some(4242),
        })),
        event(5).with_publisher(Some(Publisher::Certificate {
            subject: "CN=node-7,O=Acme".into(),
        })),
        event(6),
    ];
    let mut conn = store.writer();
    let rows: Vec<EventRow<'_>> = events.iter().map(EventRow::from_event).collect();
    insert_rows(&mut conn, &rows).unwrap();
    drop(conn);
    let report = intact(&path);
    assert_eq!((report.verified, report.legacy), (6, 0));
    let stored: (i64, i64, i64) = Connection::open(&path)
        .unwrap()
        .query_row(
            "SELECT publisher_uid, publisher_gid, publisher_pid FROM events WHERE row_id = 4",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!(stored, (1000, 100, 4242));

    // The publisher is covered: another pid, or a subject taken away, is an edit.
    for edit in [
        "UPDATE events SET publisher_pid = 1 WHERE row_id = 4",
        "UPDATE events SET publisher_subject = NULL WHERE row_id = 5",
        "UPDATE events SET publisher_gid = 0 WHERE row_id = 2",
    ] {
        let copy = store.dir().join("copy.db");
        std::fs::copy(&path, &copy).unwrap();
        sql(&copy, edit);
        let found = problem(&copy);
        assert_eq!(found.kind, Kind::Modified, "{edit}: {found}");
        std::fs::remove_file(&copy).unwrap();
    }
}

#[test]
fn redelivery_and_a_rolled_back_batch_leave_the_chain_intact() {
    let store = TempStore::new();
    let path = store.path().to_path_buf();
    let events = write(&path, 1..=3);
    let mut conn = store.writer();
    let before = head(&path).unwrap().unwrap();
    let again: Vec<EventRow<'_>> = events.iter().map(EventRow::from_event).collect();
    assert_eq!(insert_rows(&mut conn, &again).unwrap(), 0);
    let after = head(&path).unwrap().unwrap();
    assert_eq!(
        (after.row.map(|r| r.row_id), after.hash),
        (before.row.map(|r| r.row_id), before.hash)
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
    assert_eq!(
        report.head.unwrap(),
        RowRef {
            row_id: 5,
            seq: Some(8),
            time: Some("2024-05-01T10:00:08.000000000Z".into())
        }
    );
}

#[test]
fn verify_reads_while_a_writer_holds_its_transaction_open() {
    let store = ten_events();
    let path = store.path().to_path_buf();
    let mut writer = store.writer();
    let tx = writer
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .unwrap();
    tx.execute("UPDATE audit_chain SET head_seq = 999", [])
        .unwrap();
    // The uncommitted change is invisible to the reader's snapshot.
    assert_eq!(intact(&path).verified, 10);
    drop(tx);
}
