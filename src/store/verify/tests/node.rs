//! Schema version 10: rows without a node hash as they always did, rows with one hash
//! the seven workload values (NULL or not) and the node, and every change to a row's
//! node is an edit `audit verify` finds at its row.

use super::*;

#[test]
fn the_node_is_covered_and_rows_without_one_hash_as_before() {
    let store = TempStore::new();
    let path = store.path().to_path_buf();
    let node = |event: Event, name: &str| event.with_node(Some(name.into()));
    let events = [
        event(1),
        node(event(2), "web-1"),
        node(event(3), "web-1").with_workload(testing::workload("nginx:1.27", &[])),
        event(4),
    ];
    testing::insert(&path, &events);
    assert_eq!(intact(&path).verified, 4);

    // By hand, as migrations/README.md spells it: ten values without a node; with
    // one, the ten, the seven workload values (all NULL here) and the node.
    {
        let conn = Connection::open(&path).unwrap();
        let hashes = |row_id: i64| -> (Hash, Hash) {
            conn.query_row(
                "SELECT prev_hash, hash FROM events WHERE row_id = ?1",
                [row_id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap()
        };
        let plain = EventRow::from_event(&events[0]);
        let (prev, hash) = hashes(1);
        assert_eq!(hand_hash(&prev, &chain::values(1, &plain)[..10]), hash);
        let on_node = EventRow::from_event(&events[1]);
        let all = chain::values(2, &on_node);
        assert_eq!(all[16..23], [ValueRef::Null; 7], "no workload");
        assert_eq!(all[23], ValueRef::Text(b"web-1"));
        let hashed: Vec<ValueRef<'_>> = all[..10].iter().chain(&all[16..24]).copied().collect();
        assert_eq!(hashed.len(), 18);
        let (prev, hash) = hashes(2);
        assert_eq!(hand_hash(&prev, &hashed), hash);
    }

    for (edit, row) in [
        ("UPDATE events SET node = 'web-2' WHERE row_id = 2", 2),
        ("UPDATE events SET node = NULL WHERE row_id = 3", 3),
        ("UPDATE events SET node = 'web-1' WHERE row_id = 4", 4),
        (
            "UPDATE events SET node = CAST('web-1' AS BLOB) WHERE row_id = 2",
            2,
        ),
    ] {
        let copy = store.dir().join("copy.db");
        std::fs::copy(&path, &copy).unwrap();
        sql(&copy, edit);
        let found = problem(&copy);
        assert_eq!(found.kind, Kind::Modified, "{edit}: {found}");
        assert_eq!(found.row.as_ref().map(|r| r.row_id), Some(row), "{edit}");
        std::fs::remove_file(&copy).unwrap();
    }
}
