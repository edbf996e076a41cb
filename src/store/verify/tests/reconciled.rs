//! Schema version 12: a chain written before `reconciled_from` and `reason` keeps
//! verifying, a reconciled row from the CRI with a reason joins it hashing all 27
//! values, and editing either column is found at its row.

use std::sync::Arc;

use rusqlite::params;

use super::*;
use crate::event::{Clock, Origin, Witness, Workload};

fn from_cri(event: Event, reason: &str) -> Event {
    let workload = Workload {
        pod_name: Some("web-7".into()),
        pod_namespace: Some("shop".into()),
        container_name: Some("nginx".into()),
        kind: Some("container".into()),
        reason: Some(reason.into()),
        ..Workload::default()
    };
    event
        .with_origin(Origin::Reconciled {
            clock: Clock::Daemon,
            from: Witness::Cri,
        })
        .with_workload(Some(Arc::new(workload)))
}

#[test]
fn a_schema_11_chain_keeps_verifying_and_rows_from_the_cri_with_a_reason_join_it() {
    let store = TempStore::new();
    let path = store.path().to_path_buf();
    {
        // A store as version 11 left it: a live row and a reconciled one (which then
        // had no witness column; it was containerd's).
        let conn = store_at_version(&path, 11);
        let mut prev = chain::ZERO;
        let events = [
            event(1),
            event(2).with_origin(Origin::reconciled(Clock::Daemon)),
        ];
        for (event, hashed) in events.iter().zip([10, 12]) {
            let row = EventRow::from_event(event);
            let seq = row.seq as i64;
            let all = chain::values(seq, &row);
            let values: Vec<ValueRef<'_>> = match hashed {
                10 => all[..10].to_vec(),
                _ => all[..10].iter().chain(&all[14..16]).copied().collect(),
            };
            let hash = hand_hash(&prev, &values);
            conn.execute(
                "INSERT INTO events (row_id, seq, id, timestamp, received_at, namespace, topic, type_url, payload, event, source, \
                 origin, origin_clock, prev_hash, hash) VALUES (?1, ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
                params![seq, row.id, row.timestamp, row.received_at, row.namespace, row.topic, row.type_url, row.payload, row.event, row.source, row.origin, row.origin_clock, prev, hash],
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
    // The writer migrates to version 12 and goes on: a row the CRI witnessed with a
    // reason, one containerd witnessed, a live one.
    let events = [
        from_cri(event(3), "OOMKilled"),
        event(4).with_origin(Origin::reconciled(Clock::Reconcile)),
        event(5),
    ];
    testing::insert(&path, &events);
    let report = intact(&path);
    assert_eq!((report.verified, report.legacy), (5, 0));

    let conn = Connection::open(&path).unwrap();
    let stored: Vec<(Option<String>, Option<String>)> = conn
        .prepare("SELECT reconciled_from, reason FROM events ORDER BY row_id")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let owned = |from: Option<&str>, reason: Option<&str>| {
        (from.map(str::to_owned), reason.map(str::to_owned))
    };
    assert_eq!(
        stored,
        [
            owned(None, None),
            owned(None, None),
            owned(Some("cri"), Some("OOMKilled")),
            owned(Some("containerd"), None),
            owned(None, None),
        ],
        "rows from before version 12 have neither"
    );

    // By hand, as migrations/README.md spells it: the CRI's row hashes all 27.
    let row = EventRow::from_event(&events[0]);
    let (prev, hash): (Hash, Hash) = conn
        .query_row(
            "SELECT prev_hash, hash FROM events WHERE row_id = 3",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    let all = chain::values(3, &row);
    assert_eq!(all.len(), 27);
    assert_eq!(
        all[25..],
        [ValueRef::Text(b"cri"), ValueRef::Text(b"OOMKilled")]
    );
    assert_eq!(hand_hash(&prev, &all), hash);
    drop(conn);

    // Both are covered: changing, clearing or adding either is an edit at its row.
    for (edit, row) in [
        ("UPDATE events SET reason = 'Error' WHERE row_id = 3", 3),
        ("UPDATE events SET reason = NULL WHERE row_id = 3", 3),
        (
            "UPDATE events SET reconciled_from = 'docker' WHERE row_id = 3",
            3,
        ),
        (
            "UPDATE events SET reconciled_from = 'containerd' WHERE row_id = 3",
            3,
        ),
        (
            "UPDATE events SET reconciled_from = NULL WHERE row_id = 3",
            3,
        ),
        (
            "UPDATE events SET reconciled_from = NULL WHERE row_id = 4",
            4,
        ),
        (
            "UPDATE events SET reconciled_from = 'cri' WHERE row_id = 2",
            2,
        ),
        ("UPDATE events SET reason = 'OOMKilled' WHERE row_id = 5", 5),
        (
            "UPDATE events SET reason = CAST('OOMKilled' AS BLOB) WHERE row_id = 3",
            3,
        ),
    ] {
        let copy = store.dir().join("copy.db");
        std::fs::copy(&path, &copy).unwrap();
        sql(&copy, edit);
        let found = problem(&copy);
        assert_eq!(found.kind, Kind::Modified, "{edit}: {found}");
        assert_eq!(found.row.as_ref().map(|r| r.row_id), Some(row), "{edit}");
        assert!(found.what.contains("no longer matches"), "{edit}: {found}");
        std::fs::remove_file(&copy).unwrap();
    }
}
