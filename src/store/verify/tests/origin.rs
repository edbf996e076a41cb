//! Schema version 6: a chain written before the origin columns keeps verifying, and
//! reconciled rows join it with their origin covered by the hash.

use rusqlite::params;

use super::*;
use crate::event::{Clock, Origin};
use crate::publisher::Publisher;

fn reconciled(clock: Clock) -> Origin {
    Origin::reconciled(clock)
}

#[test]
fn a_schema_5_chain_keeps_verifying_and_reconciled_rows_join_it() {
    let store = TempStore::new();
    let path = store.path().to_path_buf();
    {
        // A store as version 5 left it: one row without a publisher, one with.
        let conn = store_at_version(&path, 5);
        let mut prev = chain::ZERO;
        let events = [
            event(1),
            event(2).with_publisher(Some(Publisher::Certificate {
                subject: "CN=node-7".into(),
            })),
        ];
        for (event, hashed) in events.iter().zip([10, 14]) {
            let row = EventRow::from_event(event);
            let seq = row.seq as i64;
            let hash = hand_hash(&prev, &chain::values(seq, &row)[..hashed]);
            conn.execute(
                "INSERT INTO events (row_id, seq, id, timestamp, received_at, namespace, topic, type_url, payload, event, source, \
                 publisher_subject, prev_hash, hash) VALUES (?1, ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
                params![seq, row.id, row.timestamp, row.received_at, row.namespace, row.topic, row.type_url, row.payload, row.event, row.source, row.publisher.3, prev, hash],
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
    // The writer migrates to version 6 and goes on with reconciled and live rows.
    let events = [
        event(3).with_origin(reconciled(Clock::Daemon)),
        event(4)
            .with_origin(reconciled(Clock::Reconcile))
            .with_publisher(Some(Publisher::Process {
                uid: 0,
                gid: 0,
                pid: None,
            })),
        event(5),
    ];
    let mut conn = store.writer();
    let rows: Vec<EventRow<'_>> = events.iter().map(EventRow::from_event).collect();
    insert_rows(&mut conn, &rows).unwrap();
    drop(conn);
    let report = intact(&path);
    assert_eq!((report.verified, report.legacy), (5, 0));

    let stored: Vec<(String, Option<String>)> = {
        let conn = Connection::open(&path).unwrap();
        let mut stmt = conn
            .prepare("SELECT origin, origin_clock FROM events ORDER BY row_id")
            .unwrap();
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };
    let owned = |origin: &str, clock: Option<&str>| (origin.to_owned(), clock.map(str::to_owned));
    assert_eq!(
        stored,
        [
            owned("live", None),
            owned("live", None),
            owned("reconciled", Some("daemon")),
            owned("reconciled", Some("reconcile")),
            owned("live", None),
        ],
        "rows from before version 6 read as live"
    );

    // The origin is covered: marking a live row reconciled, changing a clock, or
    // passing a reconciled row off as live is an edit.
    for edit in [
        "UPDATE events SET origin = 'reconciled', origin_clock = 'daemon' WHERE row_id = 1",
        "UPDATE events SET origin_clock = 'daemon' WHERE row_id = 2",
        "UPDATE events SET origin_clock = 'reconcile' WHERE row_id = 3",
        "UPDATE events SET origin = 'live', origin_clock = NULL WHERE row_id = 4",
    ] {
        let copy = store.dir().join("copy.db");
        std::fs::copy(&path, &copy).unwrap();
        sql(&copy, edit);
        let found = problem(&copy);
        assert_eq!(found.kind, Kind::Modified, "{edit}: {found}");
        std::fs::remove_file(&copy).unwrap();
    }
}

/// An exit of container `container`, as event `seq`, with `origin`.
fn exit_of(seq: u64, container: &str, origin: Origin) -> Event {
    let json = format!(r#"{{"container_id":"{container}","pid":7,"exit_status":3}}"#);
    testing::event(seq)
        .at(testing::T0 + seq as i64)
        .json("containerd.events.TaskExit", &json)
        .build()
        .with_origin(origin)
}

#[test]
fn a_repeat_must_follow_the_reconciled_row_it_repeats() {
    // A reconciled exit, its live repeat, and a repeat of the same change again.
    let store = TempStore::new();
    let path = store.path().to_path_buf();
    testing::insert(
        &path,
        &[
            exit_of(1, "c1", reconciled(Clock::Daemon)),
            event(2),
            exit_of(3, "c1", Origin::Repeat),
        ],
    );
    let report = intact(&path);
    assert_eq!(report.verified, 3);
    testing::insert(&path, &[exit_of(4, "c1", Origin::Repeat)]);
    let found = problem(&path);
    assert_at(&found, Kind::Unfounded, 4, 4);
    assert!(found.to_string().contains("\"c1\""), "{found}");

    // A repeat of a change no reconcile told.
    let store = TempStore::new();
    let path = store.path().to_path_buf();
    testing::insert(
        &path,
        &[
            exit_of(1, "c1", reconciled(Clock::Daemon)),
            exit_of(2, "c2", Origin::Repeat),
        ],
    );
    assert_at(&problem(&path), Kind::Unfounded, 2, 2);
}
