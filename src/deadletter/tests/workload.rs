//! Dead letters keep what the event's container record said (dead-letter schema 5),
//! so a redelivered event still names its pod, and entries from before keep working.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rusqlite::Connection;

use crate::deadletter::*;
use crate::testing::{self, T0};

/// An exit from upstream `node` in `k8s.io`, with what its container's record said.
fn event(seq: u64, workload: Option<Workload>) -> Arc<Event> {
    testing::event(seq)
        .upstream("node")
        .namespace("k8s.io")
        .at(T0)
        .json(
            "containerd.events.TaskExit",
            r#"{"container_id":"c1","id":"c1","exit_status":137}"#,
        )
        .workload(workload.map(Arc::new))
        .arc()
}

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

fn nginx() -> Workload {
    Workload {
        kind: Some("container".into()),
        pod_name: Some("web-7".into()),
        pod_namespace: Some("shop".into()),
        pod_uid: Some("0b1c".into()),
        container_name: Some("nginx".into()),
        image: "docker.io/library/nginx:1.27".into(),
        labels: [("app.kubernetes.io/name".to_owned(), "web".to_owned())].into(),
        reason: None,
    }
}

#[tokio::test]
async fn a_dead_letter_comes_back_with_its_workload() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("deadletters.db"), true)
        .await
        .unwrap();
    let plain = Workload {
        image: "busybox".into(),
        ..Workload::default()
    };
    let workloads = [Some(nginx()), None, Some(plain)];
    let events: Vec<Arc<Event>> = workloads
        .iter()
        .enumerate()
        .map(|(i, w)| event(i as u64 + 1, w.clone()))
        .collect();
    store.record("kafka", events, failure()).await.unwrap();
    let listed: Vec<Option<Workload>> = store
        .list(None, None)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.workload)
        .collect();
    assert_eq!(listed, workloads);

    // Taken for redelivery, each is the event it was, workload included.
    store.request(None, Vec::new()).await.unwrap();
    let taken: Vec<Option<Workload>> = store
        .take("kafka", 10)
        .await
        .unwrap()
        .iter()
        .map(|e| {
            e.to_event()
                .unwrap()
                .identity
                .workload
                .map(|w| (*w).clone())
        })
        .collect();
    assert_eq!(taken, workloads);
}

#[tokio::test]
async fn a_version_4_store_keeps_its_entries_without_a_workload_and_takes_new_ones() {
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
        ] {
            conn.execute_batch(sql).unwrap();
        }
        conn.pragma_update(None, "user_version", 4).unwrap();
        conn.execute(
            "INSERT INTO dead_letters (forwarder, event_id, seq, source, envelope, received_at,
               error, reason, attempts, first_attempt_at, last_attempt_at, dead_at)
             VALUES ('kafka', 'e1', 7, 'publish', x'', 't', 'down', 'permanent', 1, 't', 't', 't')",
            [],
        )
        .unwrap();
    }
    let store = Store::open(path, false).await.unwrap();
    store
        .record("kafka", vec![event(8, Some(nginx()))], failure())
        .await
        .unwrap();
    let listed: Vec<(u64, Option<Workload>)> = store
        .list(None, None)
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.seq, e.workload))
        .collect();
    assert_eq!(listed, [(7, None), (8, Some(nginx()))]);
}
