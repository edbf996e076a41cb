mod node;
mod reconciled;
mod workload;

use std::time::Duration;

use rusqlite::Connection;

use super::schema::APPLICATION_ID;
use super::*;
use crate::testing::{self, T0};

/// An exit from upstream `node1`, on `topic`.
fn event(seq: u64, topic: &str) -> Arc<Event> {
    testing::event(seq)
        .upstream("node1")
        .at_nanos(T0, 5)
        .topic(topic)
        .json(
            "containerd.events.TaskExit",
            r#"{"container_id":"c1","exit_status":3}"#,
        )
        .arc()
}

fn at(seconds: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_714_557_600 + seconds)
}

fn failure(reason: Reason, attempts: u32, first: u64, last: u64) -> Failure {
    Failure {
        reason,
        error: format!("{} after {attempts}", reason.as_str()),
        attempts,
        first_attempt_at: at(first),
        last_attempt_at: at(last),
    }
}

async fn open(dir: &tempfile::TempDir) -> Store {
    Store::open(dir.path().join("sub/deadletters.db"), true)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_record_keeps_the_event_and_how_it_died() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir).await;
    let events = vec![event(4, "/tasks/exit"), event(5, "/tasks/delete")];
    let n = store
        .record(
            "kafka",
            events.clone(),
            failure(Reason::RetriesExhausted, 7, 0, 30),
        )
        .await
        .unwrap();
    assert_eq!(n, 2);
    let entries = store.list(None, None).await.unwrap();
    assert_eq!(entries.len(), 2);
    let entry = &entries[0];
    assert_eq!(entry.forwarder, "kafka");
    assert_eq!(entry.event_id, events[0].identity.id.to_string());
    assert_eq!(entry.seq, 4);
    assert_eq!(entry.source, "upstream:node1");
    assert_eq!(entry.reason, Reason::RetriesExhausted);
    assert_eq!(entry.attempts, 7);
    assert_eq!(entry.error, "retries_exhausted after 7");
    assert_eq!(entry.first_attempt_at, "2024-05-01T10:00:00.000000000Z");
    assert_eq!(entry.last_attempt_at, "2024-05-01T10:00:30.000000000Z");
    assert!(entry.dead_at.as_str() > "2024-05-01");
    assert_eq!(entry.retry_requested_at, None);
    assert_eq!(entry.state, State::Dead);
    assert_eq!(entry.received_at, timestamp(events[0].identity.received_at));

    // The event comes back exactly as the forwarder first saw it.
    let restored = entry.to_event().unwrap();
    assert_eq!(restored.identity.id, events[0].identity.id);
    assert_eq!(restored.seq, 4);
    assert_eq!(restored.identity.source, events[0].identity.source);
    assert_eq!(
        restored.identity.received_at,
        events[0].identity.received_at
    );
    assert_eq!(restored.envelope, events[0].envelope);
    assert_eq!(
        (entry.publisher.as_ref(), restored.identity.publisher),
        (None, None)
    );
    assert_eq!(
        (entry.origin, restored.identity.origin),
        (Origin::Live, Origin::Live)
    );
}

#[tokio::test]
async fn a_dead_letter_comes_back_with_its_origin() {
    use crate::event::Clock;
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir).await;
    let origins = [
        Origin::reconciled(Clock::Daemon),
        Origin::reconciled(Clock::Reconcile),
        Origin::Live,
    ];
    let events: Vec<Arc<Event>> = origins
        .iter()
        .enumerate()
        .map(|(i, origin)| {
            let plain = Arc::try_unwrap(event(i as u64 + 1, "/tasks/exit")).unwrap();
            Arc::new(plain.with_origin(*origin))
        })
        .collect();
    store
        .record("file", events, failure(Reason::Permanent, 1, 0, 0))
        .await
        .unwrap();
    let entries = store.list(None, None).await.unwrap();
    let stored: Vec<Origin> = entries.iter().map(|e| e.origin).collect();
    assert_eq!(stored, origins);
    // Taken for redelivery, each is the event it was, origin included.
    store.request(None, Vec::new()).await.unwrap();
    let taken: Vec<Origin> = store
        .take("file", 10)
        .await
        .unwrap()
        .iter()
        .map(|e| e.to_event().unwrap().identity.origin)
        .collect();
    assert_eq!(taken, origins);
}

#[tokio::test]
async fn a_dead_letter_comes_back_with_its_publisher() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir).await;
    let publishers = [
        Publisher::Process {
            uid: 1000,
            gid: 100,
            pid: Some(4242),
        },
        Publisher::Certificate {
            subject: "CN=node-7,O=Acme".into(),
        },
    ];
    let events: Vec<Arc<Event>> = publishers
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let plain = Arc::try_unwrap(event(i as u64 + 1, "/tasks/exit")).unwrap();
            Arc::new(plain.with_publisher(Some(p.clone())))
        })
        .collect();
    store
        .record("file", events, failure(Reason::Permanent, 1, 0, 0))
        .await
        .unwrap();
    let entries = store.list(None, None).await.unwrap();
    for (entry, publisher) in entries.iter().zip(&publishers) {
        assert_eq!(entry.publisher.as_ref(), Some(publisher));
        assert_eq!(
            entry.to_event().unwrap().identity.publisher.as_ref(),
            Some(publisher)
        );
    }
}

#[tokio::test]
async fn dying_again_updates_the_row_attempts_add_up_and_times_move() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir).await;
    let e = event(1, "/tasks/exit");
    store
        .record(
            "a",
            vec![e.clone()],
            failure(Reason::RetriesExhausted, 3, 10, 20),
        )
        .await
        .unwrap();
    store.request(None, Vec::new()).await.unwrap();
    store
        .record(
            "a",
            vec![e.clone()],
            failure(Reason::Permanent, 1, 100, 100),
        )
        .await
        .unwrap();
    // Another forwarder's failure of the same event is its own row.
    store
        .record("b", vec![e.clone()], failure(Reason::Permanent, 1, 5, 5))
        .await
        .unwrap();
    let entries = store.list(Some("a".into()), None).await.unwrap();
    assert_eq!(entries.len(), 1);
    let entry = &entries[0];
    assert_eq!(entry.attempts, 4);
    assert_eq!(entry.reason, Reason::Permanent);
    assert_eq!(entry.error, "permanent after 1");
    assert_eq!(entry.first_attempt_at, timestamp(at(10)));
    assert_eq!(entry.last_attempt_at, timestamp(at(100)));
    assert_eq!(entry.state, State::Dead, "a new death cancels the request");
    assert_eq!(entry.retry_requested_at, None);
    assert_eq!(store.list(None, None).await.unwrap().len(), 2);
    assert_eq!(
        store.forwarders().await.unwrap(),
        [("a".to_owned(), 1), ("b".to_owned(), 1)]
    );
    assert!(store.has_forwarder("b").await.unwrap());
    assert!(!store.has_forwarder("c").await.unwrap());
}

#[tokio::test]
async fn list_filters_and_limits_in_order_of_death() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir).await;
    for (forwarder, seq) in [("a", 1), ("b", 2), ("a", 3), ("a", 4)] {
        store
            .record(
                forwarder,
                vec![event(seq, "/t")],
                failure(Reason::Permanent, 1, 0, 0),
            )
            .await
            .unwrap();
    }
    let seqs = |entries: Vec<Entry>| entries.iter().map(|e| e.seq).collect::<Vec<_>>();
    assert_eq!(seqs(store.list(None, None).await.unwrap()), [1, 2, 3, 4]);
    assert_eq!(
        seqs(store.list(Some("a".into()), None).await.unwrap()),
        [1, 3, 4]
    );
    assert_eq!(
        seqs(store.list(Some("a".into()), Some(2)).await.unwrap()),
        [1, 3]
    );
}

#[tokio::test]
async fn request_take_and_delete_move_entries_through_redelivery() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir).await;
    let events: Vec<_> = (1..=5).map(|seq| event(seq, "/t")).collect();
    store
        .record(
            "a",
            events[..4].to_vec(),
            failure(Reason::Permanent, 1, 0, 0),
        )
        .await
        .unwrap();
    store
        .record(
            "b",
            events[4..].to_vec(),
            failure(Reason::Permanent, 1, 0, 0),
        )
        .await
        .unwrap();
    let ids: Vec<i64> = store
        .list(None, None)
        .await
        .unwrap()
        .iter()
        .map(|e| e.id)
        .collect();

    // Nothing requested: nothing to take.
    assert!(store.take("a", 10).await.unwrap().is_empty());
    // By id, restricted to a forwarder: b's entry is not a's.
    assert_eq!(
        store
            .request(Some("a".into()), vec![ids[0], ids[4]])
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        store.request(Some("a".into()), Vec::new()).await.unwrap(),
        3
    );
    // Already requested entries are not counted twice.
    assert_eq!(store.request(None, Vec::new()).await.unwrap(), 1);
    let entry = &store.list(Some("a".into()), Some(1)).await.unwrap()[0];
    assert_eq!(entry.state, State::Requested);
    assert!(entry.retry_requested_at.is_some());

    let taken = store.take("a", 3).await.unwrap();
    assert_eq!(taken.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2, 3]);
    // Taken entries are queued: a second taker gets only the rest.
    let rest = store.take("a", 3).await.unwrap();
    assert_eq!(rest.iter().map(|e| e.seq).collect::<Vec<_>>(), [4]);
    let states: Vec<State> = store
        .list(Some("a".into()), None)
        .await
        .unwrap()
        .iter()
        .map(|e| e.state)
        .collect();
    assert_eq!(states, [State::Queued; 4]);

    assert_eq!(
        store
            .delete(taken.iter().map(|e| e.id).collect())
            .await
            .unwrap(),
        3
    );
    assert_eq!(
        store.release(rest[0].id, "damaged".into()).await.unwrap(),
        1
    );
    let left = store.list(None, None).await.unwrap();
    assert_eq!(left.iter().map(|e| e.seq).collect::<Vec<_>>(), [4, 5]);
    assert_eq!(
        (left[0].state, left[0].error.as_str()),
        (State::Dead, "damaged")
    );
}

#[tokio::test]
async fn purge_removes_by_forwarder_and_age() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir).await;
    for (forwarder, seq) in [("a", 1), ("a", 2), ("b", 3)] {
        store
            .record(
                forwarder,
                vec![event(seq, "/t")],
                failure(Reason::Permanent, 1, 0, 0),
            )
            .await
            .unwrap();
    }
    let long_ago = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    assert_eq!(
        store.purge(Some("a".into()), Some(long_ago)).await.unwrap(),
        0
    );
    let later = SystemTime::now() + Duration::from_secs(60);
    assert_eq!(store.purge(Some("a".into()), Some(later)).await.unwrap(), 2);
    assert_eq!(store.purge(Some("a".into()), None).await.unwrap(), 0);
    assert_eq!(store.purge(None, None).await.unwrap(), 1);
    assert!(store.list(None, None).await.unwrap().is_empty());
}

#[tokio::test]
async fn reopening_for_a_new_gateway_sends_queued_entries_back_to_requested() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir).await;
    store
        .record(
            "a",
            vec![event(1, "/t"), event(2, "/t")],
            failure(Reason::Permanent, 1, 0, 0),
        )
        .await
        .unwrap();
    store.request(None, Vec::new()).await.unwrap();
    assert_eq!(store.take("a", 1).await.unwrap().len(), 1);
    drop(store);

    // The CLI opening the file changes nothing.
    let cli = Store::open(dir.path().join("sub/deadletters.db"), false)
        .await
        .unwrap();
    let states = |entries: Vec<Entry>| entries.iter().map(|e| e.state).collect::<Vec<_>>();
    assert_eq!(
        states(cli.list(None, None).await.unwrap()),
        [State::Queued, State::Requested]
    );
    assert_eq!(cli.requeue_interrupted().await.unwrap(), 1);
    assert_eq!(
        states(cli.list(None, None).await.unwrap()),
        [State::Requested, State::Requested]
    );
    assert_eq!(cli.take("a", 10).await.unwrap().len(), 2);
}

#[tokio::test]
async fn missing_foreign_newer_and_non_sqlite_files_are_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.db");
    let error = Store::open(missing.clone(), false).await.err().unwrap();
    assert_eq!(
        error.to_string(),
        format!("no dead letters: {} does not exist", missing.display())
    );
    assert!(!missing.exists());

    let foreign = dir.path().join("foreign.db");
    Connection::open(&foreign)
        .unwrap()
        .execute_batch("CREATE TABLE t (x); INSERT INTO t VALUES (1);")
        .unwrap();
    let error = Store::open(foreign.clone(), true).await.err().unwrap();
    assert!(matches!(error, DeadLetterError::Foreign { .. }), "{error}");

    // The audit store is eventgate's too, but not a dead-letter store.
    let audit = dir.path().join("audit.db");
    drop(crate::store::open_writer(&audit, &crate::store::WriterOptions::default()).unwrap());
    let error = Store::open(audit, true).await.err().unwrap();
    assert!(error.to_string().contains("another application"), "{error}");

    let newer = dir.path().join("newer.db");
    drop(Store::open(newer.clone(), true).await.unwrap());
    Connection::open(&newer)
        .unwrap()
        .pragma_update(None, "user_version", LATEST + 1)
        .unwrap();
    let error = Store::open(newer.clone(), true).await.err().unwrap();
    assert!(
        error
            .to_string()
            .contains(&format!("version {}", LATEST + 1)),
        "{error}"
    );

    let text = dir.path().join("text.db");
    std::fs::write(
        &text,
        "not a database at all, just some text here\n".repeat(20),
    )
    .unwrap();
    let error = Store::open(text.clone(), true).await.err().unwrap();
    assert!(
        matches!(error, DeadLetterError::NotADatabase { .. }),
        "{error}"
    );
    assert_eq!(
        std::fs::read_to_string(&text).unwrap(),
        "not a database at all, just some text here\n".repeat(20)
    );
}

#[tokio::test]
async fn a_new_file_is_stamped_and_in_wal_mode() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir).await;
    let path = store.path().to_path_buf();
    drop(store);
    let conn = Connection::open(path).unwrap();
    let pragma = |name: &str| -> i64 { conn.pragma_query_value(None, name, |r| r.get(0)).unwrap() };
    assert_eq!(pragma("application_id"), i64::from(APPLICATION_ID));
    assert_eq!(pragma("user_version"), LATEST);
    let mode: String = conn
        .pragma_query_value(None, "journal_mode", |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
}

#[tokio::test]
async fn a_version_1_store_keeps_its_rows_and_takes_the_new_reasons() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("deadletters.db");
    {
        // What a gateway before schema 2 left: one dead letter.
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(include_str!(
            "../../../migrations/deadletter/0001_dead_letters.sql"
        ))
        .unwrap();
        conn.pragma_update(None, "user_version", 1).unwrap();
        conn.pragma_update(None, "application_id", schema::APPLICATION_ID)
            .unwrap();
        conn.execute(
            "INSERT INTO dead_letters (forwarder, event_id, seq, source, envelope, received_at,
               error, reason, attempts, first_attempt_at, last_attempt_at, dead_at)
             VALUES ('kafka', 'e1', 7, 'publish', x'', 't', 'down', 'retries_exhausted', 3, 't', 't', 't')",
            [],
        )
        .unwrap();
    }
    let store = Store::open(path, false).await.unwrap();
    let kept = store.list(None, None).await.unwrap();
    assert_eq!(kept.len(), 1);
    assert_eq!((kept[0].id, kept[0].seq), (1, 7), "same row, same id");
    assert_eq!(
        kept[0].origin,
        Origin::Live,
        "entries from before origins are live"
    );
    assert_eq!(kept[0].reason, Reason::RetriesExhausted);
    for (seq, reason) in [(8, Reason::Panicked), (9, Reason::Crashed)] {
        store
            .record("kafka", vec![event(seq, "/t")], failure(reason, 0, 0, 0))
            .await
            .unwrap();
    }
    let reasons: Vec<Reason> = store
        .list(None, None)
        .await
        .unwrap()
        .iter()
        .map(|e| e.reason)
        .collect();
    assert_eq!(
        reasons,
        [Reason::RetriesExhausted, Reason::Panicked, Reason::Crashed]
    );
}
