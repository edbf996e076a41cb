//! Schema version 8: a chain written before the workload columns keeps verifying,
//! rows with a workload join it with their pod, container, image and labels covered
//! by the hash, and rows without one hash as they always did.

use std::sync::Arc;

use rusqlite::params;

use super::*;
use crate::event::{Clock, Origin, Workload};
use crate::publisher::Publisher;

fn workload(pod: &str, container: Option<&str>) -> Arc<Workload> {
    Arc::new(Workload {
        kind: Some(
            if container.is_some() {
                "container"
            } else {
                "sandbox"
            }
            .into(),
        ),
        pod_name: Some(pod.into()),
        pod_namespace: Some("shop".into()),
        pod_uid: Some("0b1c".into()),
        container_name: container.map(str::to_owned),
        image: "docker.io/library/nginx:1.27".into(),
        labels: [("app.kubernetes.io/name".to_owned(), "web".to_owned())].into(),
        reason: None,
    })
}

/// The seven workload columns of every row, in row order.
fn stored(path: &Path) -> Vec<[Option<String>; 7]> {
    let conn = Connection::open(path).unwrap();
    let mut stmt = conn
        .prepare(
            "SELECT pod_name, pod_namespace, pod_uid, container_name, container_kind, image, labels \
             FROM events ORDER BY row_id",
        )
        .unwrap();
    stmt.query_map([], |r| {
        let mut out: [Option<String>; 7] = Default::default();
        for (i, slot) in out.iter_mut().enumerate() {
            *slot = r.get(i)?;
        }
        Ok(out)
    })
    .unwrap()
    .collect::<Result<_, _>>()
    .unwrap()
}

#[test]
fn a_schema_7_chain_keeps_verifying_and_rows_with_a_workload_join_it() {
    let store = TempStore::new();
    let path = store.path().to_path_buf();
    {
        // A store as version 7 left it: a plain row, one with a publisher, a
        // reconciled one, each hashed as that version's writer did.
        let conn = store_at_version(&path, 7);
        let mut prev = chain::ZERO;
        let events = [
            event(1),
            event(2).with_publisher(Some(Publisher::Certificate {
                subject: "CN=node-7".into(),
            })),
            event(3).with_origin(Origin::reconciled(Clock::Daemon)),
        ];
        for event in &events {
            let row = EventRow::from_event(event);
            let seq = row.seq as i64;
            let all = chain::values(seq, &row);
            let hashed: Vec<_> = match seq {
                1 => all[..10].to_vec(),
                2 => all[..14].to_vec(),
                _ => all[..10].iter().chain(&all[14..16]).copied().collect(),
            };
            let hash = hand_hash(&prev, &hashed);
            conn.execute(
                "INSERT INTO events (row_id, seq, id, timestamp, received_at, namespace, topic, type_url, payload, event, source, \
                 publisher_subject, origin, origin_clock, prev_hash, hash) \
                 VALUES (?1, ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
                params![seq, row.id, row.timestamp, row.received_at, row.namespace, row.topic, row.type_url, row.payload, row.event, row.source, row.publisher.3, row.origin, row.origin_clock, prev, hash],
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
    // The writer migrates to version 8 and goes on with rows with and without a
    // workload, one of them reconciled and published too (every part hashed).
    let events = [
        event(4).with_workload(Some(workload("web-7", None))),
        event(5).with_workload(Some(workload("web-7", Some("nginx")))),
        event(6),
        event(7)
            .with_workload(Some(workload("web-7", Some("nginx"))))
            .with_origin(Origin::reconciled(Clock::Reconcile))
            .with_publisher(Some(Publisher::Process {
                uid: 0,
                gid: 0,
                pid: Some(1),
            })),
    ];
    let mut conn = store.writer();
    let rows: Vec<EventRow<'_>> = events.iter().map(EventRow::from_event).collect();
    insert_rows(&mut conn, &rows).unwrap();
    drop(conn);
    let report = intact(&path);
    assert_eq!((report.verified, report.legacy), (7, 0));

    // The columns hold the fields; rows from before version 8, and rows without a
    // workload, hold none.
    let owned = |values: [Option<&str>; 7]| values.map(|v| v.map(str::to_owned));
    let labels = Some(r#"{"app.kubernetes.io/name":"web"}"#);
    let image = Some("docker.io/library/nginx:1.27");
    let sandbox = owned([
        Some("web-7"),
        Some("shop"),
        Some("0b1c"),
        None,
        Some("sandbox"),
        image,
        labels,
    ]);
    let nginx = owned([
        Some("web-7"),
        Some("shop"),
        Some("0b1c"),
        Some("nginx"),
        Some("container"),
        image,
        labels,
    ]);
    let none: [Option<String>; 7] = Default::default();
    assert_eq!(
        stored(&path),
        [
            none.clone(),
            none.clone(),
            none.clone(),
            sandbox,
            nginx.clone(),
            none,
            nginx
        ]
    );

    // A row without a workload hashes exactly as before version 8: its hash is the
    // ten values' alone.
    {
        let conn = Connection::open(&path).unwrap();
        let (prev, hash): (Hash, Hash) = conn
            .query_row(
                "SELECT prev_hash, hash FROM events WHERE row_id = 6",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        let row = EventRow::from_event(&events[2]);
        assert_eq!(hand_hash(&prev, &chain::values(6, &row)[..10]), hash);
    }

    // Every workload column is covered: changed, cleared, or given to a row that had
    // no workload, each is an edit found at its row.
    for (edit, row) in [
        ("UPDATE events SET pod_name = 'web-8' WHERE row_id = 5", 5),
        (
            "UPDATE events SET pod_namespace = 'other' WHERE row_id = 5",
            5,
        ),
        ("UPDATE events SET pod_uid = NULL WHERE row_id = 4", 4),
        (
            "UPDATE events SET container_name = 'app' WHERE row_id = 5",
            5,
        ),
        (
            "UPDATE events SET container_kind = 'container' WHERE row_id = 4",
            4,
        ),
        (
            "UPDATE events SET image = 'evil:latest' WHERE row_id = 7",
            7,
        ),
        ("UPDATE events SET labels = '{}' WHERE row_id = 7", 7),
        ("UPDATE events SET pod_name = 'web-7' WHERE row_id = 6", 6),
        ("UPDATE events SET image = 'busybox' WHERE row_id = 1", 1),
        (
            "UPDATE events SET pod_name = NULL, pod_namespace = NULL, pod_uid = NULL, \
             container_name = NULL, container_kind = NULL, image = NULL, labels = NULL WHERE row_id = 5",
            5,
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
