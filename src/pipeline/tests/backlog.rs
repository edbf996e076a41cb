//! Forwarders with a backlog: resuming from a cursor after a restart, spilling when
//! the queue is full and rejoining it, and cursors that move past unmatched events.
//! The backlog is in memory here; the spool's own tests cover the disk.

use std::sync::atomic::Ordering;

use super::{Spec, event, spec, until};
use crate::pipeline::settings::{Overflow, QueueSettings};
use crate::pipeline::*;
use crate::testing::{MemoryBacklog, Scripted};

/// Appends to the backlog, then routes: the order the exchange keeps.
fn accept(backlog: &MemoryBacklog, router: &Router, seq: u64, topic: &str) {
    let event = event(seq, topic);
    backlog.append(&event);
    router.route(&event);
}

/// Waits (with a deadline, so a lost event fails the test instead of hanging it)
/// until the forwarder has delivered everything up to `seq`.
async fn acked(p: &Pipeline, name: &str, seq: u64) {
    let wait = p.forwarder(name).unwrap().wait_acked(seq);
    if tokio::time::timeout(Duration::from_secs(60), wait)
        .await
        .is_err()
    {
        panic!("{name} never acknowledged {seq}");
    }
}

fn start(specs: Vec<(Spec, Arc<Scripted>)>, backlog: &MemoryBacklog, start_seq: u64) -> Pipeline {
    let parts = specs
        .into_iter()
        .map(|(spec, recorder)| spec.parts(recorder, None));
    Pipeline::from_forwarders_with(
        parts,
        Some(BacklogStart {
            backlog: Arc::new(backlog.clone()),
            start_seq,
        }),
    )
}

#[tokio::test(start_paused = true)]
async fn a_full_queue_spills_to_the_backlog_and_rejoins_without_loss_or_doubles() {
    let backlog = MemoryBacklog::default();
    let sink = Arc::new(Scripted::default());
    sink.hold();
    let mut small = spec("kafka");
    small.queue.events = 3;
    assert_eq!(small.queue.overflow, Overflow::Spill, "the default");
    let p = start(vec![(small, sink.clone())], &backlog, 1);
    let router = p.router();
    accept(&backlog, &router, 1, "/t");
    until("the first batch in flight", || {
        sink.calls.load(Ordering::SeqCst) == 1
    })
    .await;
    // A long outage: far more than the queue holds, and nobody waits.
    for seq in 2..=200 {
        accept(&backlog, &router, seq, "/t");
    }
    assert_eq!(p.forwarder("kafka").unwrap().depth().0, 3);
    sink.unhold();
    acked(&p, "kafka", 200).await;
    // Back on the live queue: new events keep flowing.
    for seq in 201..=210 {
        accept(&backlog, &router, seq, "/t");
    }
    acked(&p, "kafka", 210).await;
    assert_eq!(
        sink.seqs(),
        (1..=210).collect::<Vec<_>>(),
        "each once, in order"
    );
    until("the cursor past everything", || {
        backlog.cursor("kafka") == 211
    })
    .await;
    let reports = p.shutdown(Duration::from_secs(1)).await;
    assert_eq!(reports[0].delivered, 210);
}

/// The defaults bound what a forwarder whose sink is down keeps in memory: its queue
/// stops at 10,000 events (about 20 MiB) and the rest of the outage waits in the
/// backlog, from which it is delivered, in order and once, when the sink is back.
#[tokio::test(start_paused = true)]
async fn with_the_default_queue_a_stalled_sink_holds_at_most_ten_thousand_events() {
    let backlog = MemoryBacklog::default();
    let sink = Arc::new(Scripted::default());
    sink.hold();
    let defaults = spec("kafka");
    assert_eq!(defaults.queue, QueueSettings::default());
    let p = start(vec![(defaults, sink.clone())], &backlog, 1);
    let router = p.router();
    accept(&backlog, &router, 1, "/t");
    until("the first batch in flight", || {
        sink.calls.load(Ordering::SeqCst) == 1
    })
    .await;
    let last = 30_001;
    for seq in 2..=last {
        accept(&backlog, &router, seq, "/t");
    }
    let (events, bytes) = p.forwarder("kafka").unwrap().depth();
    assert_eq!(events, 10_000, "queued in memory while the sink is stalled");
    assert!(bytes <= 4 << 20, "{bytes} bytes queued");
    sink.unhold();
    acked(&p, "kafka", last).await;
    assert_eq!(
        sink.seqs(),
        (1..=last).collect::<Vec<_>>(),
        "each once, in order"
    );
    p.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn spilling_while_events_keep_coming_hands_over_exactly_once() {
    let backlog = MemoryBacklog::default();
    let sink = Arc::new(Scripted::default());
    let mut small = spec("f");
    small.queue.events = 2;
    small.batch.events = 3;
    let p = start(vec![(small, sink.clone())], &backlog, 1);
    let router = p.router();
    // Interleave routing with the worker's progress so the hand-over between queue
    // and backlog happens at many different points.
    for seq in 1..=500 {
        accept(&backlog, &router, seq, "/t");
        if seq % 7 == 0 {
            tokio::task::yield_now().await;
        }
    }
    acked(&p, "f", 500).await;
    assert_eq!(sink.seqs(), (1..=500).collect::<Vec<_>>());
    p.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn a_restart_resumes_each_forwarder_from_its_own_cursor() {
    let backlog = MemoryBacklog::default();
    for seq in 1..=10 {
        backlog.append(&event(seq, "/t"));
    }
    backlog.set_cursor("behind", 4);
    backlog.set_cursor("current", 11);
    let behind = Arc::new(Scripted::default());
    let current = Arc::new(Scripted::default());
    let p = start(
        vec![
            (spec("behind"), behind.clone()),
            (spec("current"), current.clone()),
        ],
        &backlog,
        11,
    );
    let router = p.router();
    for seq in 11..=15 {
        accept(&backlog, &router, seq, "/t");
    }
    acked(&p, "behind", 15).await;
    acked(&p, "current", 15).await;
    assert_eq!(behind.seqs(), (4..=15).collect::<Vec<_>>());
    assert_eq!(current.seqs(), (11..=15).collect::<Vec<_>>());
    p.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn cursors_move_past_events_the_filter_does_not_want() {
    let backlog = MemoryBacklog::default();
    for seq in 1..=5 {
        backlog.append(&event(seq, if seq == 2 { "/tasks/exit" } else { "/t" }));
    }
    backlog.set_cursor("exits", 1);
    let sink = Arc::new(Scripted::default());
    let mut exits = spec("exits");
    exits.filter = r#"topic=="/tasks/exit""#;
    let p = start(vec![(exits, sink.clone())], &backlog, 6);
    let router = p.router();
    for seq in 6..=20 {
        accept(
            &backlog,
            &router,
            seq,
            if seq == 9 { "/tasks/exit" } else { "/t" },
        );
    }
    acked(&p, "exits", 9).await;
    assert_eq!(sink.seqs(), [2, 9]);
    // Nothing after 9 matches; an idle forwarder still lets the spool go.
    until("the cursor past the unmatched tail", || {
        backlog.cursor("exits") == 21
    })
    .await;
    p.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn shutdown_leaves_a_spilled_backlog_for_the_next_start() {
    let backlog = MemoryBacklog::default();
    let sink = Arc::new(Scripted::default());
    sink.hold();
    let mut small = spec("f");
    small.queue.events = 2;
    let p = start(vec![(small, sink.clone())], &backlog, 1);
    let router = p.router();
    for seq in 1..=50 {
        accept(&backlog, &router, seq, "/t");
    }
    until("the first batch in flight", || {
        sink.calls.load(Ordering::SeqCst) == 1
    })
    .await;
    let reports = p.shutdown(Duration::from_secs(1)).await;
    assert!(reports[0].kept_in_spool);
    assert!(
        backlog.cursor("f") <= 1,
        "nothing was delivered, nothing passed"
    );
}
