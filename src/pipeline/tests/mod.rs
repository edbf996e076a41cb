//! The pipeline with in-memory forwarders: order, retries, isolation, overflow,
//! batching and shutdown. Time is paused where backoff or linger is involved.

mod backlog;
mod checkpoint;
mod deadletter;
mod durable;
mod swap;

use std::sync::atomic::Ordering;

use super::settings::{BatchSettings, CheckpointSettings, Overflow, QueueSettings, RetrySettings};
use super::*;
use crate::event::{Event, Source};
use crate::testing::{self, Scripted};
use crate::units::ByteSize;
use tokio::time::Instant;

/// Event `seq` on `topic`, from eventgate itself: the pipeline looks at nothing else.
pub(super) fn event(seq: u64, topic: &str) -> Arc<Event> {
    testing::event(seq)
        .topic(topic)
        .source(Source::Internal)
        .arc()
}

pub(super) struct Spec {
    pub name: &'static str,
    pub filter: &'static str,
    pub queue: QueueSettings,
    pub batch: BatchSettings,
    pub retry: RetrySettings,
    pub checkpoint: CheckpointSettings,
}

pub(super) fn spec(name: &'static str) -> Spec {
    Spec {
        name,
        filter: "",
        queue: QueueSettings::default(),
        batch: BatchSettings {
            events: 10,
            bytes: ByteSize(1 << 20),
            linger: Duration::ZERO,
        },
        retry: RetrySettings {
            timeout: Duration::from_secs(5),
            initial: Duration::from_millis(10),
            max: Duration::from_millis(100),
            attempts: 0,
            elapsed: Duration::ZERO,
        },
        checkpoint: CheckpointSettings::default(),
    }
}

impl Spec {
    /// The forwarder's parts: this spec around `forwarder`.
    pub(super) fn parts(
        self,
        forwarder: Arc<dyn Forwarder>,
        dead_letters: Option<DeadLetters>,
    ) -> Parts {
        Parts {
            name: self.name.into(),
            filter: Filter::parse_all(&[self.filter]).unwrap(),
            forwarder,
            queue: self.queue,
            batch: self.batch,
            retry: self.retry,
            checkpoint: self.checkpoint,
            dead_letters,
        }
    }
}

fn pipeline(specs: Vec<(Spec, Arc<Scripted>)>) -> Pipeline {
    pipeline_with(specs, None)
}

pub(super) fn pipeline_with(
    specs: Vec<(Spec, Arc<Scripted>)>,
    dead_letters: Option<DeadLetters>,
) -> Pipeline {
    Pipeline::from_forwarders(
        specs
            .into_iter()
            .map(|(spec, recorder)| spec.parts(recorder, dead_letters.clone())),
    )
}

pub(super) async fn until(what: &str, check: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn retried_batches_arrive_before_anything_behind_them() {
    let sink = Arc::new(Scripted::default());
    sink.fail_next(3);
    let p = pipeline(vec![(spec("a"), sink.clone())]);
    let router = p.router();
    for seq in 1..=35 {
        router.route(&event(seq, "/t"));
    }
    p.forwarder("a").unwrap().wait_acked(35).await;
    assert_eq!(sink.seqs(), (1..=35).collect::<Vec<_>>());
    assert!(sink.calls.load(Ordering::SeqCst) >= 4 + 3);
    let reports = p.shutdown(Duration::from_secs(1)).await;
    assert_eq!(reports[0].delivered, 35);
    assert_eq!(reports[0].failed, 0);
}

#[tokio::test(start_paused = true)]
async fn route_filters_pick_each_forwarders_events() {
    let exits = Arc::new(Scripted::default());
    let all = Arc::new(Scripted::default());
    let mut only_exits = spec("exits");
    only_exits.filter = r#"topic=="/tasks/exit""#;
    let p = pipeline(vec![
        (only_exits, exits.clone()),
        (spec("all"), all.clone()),
    ]);
    let router = p.router();
    for (seq, topic) in [
        (1, "/tasks/start"),
        (2, "/tasks/exit"),
        (3, "/tasks/delete"),
    ] {
        router.route(&event(seq, topic));
    }
    p.forwarder("all").unwrap().wait_acked(3).await;
    p.forwarder("exits").unwrap().wait_acked(2).await;
    assert_eq!(exits.seqs(), [2]);
    assert_eq!(all.seqs(), [1, 2, 3]);
}

#[tokio::test(start_paused = true)]
async fn a_stuck_forwarder_never_stalls_another() {
    let stuck = Arc::new(Scripted::default());
    stuck.hold();
    let healthy = Arc::new(Scripted::default());
    let mut small = spec("stuck");
    small.queue.events = 5;
    small.queue.overflow = Overflow::DropOldest;
    let p = pipeline(vec![
        (small, stuck.clone()),
        (spec("healthy"), healthy.clone()),
    ]);
    let router = p.router();
    router.route(&event(1, "/t"));
    until("the stuck batch in flight", || {
        stuck.calls.load(Ordering::SeqCst) == 1
    })
    .await;
    for seq in 2..=100 {
        router.route(&event(seq, "/t"));
    }
    p.forwarder("healthy").unwrap().wait_acked(100).await;
    assert_eq!(healthy.seqs(), (1..=100).collect::<Vec<_>>());
    // The stuck one holds its first batch in flight and only the newest 5 queued.
    assert_eq!(p.forwarder("stuck").unwrap().depth().0, 5);
    stuck.unhold();
    p.forwarder("stuck").unwrap().wait_acked(100).await;
    assert_eq!(stuck.seqs(), [1, 96, 97, 98, 99, 100]);
}

#[tokio::test(start_paused = true)]
async fn drop_newest_keeps_what_was_queued_first() {
    let sink = Arc::new(Scripted::default());
    sink.hold();
    let mut s = spec("a");
    s.queue.events = 3;
    s.queue.overflow = Overflow::DropNewest;
    s.batch.events = 1;
    let p = pipeline(vec![(s, sink.clone())]);
    let router = p.router();
    router.route(&event(1, "/t"));
    until("the first batch in flight", || {
        sink.calls.load(Ordering::SeqCst) == 1
    })
    .await;
    for seq in 2..=10 {
        router.route(&event(seq, "/t"));
    }
    sink.unhold();
    p.forwarder("a").unwrap().wait_acked(4).await;
    assert_eq!(sink.seqs(), [1, 2, 3, 4]);
}

#[tokio::test(start_paused = true)]
async fn block_makes_publishers_wait_then_refuses_at_the_deadline() {
    let sink = Arc::new(Scripted::default());
    sink.hold();
    let mut s = spec("a");
    s.queue.events = 2;
    s.queue.overflow = Overflow::Block;
    s.queue.block_timeout = Duration::from_secs(2);
    s.batch.events = 1;
    let p = pipeline(vec![(s, sink.clone())]);
    let router = p.router();
    router.route(&event(1, "/t"));
    until("the first batch in flight", || {
        sink.calls.load(Ordering::SeqCst) == 1
    })
    .await;
    router.route(&event(2, "/t"));
    router.route(&event(3, "/t"));

    let started = Instant::now();
    let full = router.admit(&event(0, "/t")).await.unwrap_err();
    assert_eq!(Instant::now() - started, Duration::from_secs(2));
    assert_eq!(full.forwarder, "a");
    assert!(full.to_string().contains("queue is full"), "{full}");

    // Room appears while a publisher waits: it is admitted.
    let waiting = {
        let router = router.clone();
        tokio::spawn(async move { router.admit(&event(0, "/t")).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiting.is_finished());
    sink.unhold();
    waiting.await.unwrap().unwrap();
    p.forwarder("a").unwrap().wait_acked(3).await;
    assert_eq!(sink.seqs(), [1, 2, 3]);
}

#[tokio::test(start_paused = true)]
async fn events_a_block_forwarder_does_not_route_are_never_held_up() {
    let sink = Arc::new(Scripted::default());
    sink.hold();
    let mut s = spec("exits");
    s.filter = r#"topic=="/tasks/exit""#;
    s.queue.events = 1;
    s.queue.overflow = Overflow::Block;
    s.batch.events = 1;
    let p = pipeline(vec![(s, sink.clone())]);
    let router = p.router();
    router.route(&event(1, "/tasks/exit"));
    router.route(&event(2, "/tasks/exit"));
    let started = Instant::now();
    router.admit(&event(0, "/tasks/start")).await.unwrap();
    assert_eq!(Instant::now(), started);
}

#[tokio::test(start_paused = true)]
async fn batches_fill_up_during_linger_and_respect_their_limits() {
    let sink = Arc::new(Scripted::default());
    let mut s = spec("a");
    s.batch = BatchSettings {
        events: 4,
        bytes: ByteSize(1 << 20),
        linger: Duration::from_millis(100),
    };
    let p = pipeline(vec![(s, sink.clone())]);
    let router = p.router();
    router.route(&event(1, "/t"));
    tokio::time::sleep(Duration::from_millis(10)).await;
    router.route(&event(2, "/t"));
    tokio::time::sleep(Duration::from_millis(10)).await;
    for seq in 3..=9 {
        router.route(&event(seq, "/t"));
    }
    p.forwarder("a").unwrap().wait_acked(9).await;
    let batches = sink.batches.lock().unwrap().clone();
    assert_eq!(batches, [vec![1, 2, 3, 4], vec![5, 6, 7, 8], vec![9]]);
}

#[tokio::test(start_paused = true)]
async fn permanent_failures_are_given_up_on_and_reported() {
    let sink = Arc::new(Scripted::default());
    sink.fail_permanently.store(true, Ordering::SeqCst);
    let p = pipeline(vec![(spec("a"), sink.clone())]);
    let router = p.router();
    for seq in 1..=3 {
        router.route(&event(seq, "/t"));
    }
    p.forwarder("a").unwrap().wait_acked(3).await;
    let reports = p.shutdown(Duration::from_secs(1)).await;
    assert_eq!(reports[0].failed, 3);
    assert_eq!(reports[0].delivered, 0);
}

#[tokio::test(start_paused = true)]
async fn shutdown_drains_queues_within_the_deadline() {
    let slow = Arc::new(Scripted::default());
    slow.fail_next(2);
    let p = pipeline(vec![(spec("a"), slow.clone())]);
    let router = p.router();
    for seq in 1..=50 {
        router.route(&event(seq, "/t"));
    }
    let reports = p.shutdown(Duration::from_secs(10)).await;
    assert_eq!(reports[0].delivered, 50);
    assert_eq!(reports[0].undelivered, 0);
    assert_eq!(slow.seqs(), (1..=50).collect::<Vec<_>>());
}

#[tokio::test(start_paused = true)]
async fn shutdown_reports_what_a_dead_sink_could_not_take() {
    let dead = Arc::new(Scripted::default());
    dead.hold();
    let healthy = Arc::new(Scripted::default());
    let p = pipeline(vec![
        (spec("dead"), dead.clone()),
        (spec("ok"), healthy.clone()),
    ]);
    let router = p.router();
    for seq in 1..=25 {
        router.route(&event(seq, "/t"));
    }
    let started = Instant::now();
    let reports = p.shutdown(Duration::from_secs(3)).await;
    assert!(Instant::now() - started <= Duration::from_secs(3) + Duration::from_millis(10));
    let dead_report = reports.iter().find(|r| r.forwarder == "dead").unwrap();
    assert_eq!(dead_report.delivered, 0);
    assert_eq!(dead_report.undelivered, 25);
    let ok_report = reports.iter().find(|r| r.forwarder == "ok").unwrap();
    assert_eq!(ok_report.delivered, 25);
}
