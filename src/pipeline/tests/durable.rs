//! Events from a forwarder's queue reach its sink only once the spool holds them:
//! a crash must not leave a sink with an event the spool lost (its seq would be given
//! to another event after the restart, and an upstream change told twice). The
//! spool's syncs are held back, or failed, by a test gate.

use std::sync::atomic::Ordering;

use super::{event, spec};
use crate::pipeline::*;
use crate::spool::{Gate, Spool, SpoolSettings};
use crate::testing::Scripted;

const DEADLINE: Duration = Duration::from_secs(60);

/// How long a sink is watched for an event it must not get yet.
const WATCH: Duration = Duration::from_millis(300);

fn start(spool: &Spool, sink: &Arc<Scripted>) -> Pipeline {
    Pipeline::from_forwarders_with(
        [spec("sink").parts(Arc::clone(sink) as Arc<dyn Forwarder>, None)],
        Some(BacklogStart {
            backlog: Arc::new(spool.clone()),
            start_seq: spool.next_seq(),
        }),
    )
}

fn open(dir: &tempfile::TempDir) -> Spool {
    let (spool, _) = Spool::open(
        &dir.path().join("spool"),
        &SpoolSettings::default(),
        &["sink"],
    )
    .unwrap();
    spool
}

/// Appends to the spool, then routes: the order the exchange keeps.
fn accept(spool: &Spool, router: &Router, topic: &str) -> u64 {
    let event = event(spool.next_seq(), topic);
    let _ticket = spool.append(&event).unwrap();
    router.route(&event);
    event.seq
}

async fn watch_sink(sink: &Scripted) -> usize {
    let end = tokio::time::Instant::now() + WATCH;
    while tokio::time::Instant::now() < end && sink.calls.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    sink.calls.load(Ordering::SeqCst)
}

#[tokio::test]
async fn a_queued_event_is_handed_to_the_sink_only_once_the_spool_has_synced_it() {
    let dir = tempfile::tempdir().unwrap();
    let spool = open(&dir);
    let sink = Arc::new(Scripted::default());
    let p = start(&spool, &sink);
    spool.gate_syncs(Gate::Held);
    let seq = accept(&spool, &p.router(), "/t");
    assert_eq!(
        watch_sink(&sink).await,
        0,
        "delivered before it was durable"
    );
    assert!(spool.stats().durable_seq < seq);

    spool.gate_syncs(Gate::Open);
    let wait = p.forwarder("sink").unwrap().wait_acked(seq);
    tokio::time::timeout(DEADLINE, wait)
        .await
        .expect("delivered once durable");
    assert_eq!(sink.seqs(), vec![seq]);
    p.shutdown(DEADLINE).await;
    spool.close().await.unwrap();
}

#[tokio::test]
async fn a_queued_event_the_spool_failed_to_sync_never_reaches_the_sink() {
    let dir = tempfile::tempdir().unwrap();
    let spool = open(&dir);
    let sink = Arc::new(Scripted::default());
    let p = start(&spool, &sink);
    spool.gate_syncs(Gate::Failing);
    accept(&spool, &p.router(), "/t");
    tokio::time::timeout(DEADLINE, spool.failed())
        .await
        .expect("the sync fails");
    assert_eq!(
        watch_sink(&sink).await,
        0,
        "delivered after its sync failed"
    );
    let reports = p.shutdown(DEADLINE).await;
    assert_eq!(reports.len(), 1);
    assert_eq!(reports[0].delivered, 0);
    assert_eq!(reports[0].undelivered, 1);
    assert!(sink.seqs().is_empty());
}
