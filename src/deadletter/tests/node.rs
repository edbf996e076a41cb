//! Dead letters keep the node their event was captured on (dead-letter schema 6):
//! redelivery does not pass through the exchange, so without it a redelivered event
//! would reach its forwarder with no node at all.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rusqlite::Connection;

use crate::deadletter::*;
use crate::testing::{self, T0};

fn event(seq: u64, node: Option<&str>) -> Arc<Event> {
    let event = testing::event(seq)
        .at(T0)
        .json("containerd.events.TaskExit", r#"{"container_id":"c1"}"#);
    match node {
        Some(node) => event.node(node),
        None => event,
    }
    .arc()
}

fn failure() -> Failure {
    let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_714_557_600);
    Failure {
        reason: Reason::RetriesExhausted,
        error: "broker down".into(),
        attempts: 3,
        first_attempt_at: at,
        last_attempt_at: at,
    }
}

#[tokio::test]
async fn a_dead_letter_comes_back_with_its_node() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("deadletters.db"), true)
        .await
        .unwrap();
    let nodes = [Some("web-1"), None, Some("db-1.example")];
    let events = (1..).zip(nodes).map(|(seq, n)| event(seq, n)).collect();
    store.record("kafka", events, failure()).await.unwrap();
    let listed: Vec<Option<String>> = store
        .list(None, None)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.node)
        .collect();
    assert_eq!(listed, nodes.map(|n| n.map(String::from)));

    store.request(None, Vec::new()).await.unwrap();
    let taken: Vec<Option<String>> = store
        .take("kafka", 10)
        .await
        .unwrap()
        .iter()
        .map(|e| e.to_event().unwrap().node().map(String::from))
        .collect();
    assert_eq!(taken, nodes.map(|n| n.map(String::from)));
}

#[tokio::test]
async fn a_version_5_store_keeps_its_entries_with_an_unknown_node_and_takes_new_ones() {
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
        ] {
            conn.execute_batch(sql).unwrap();
        }
        conn.pragma_update(None, "user_version", 5).unwrap();
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
        .record("kafka", vec![event(8, Some("web-1"))], failure())
        .await
        .unwrap();
    let listed: Vec<(u64, Option<String>)> = store
        .list(None, None)
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.seq, e.node))
        .collect();
    assert_eq!(listed, [(7, None), (8, Some("web-1".into()))]);
}

/// An event taken in from another gateway keeps its node seq through a dead letter
/// (dead-letter schema 7), and comes back from Kafka as it went.
#[tokio::test]
async fn a_taken_in_event_comes_back_with_its_node_seq() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("deadletters.db"), true)
        .await
        .unwrap();
    let taken_in = testing::event(7)
        .at(T0)
        .json("containerd.events.TaskExit", r#"{"container_id":"c1"}"#)
        .node("web-1")
        .taken_in_by_kafka("fleet", 41)
        .arc();
    store
        .record(
            "alerts",
            vec![taken_in, event(8, Some("central"))],
            failure(),
        )
        .await
        .unwrap();
    store.request(None, Vec::new()).await.unwrap();
    let back: Vec<Event> = store
        .take("alerts", 10)
        .await
        .unwrap()
        .iter()
        .map(|e| e.to_event().unwrap())
        .collect();
    assert_eq!(back[0].identity.node_seq, Some(41));
    assert_eq!(
        back[0].identity.source,
        crate::event::Source::Kafka(Arc::from("fleet"))
    );
    assert_eq!(back[1].identity.node_seq, None);
}
