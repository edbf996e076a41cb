//! Dead letters keep whose record a reconciled event came from (dead-letter schema 8)
//! and the manager's reason (in the workload), so `dlq retry` redelivers both, and
//! entries from before read as containerd's.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rusqlite::Connection;

use crate::deadletter::*;
use crate::event::{Clock, Witness};
use crate::testing::{self, T0};

fn failure() -> Failure {
    let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_714_557_600);
    Failure {
        reason: Reason::Permanent,
        error: "refused".into(),
        attempts: 1,
        first_attempt_at: at,
        last_attempt_at: at,
    }
}

fn event(seq: u64, origin: Origin, reason: Option<&str>) -> Arc<Event> {
    let workload = reason.map(|reason| {
        Arc::new(Workload {
            pod_name: Some("web-7".into()),
            container_name: Some("nginx".into()),
            reason: Some(reason.into()),
            ..Workload::default()
        })
    });
    testing::event(seq)
        .upstream("node")
        .namespace("k8s.io")
        .at(T0)
        .json(
            "containerd.events.TaskExit",
            r#"{"container_id":"c1","id":"c1","exit_status":137}"#,
        )
        .origin(origin)
        .workload(workload)
        .arc()
}

#[tokio::test]
async fn a_dead_letter_comes_back_with_its_witness_and_reason() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("deadletters.db");
    let store = Store::open(path.clone(), true).await.unwrap();
    let from = |clock, from| Origin::Reconciled { clock, from };
    let sent = [
        (from(Clock::Daemon, Witness::Cri), Some("OOMKilled")),
        (from(Clock::Reconcile, Witness::Docker), Some("OOMKilled")),
        (from(Clock::Daemon, Witness::Cri), Some("Completed")),
        (Origin::reconciled(Clock::Daemon), None),
        (Origin::Live, None),
    ];
    let events: Vec<Arc<Event>> = sent
        .iter()
        .enumerate()
        .map(|(i, (origin, reason))| event(i as u64 + 1, *origin, *reason))
        .collect();
    store
        .record("kafka", events.clone(), failure())
        .await
        .unwrap();

    let columns: Vec<Option<String>> = Connection::open(&path)
        .unwrap()
        .prepare("SELECT reconciled_from FROM dead_letters ORDER BY id")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let owned = |s: Option<&str>| s.map(str::to_owned);
    assert_eq!(
        columns,
        [
            owned(Some("cri")),
            owned(Some("docker")),
            owned(Some("cri")),
            owned(Some("containerd")),
            None
        ]
    );

    let listed = store.list(None, None).await.unwrap();
    let seen = |origin: Origin, workload: Option<&Workload>| {
        (origin, workload.and_then(|w| w.reason.clone()))
    };
    let expected: Vec<(Origin, Option<String>)> = sent
        .iter()
        .map(|(origin, reason)| (*origin, reason.map(str::to_owned)))
        .collect();
    let got: Vec<_> = listed
        .iter()
        .map(|e| seen(e.origin, e.workload.as_ref()))
        .collect();
    assert_eq!(got, expected);

    // Taken for redelivery, each is the event it was.
    store.request(None, Vec::new()).await.unwrap();
    let taken = store.take("kafka", 10).await.unwrap();
    for (entry, original) in taken.iter().zip(&events) {
        let back = entry.to_event().unwrap();
        assert_eq!(back.identity.origin, original.identity.origin);
        assert_eq!(back.identity.workload, original.identity.workload);
    }
    assert_eq!(taken.len(), events.len());
}

#[tokio::test]
async fn entries_from_before_the_witness_column_are_containerd_s() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("deadletters.db");
    {
        let conn = Connection::open(&path).unwrap();
        conn.pragma_update(None, "application_id", schema::APPLICATION_ID)
            .unwrap();
        for sql in [
            include_str!("../../../migrations/deadletter/0001_dead_letters.sql"),
            include_str!("../../../migrations/deadletter/0002_crash_reasons.sql"),
            include_str!("../../../migrations/deadletter/0003_publisher.sql"),
            include_str!("../../../migrations/deadletter/0004_origin.sql"),
            include_str!("../../../migrations/deadletter/0005_workload.sql"),
            include_str!("../../../migrations/deadletter/0006_node.sql"),
            include_str!("../../../migrations/deadletter/0007_node_seq.sql"),
        ] {
            conn.execute_batch(sql).unwrap();
        }
        conn.pragma_update(None, "user_version", 7).unwrap();
        conn.execute(
            "INSERT INTO dead_letters (forwarder, event_id, seq, source, envelope, received_at,
               error, reason, attempts, first_attempt_at, last_attempt_at, dead_at,
               origin, origin_clock)
             VALUES ('kafka', 'e1', 7, 'publish', x'', 't', 'down', 'permanent', 1, 't', 't', 't',
               'reconciled', 'daemon')",
            [],
        )
        .unwrap();
    }
    let store = Store::open(path.clone(), false).await.unwrap();
    let cri = Origin::Reconciled {
        clock: Clock::Reconcile,
        from: Witness::Cri,
    };
    store
        .record("kafka", vec![event(8, cri, Some("Error"))], failure())
        .await
        .unwrap();
    let listed: Vec<(u64, Origin)> = store
        .list(None, None)
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.seq, e.origin))
        .collect();
    assert_eq!(
        listed,
        [(7, Origin::reconciled(Clock::Daemon)), (8, cri)],
        "an entry from version 7 is containerd's"
    );

    // A witness on a live entry, or one eventgate does not know, is a damaged row.
    Connection::open(&path)
        .unwrap()
        .execute(
            "UPDATE dead_letters SET reconciled_from = 'kubelet' WHERE seq = 8",
            [],
        )
        .unwrap();
    assert!(store.list(None, None).await.is_err());
}
