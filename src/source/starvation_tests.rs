use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;

const SESSION: Duration = Duration::from_secs(10);

fn lag(partition: i32, committed: Option<i64>, high: i64) -> PartitionLag {
    PartitionLag {
        topic: "fleet".into(),
        partition,
        committed,
        low: 0,
        high,
    }
}

/// Samples every `step` from `start` for `span`; returns the last verdict.
fn judge_over(
    judge: &mut Judge,
    start: Instant,
    span: Duration,
    step: Duration,
    mut sample: impl FnMut(u32) -> Vec<PartitionLag>,
) -> Option<Starved> {
    let mut verdict = None;
    let mut n = 0;
    while start + step * n <= start + span {
        let now = start + step * n;
        verdict = judge.judge(start, SystemTime::UNIX_EPOCH, &sample(n), now);
        n += 1;
    }
    verdict
}

#[test]
fn messages_no_one_reads_starve_a_member_without_partitions() {
    let start = Instant::now();
    let mut judge = Judge::new(SESSION, false);
    // Partition 0's committed offset stays at 40 of 100; partition 1 is read to
    // its end.
    let sample = |_| vec![lag(0, Some(40), 100), lag(1, Some(7), 7)];
    let starved = judge_over(&mut judge, start, SESSION, Duration::from_secs(2), sample)
        .expect("starved once it held nothing for the session timeout");
    assert_eq!(starved.unread, 60);
    assert_eq!(starved.stuck, vec![("fleet".to_owned(), 0)]);
    assert_eq!(starved.session_timeout, SESSION);
}

#[test]
fn not_before_the_session_timeout() {
    let start = Instant::now();
    let mut judge = Judge::new(SESSION, false);
    let verdict = judge_over(
        &mut judge,
        start,
        SESSION - Duration::from_millis(1),
        Duration::from_secs(1),
        |_| vec![lag(0, Some(40), 100)],
    );
    assert_eq!(verdict, None);
}

/// Holding nothing for long is not enough: the partitions must have stood still
/// for a session timeout too, as seen by this source (it cannot know what
/// happened before it looked).
#[test]
fn partitions_must_stand_still_for_a_session_timeout_once_seen() {
    let start = Instant::now();
    let mut judge = Judge::new(SESSION, false);
    // First sample long after the member last held a partition.
    let late = start + 3 * SESSION;
    let first = judge.judge(start, SystemTime::UNIX_EPOCH, &[lag(0, Some(1), 9)], late);
    assert_eq!(first, None, "one sample shows no standstill");
    let later = judge.judge(
        start,
        SystemTime::UNIX_EPOCH,
        &[lag(0, Some(1), 9)],
        late + SESSION,
    );
    assert!(later.is_some());
}

/// Partitions that stood still while the member held nothing before do not make
/// it starved the moment it holds nothing again (it held partitions in between,
/// between two checks): the session timeout runs from its latest loss.
#[test]
fn a_member_that_just_lost_its_partitions_is_not_starved_yet() {
    let start = Instant::now();
    let mut judge = Judge::new(SESSION, false);
    let stuck = |_| vec![lag(0, Some(40), 100)];
    assert!(
        judge_over(
            &mut judge,
            start,
            2 * SESSION,
            Duration::from_secs(2),
            stuck
        )
        .is_some()
    );
    let again = start + 2 * SESSION + Duration::from_secs(1);
    assert_eq!(
        judge.judge(again, SystemTime::UNIX_EPOCH, &stuck(0), again),
        None
    );
    assert!(
        judge
            .judge(again, SystemTime::UNIX_EPOCH, &stuck(0), again + SESSION)
            .is_some()
    );
}

/// A standby member beside members that read: their committed offsets move, so
/// holding nothing is its normal state.
#[test]
fn a_standby_beside_readers_is_not_starved() {
    let start = Instant::now();
    let mut judge = Judge::new(SESSION, false);
    let verdict = judge_over(
        &mut judge,
        start,
        5 * SESSION,
        Duration::from_secs(2),
        // Always behind (the producers are faster), never standing still.
        |n| vec![lag(0, Some(i64::from(n) * 10), i64::from(n) * 10 + 500)],
    );
    assert_eq!(verdict, None);
}

#[test]
fn a_group_with_nothing_unread_is_idle_not_starved() {
    let start = Instant::now();
    let mut judge = Judge::new(SESSION, false);
    let verdict = judge_over(
        &mut judge,
        start,
        3 * SESSION,
        Duration::from_secs(2),
        |_| vec![lag(0, Some(100), 100), lag(1, None, 0)],
    );
    assert_eq!(verdict, None);
}

/// Without a committed offset, what waits depends on `start`: everything the
/// partition holds (earliest), or nothing (latest: a new reader starts at the end).
#[test]
fn without_a_commit_the_start_decides_what_waits() {
    let start = Instant::now();
    let never_committed = |_| {
        vec![PartitionLag {
            topic: "fleet".into(),
            partition: 0,
            committed: None,
            low: 20,
            high: 50,
        }]
    };
    let step = Duration::from_secs(2);
    let mut earliest = Judge::new(SESSION, false);
    let starved = judge_over(&mut earliest, start, SESSION, step, never_committed)
        .expect("earliest: 30 messages wait");
    assert_eq!(starved.unread, 30);
    let mut latest = Judge::new(SESSION, true);
    assert_eq!(
        judge_over(&mut latest, start, SESSION, step, never_committed),
        None
    );
}

#[test]
fn forgetting_starts_the_watch_over() {
    let start = Instant::now();
    let mut judge = Judge::new(SESSION, false);
    let stuck = |_| vec![lag(0, Some(40), 100)];
    assert!(judge_over(&mut judge, start, SESSION, Duration::from_secs(2), stuck).is_some());
    judge.forget();
    let again = start + SESSION + Duration::from_secs(1);
    assert_eq!(
        judge.judge(start, SystemTime::UNIX_EPOCH, &stuck(0), again),
        None,
        "after holding partitions, the standstill is measured anew"
    );
}

#[test]
fn the_check_interval_follows_the_session_timeout_within_bounds() {
    assert_eq!(check_interval(SESSION), Duration::from_millis(2500));
    assert_eq!(
        check_interval(Duration::from_millis(1500)),
        Duration::from_secs(1)
    );
    assert_eq!(
        check_interval(Duration::from_secs(300)),
        Duration::from_secs(15)
    );
}

// ------------------------------------------------------------ the watch loop

/// A group whose samples the test sets; counts the calls.
#[derive(Default)]
struct Script {
    sample: Mutex<Vec<PartitionLag>>,
    calls: AtomicUsize,
    /// While set, a call blocks until the test sends on it.
    gate: Mutex<Option<std::sync::mpsc::Receiver<()>>>,
}

impl Backlog for Script {
    fn sample(&self) -> Result<Vec<PartitionLag>, String> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let gate = self.gate.lock().unwrap().take();
        if let Some(gate) = gate {
            let _ = gate.recv();
        }
        Ok(self.sample.lock().unwrap().clone())
    }
}

fn source() -> Arc<SourceStats> {
    let stats = Arc::new(SourceStats::new(
        "fleet",
        &["fleet".to_owned()],
        "central",
        None,
    ));
    stats.assignment_reset();
    stats
}

/// Lets the watch task run until it waits on the clock again.
async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_member_kept_out_is_starved_after_the_session_timeout_and_not_once_assigned() {
    let stats = source();
    let script = Arc::new(Script::default());
    *script.sample.lock().unwrap() = vec![lag(0, Some(3), 90)];
    let cancel = CancellationToken::new();
    let watcher = tokio::spawn(watch(
        Arc::clone(&stats),
        Arc::clone(&script) as Arc<dyn Backlog>,
        SESSION,
        false,
        cancel.clone(),
    ));
    let started = Instant::now();
    // Every check before the session timeout: not starved.
    while started.elapsed() < SESSION - check_interval(SESSION) {
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(stats.starved(), None, "at {:?}", started.elapsed());
    }
    // Within a check interval after the session timeout (the first sample came a
    // check interval after the start): starved.
    tokio::time::sleep(3 * check_interval(SESSION)).await;
    let starved = stats.starved().expect("starved");
    assert_eq!(starved.unread, 87);
    assert_eq!(starved.stuck, vec![("fleet".to_owned(), 0)]);

    // Given the partition, it is not starved at the next check.
    stats.assigned(&[("fleet".to_owned(), 0)], false, Some(3), None);
    tokio::time::sleep(check_interval(SESSION)).await;
    assert_eq!(stats.starved(), None);
    // Nor while it holds it, whatever the group's state: no more samples taken.
    let calls = script.calls.load(Ordering::SeqCst);
    tokio::time::sleep(5 * SESSION).await;
    assert_eq!(stats.starved(), None);
    assert_eq!(script.calls.load(Ordering::SeqCst), calls);
    cancel.cancel();
    watcher.await.expect("watch ends");
}

#[tokio::test(start_paused = true)]
async fn a_group_that_reads_its_messages_does_not_starve_a_standby() {
    let stats = source();
    let script = Arc::new(Script::default());
    let cancel = CancellationToken::new();
    let watcher = tokio::spawn(watch(
        Arc::clone(&stats),
        Arc::clone(&script) as Arc<dyn Backlog>,
        SESSION,
        false,
        cancel.clone(),
    ));
    for n in 0..40 {
        // Another member reads on: its commits move every couple of seconds.
        *script.sample.lock().unwrap() = vec![lag(0, Some(n * 10), n * 10 + 200)];
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(stats.starved(), None);
    }
    assert!(script.calls.load(Ordering::SeqCst) > 10, "it did look");
    cancel.cancel();
    watcher.await.expect("watch ends");
}

/// A broker that does not answer: the check gives up after its timeout, keeps
/// waiting for the same answer rather than asking again on another thread each
/// time, and judges once the answer comes.
#[tokio::test(start_paused = true)]
async fn a_sample_that_hangs_is_waited_for_once_not_piled_up() {
    let stats = source();
    let script = Arc::new(Script::default());
    *script.sample.lock().unwrap() = vec![lag(0, Some(3), 90)];
    let (release, gate) = std::sync::mpsc::channel();
    *script.gate.lock().unwrap() = Some(gate);
    let cancel = CancellationToken::new();
    let watcher = tokio::spawn(watch(
        Arc::clone(&stats),
        Arc::clone(&script) as Arc<dyn Backlog>,
        SESSION,
        false,
        cancel.clone(),
    ));
    // The paused clock does not move on its own while a blocking call runs.
    let real_deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while script.calls.load(Ordering::SeqCst) == 0 {
        assert!(std::time::Instant::now() < real_deadline, "no call");
        tokio::time::advance(Duration::from_millis(500)).await;
        settle().await;
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    for _ in 0..60 {
        tokio::time::advance(Duration::from_secs(1)).await;
        settle().await;
    }
    assert_eq!(script.calls.load(Ordering::SeqCst), 1, "one call in flight");
    assert_eq!(stats.starved(), None, "no verdict without an answer");
    release.send(()).expect("release the call");
    // The answer arrives (real time), then samples go on as usual.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while stats.starved().is_none() {
        assert!(std::time::Instant::now() < deadline, "no verdict");
        tokio::time::advance(Duration::from_secs(1)).await;
        settle().await;
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert!(script.calls.load(Ordering::SeqCst) > 1);
    cancel.cancel();
    watcher.await.expect("watch ends");
}
