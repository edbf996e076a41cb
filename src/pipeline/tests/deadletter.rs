//! The pipeline with a real dead-letter store (a temporary SQLite file): batches given
//! up on land there with their attempts and times, the rest flows on in order, and
//! requested entries are redelivered or recorded dead again. Time is paused; the
//! store's blocking work keeps tokio from advancing the clock while it runs.

use std::sync::atomic::Ordering;
use std::time::SystemTime;

use super::{event, pipeline_with, spec};
use crate::deadletter::{Entry, Reason, State, Store};
use crate::pipeline::*;
use crate::testing::Scripted;
use tokio::time::Instant;

const POLL: Duration = Duration::from_millis(200);

async fn store(dir: &tempfile::TempDir) -> DeadLetters {
    DeadLetters {
        store: Store::open(dir.path().join("deadletters.db"), true)
            .await
            .unwrap(),
        poll_interval: POLL,
    }
}

/// How an entry recorded before the test's gateway started died.
fn old_failure() -> crate::deadletter::Failure {
    crate::deadletter::Failure {
        reason: Reason::Permanent,
        error: "old".into(),
        attempts: 1,
        first_attempt_at: SystemTime::now(),
        last_attempt_at: SystemTime::now(),
    }
}

fn time(text: &str) -> SystemTime {
    humantime::parse_rfc3339(text).unwrap()
}

/// Waits (on tokio's clock) until the store's entries satisfy `check`.
async fn until_store(store: &Store, what: &str, check: impl Fn(&[Entry]) -> bool) -> Vec<Entry> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let entries = store.list(None, None).await.unwrap();
        if check(&entries) {
            return entries;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {entries:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn permanent_rejections_are_narrowed_to_their_events_and_the_rest_flows_on_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let dead_letters = store(&dir).await;
    let sink = Arc::new(Scripted::default());
    *sink.poison.lock().unwrap() = Some("/bad");
    // One batch of all nine: the refusal is narrowed by halves to 4 and 7.
    let mut s = spec("a");
    s.batch.events = 9;
    let p = pipeline_with(vec![(s, sink.clone())], Some(dead_letters.clone()));
    let router = p.router();
    let events: Vec<_> = (1..=9)
        .map(|seq| event(seq, if seq == 4 || seq == 7 { "/bad" } else { "/ok" }))
        .collect();
    let before = SystemTime::now();
    for e in &events {
        router.route(e);
    }
    p.forwarder("a").unwrap().wait_acked(9).await;
    assert_eq!(sink.seqs(), [1, 2, 3, 5, 6, 8, 9]);

    // Acknowledged only after the record was written: it is there now.
    let entries = dead_letters.store.list(None, None).await.unwrap();
    let dead: Vec<_> = entries
        .iter()
        .map(|e| (e.seq, e.event_id.clone()))
        .collect();
    assert_eq!(
        dead,
        [
            (4, events[3].identity.id.to_string()),
            (7, events[6].identity.id.to_string())
        ]
    );
    for entry in &entries {
        assert_eq!(entry.forwarder, "a");
        assert_eq!(entry.reason, Reason::Permanent);
        assert_eq!(entry.attempts, 1, "permanent errors are not retried");
        assert_eq!(entry.error, "/bad refused");
        assert_eq!(entry.first_attempt_at, entry.last_attempt_at);
        assert!(time(&entry.first_attempt_at) >= before);
        assert!(time(&entry.dead_at) >= time(&entry.last_attempt_at));
        assert_eq!(entry.state, State::Dead);
    }
    let reports = p.shutdown(Duration::from_secs(1)).await;
    assert_eq!((reports[0].delivered, reports[0].failed), (7, 2));
}

#[tokio::test(start_paused = true)]
async fn a_panic_is_narrowed_to_its_event_which_is_buried_while_the_rest_flows_on() {
    let dir = tempfile::tempdir().unwrap();
    let dead_letters = store(&dir).await;
    let sink = Arc::new(Scripted::default());
    *sink.panic_on.lock().unwrap() = Some("/boom");
    let mut s = spec("a");
    s.batch.events = 8;
    let p = pipeline_with(vec![(s, sink.clone())], Some(dead_letters.clone()));
    let router = p.router();
    for seq in 1..=10 {
        router.route(&event(
            seq,
            if seq == 3 || seq == 6 { "/boom" } else { "/ok" },
        ));
    }
    p.forwarder("a").unwrap().wait_acked(10).await;
    assert_eq!(
        sink.seqs(),
        [1, 2, 4, 5, 7, 8, 9, 10],
        "in order, minus the two"
    );
    let entries = dead_letters.store.list(None, None).await.unwrap();
    assert_eq!(entries.iter().map(|e| e.seq).collect::<Vec<_>>(), [3, 6]);
    for entry in &entries {
        assert_eq!(entry.reason, Reason::Panicked);
        assert!(
            entry.error.contains("panicked: boom on /boom"),
            "{}",
            entry.error
        );
    }
    let reports = p.shutdown(Duration::from_secs(1)).await;
    assert_eq!(reports[0].delivered, 8);
}

#[tokio::test(start_paused = true)]
async fn an_exhausted_retry_budget_is_recorded_with_every_attempt() {
    let dir = tempfile::tempdir().unwrap();
    let dead_letters = store(&dir).await;
    let sink = Arc::new(Scripted::default());
    sink.fail_next(3);
    let mut s = spec("a");
    s.batch.events = 2;
    s.retry.attempts = 3;
    s.retry.initial = Duration::from_secs(10);
    s.retry.max = Duration::from_secs(10);
    let p = pipeline_with(vec![(s, sink.clone())], Some(dead_letters.clone()));
    let router = p.router();
    for seq in 1..=5 {
        router.route(&event(seq, "/t"));
    }
    p.forwarder("a").unwrap().wait_acked(5).await;
    // The first batch (1, 2) used up its three attempts; the rest went through.
    assert_eq!(sink.seqs(), [3, 4, 5]);
    assert_eq!(sink.calls.load(Ordering::SeqCst), 3 + 2);
    let entries = dead_letters.store.list(None, None).await.unwrap();
    assert_eq!(entries.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2]);
    for entry in &entries {
        assert_eq!(entry.reason, Reason::RetriesExhausted);
        assert_eq!(entry.attempts, 3);
        assert_eq!(entry.error, "sink down");
        // Two backoffs of at most 10s each separate the first and the last attempt.
        let span = time(&entry.last_attempt_at)
            .duration_since(time(&entry.first_attempt_at))
            .unwrap();
        assert!(span <= Duration::from_secs(20), "{span:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn requested_entries_are_redelivered_and_removed() {
    let dir = tempfile::tempdir().unwrap();
    let dead_letters = store(&dir).await;
    let sink = Arc::new(Scripted::default());
    *sink.poison.lock().unwrap() = Some("/bad");
    let mut s = spec("a");
    s.batch.events = 2;
    let p = pipeline_with(vec![(s, sink.clone())], Some(dead_letters.clone()));
    let router = p.router();
    // 1, 2 die together; 3 and 4 go through.
    for (seq, topic) in [(1, "/bad"), (2, "/bad")] {
        router.route(&event(seq, topic));
    }
    p.forwarder("a").unwrap().wait_acked(2).await;
    for (seq, topic) in [(3, "/ok"), (4, "/ok")] {
        router.route(&event(seq, topic));
    }
    p.forwarder("a").unwrap().wait_acked(4).await;
    let store = &dead_letters.store;
    assert_eq!(store.list(None, None).await.unwrap().len(), 2);

    // Nothing happens to dead entries until someone asks.
    tokio::time::sleep(POLL * 3).await;
    assert_eq!(sink.seqs(), [3, 4]);

    *sink.poison.lock().unwrap() = None;
    assert_eq!(
        store.request(Some("a".into()), Vec::new()).await.unwrap(),
        2
    );
    until_store(store, "the redelivered entries to be removed", |e| {
        e.is_empty()
    })
    .await;
    assert_eq!(sink.seqs(), [3, 4, 1, 2]);

    // Live events keep flowing after a redelivery.
    router.route(&event(5, "/ok"));
    p.forwarder("a").unwrap().wait_acked(5).await;
    assert_eq!(sink.seqs(), [3, 4, 1, 2, 5]);
}

#[tokio::test(start_paused = true)]
async fn a_redelivery_that_fails_again_is_recorded_dead_with_attempts_added() {
    let dir = tempfile::tempdir().unwrap();
    let dead_letters = store(&dir).await;
    let sink = Arc::new(Scripted::default());
    sink.fail_permanently.store(true, Ordering::SeqCst);
    let p = pipeline_with(vec![(spec("a"), sink.clone())], Some(dead_letters.clone()));
    let router = p.router();
    router.route(&event(1, "/t"));
    p.forwarder("a").unwrap().wait_acked(1).await;
    let store = &dead_letters.store;
    let first = store.list(None, None).await.unwrap().remove(0);
    assert_eq!(first.attempts, 1);

    assert_eq!(store.request(None, Vec::new()).await.unwrap(), 1);
    let again = until_store(store, "the entry to die again", |e| {
        e.len() == 1 && e[0].state == State::Dead && e[0].attempts == 2
    })
    .await;
    let again = &again[0];
    assert_eq!(again.id, first.id, "the same row, updated");
    assert_eq!(again.first_attempt_at, first.first_attempt_at);
    assert!(again.last_attempt_at >= first.last_attempt_at);
    assert!(again.dead_at >= first.dead_at);
    assert_eq!(again.retry_requested_at, None);
    assert!(sink.seqs().is_empty());
}

#[tokio::test(start_paused = true)]
async fn requests_made_before_start_go_first_and_unknown_forwarders_entries_stay_put() {
    let dir = tempfile::tempdir().unwrap();
    let dead_letters = store(&dir).await;
    let store = &dead_letters.store;
    // Entries of this forwarder and of one that is not configured (it stays put).
    store
        .record("a", vec![event(100, "/old")], old_failure())
        .await
        .unwrap();
    store
        .record("gone", vec![event(101, "/old")], old_failure())
        .await
        .unwrap();
    store.request(None, Vec::new()).await.unwrap();
    let sink = Arc::new(Scripted::default());
    let mut s = spec("a");
    s.batch.events = 1;
    let p = pipeline_with(vec![(s, sink.clone())], Some(dead_letters.clone()));
    let router = p.router();
    for seq in 1..=50 {
        router.route(&event(seq, "/t"));
    }
    p.forwarder("a").unwrap().wait_acked(50).await;
    let left = until_store(store, "a's entry to be redelivered", |e| e.len() == 1).await;
    assert_eq!(
        (left[0].forwarder.as_str(), left[0].state),
        ("gone", State::Requested)
    );
    // Looked for at start, before the first live batch; live order is untouched.
    let seqs = sink.seqs();
    assert_eq!(seqs[0], 100);
    assert_eq!(seqs[1..], (1..=50).collect::<Vec<_>>());
}

/// A panic outside a delivery (here: in a dead letter's redelivery, which the worker
/// runs between batches) restarts the worker instead of leaving it dead: live events
/// still flow afterwards.
#[tokio::test(start_paused = true)]
async fn a_worker_that_panics_between_batches_is_restarted_and_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let dead_letters = store(&dir).await;
    let store = &dead_letters.store;
    let sink = Arc::new(Scripted::default());
    *sink.panic_on.lock().unwrap() = Some("/boom");
    store
        .record("a", vec![event(100, "/boom")], old_failure())
        .await
        .unwrap();
    assert_eq!(store.request(None, Vec::new()).await.unwrap(), 1);
    let p = pipeline_with(vec![(spec("a"), sink.clone())], Some(dead_letters.clone()));
    let router = p.router();
    until_store(store, "the redelivery to be taken", |e| {
        e.len() == 1 && e[0].state == State::Queued
    })
    .await;
    for seq in 1..=3 {
        router.route(&event(seq, "/ok"));
    }
    p.forwarder("a").unwrap().wait_acked(3).await;
    assert_eq!(sink.seqs(), [1, 2, 3]);
    let reports = p.shutdown(Duration::from_secs(1)).await;
    assert_eq!(reports[0].delivered, 3, "the restarted worker's report");
}
