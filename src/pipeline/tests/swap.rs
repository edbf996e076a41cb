//! Replacing, adding and removing forwarders while events are routed, with an
//! in-memory backlog: the successor resumes exactly where its predecessor's
//! acknowledgements ended, and sees again only a batch that was cut off.

use std::sync::atomic::Ordering;

use super::{event, spec, until};
use crate::pipeline::*;
use crate::testing::{MemoryBacklog, Scripted};

fn parts(name: &'static str, sink: &Arc<Scripted>) -> Parts {
    spec(name).parts(Arc::clone(sink) as Arc<dyn Forwarder>, None)
}

fn start(backlog: &MemoryBacklog, sinks: &[(&'static str, &Arc<Scripted>)]) -> Pipeline {
    Pipeline::from_forwarders_with(
        sinks.iter().map(|(name, sink)| parts(name, sink)),
        Some(BacklogStart {
            backlog: Arc::new(backlog.clone()),
            start_seq: 1,
        }),
    )
}

fn accept(backlog: &MemoryBacklog, p: &Pipeline, seqs: std::ops::RangeInclusive<u64>) {
    for seq in seqs {
        let event = event(seq, "/t");
        backlog.append(&event);
        p.router().route(&event);
    }
}

async fn acked(p: &Pipeline, name: &str, seq: u64) {
    let wait = p.forwarder(name).unwrap().wait_acked(seq);
    if tokio::time::timeout(Duration::from_secs(60), wait)
        .await
        .is_err()
    {
        panic!("{name} never acknowledged {seq}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_replaced_forwarder_resumes_where_the_old_one_stopped() {
    let backlog = MemoryBacklog::default();
    let old = Arc::new(Scripted::default());
    let p = start(&backlog, &[("a", &old)]);
    accept(&backlog, &p, 1..=5);
    acked(&p, "a", 5).await;
    let held = p.hold("a", Duration::from_secs(1)).await.unwrap();
    assert_eq!(held.report.as_ref().map(|r| r.undelivered), Some(0));
    // Accepted while nothing runs for "a": only in the backlog.
    accept(&backlog, &p, 6..=10);
    let new = Arc::new(Scripted::default());
    assert_eq!(p.resume(held, parts("a", &new)), 6);
    accept(&backlog, &p, 11..=12);
    acked(&p, "a", 12).await;
    assert_eq!(old.seqs(), (1..=5).collect::<Vec<_>>());
    assert_eq!(new.seqs(), (6..=12).collect::<Vec<_>>());
    p.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn a_batch_the_old_one_could_not_confirm_comes_again_and_nothing_else() {
    let backlog = MemoryBacklog::default();
    let old = Arc::new(Scripted::default());
    old.hold();
    let p = start(&backlog, &[("a", &old)]);
    accept(&backlog, &p, 1..=3);
    until("the first batch in flight", || {
        old.calls.load(Ordering::SeqCst) == 1
    })
    .await;
    let held = p.hold("a", Duration::from_secs(1)).await.unwrap();
    assert!(held.report.as_ref().is_some_and(|r| r.undelivered > 0));
    accept(&backlog, &p, 4..=6);
    let new = Arc::new(Scripted::default());
    assert_eq!(p.resume(held, parts("a", &new)), 1);
    acked(&p, "a", 6).await;
    assert_eq!(new.seqs(), (1..=6).collect::<Vec<_>>());
    p.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn added_forwarders_start_at_the_next_event_and_removed_ones_get_nothing_more() {
    let backlog = MemoryBacklog::default();
    let a = Arc::new(Scripted::default());
    let p = start(&backlog, &[("a", &a)]);
    accept(&backlog, &p, 1..=3);
    let b = Arc::new(Scripted::default());
    p.add(parts("b", &b)).unwrap();
    assert!(p.add(parts("b", &b)).is_err(), "names are unique");
    assert_eq!(backlog.cursor("b"), 4);
    accept(&backlog, &p, 4..=6);
    acked(&p, "b", 6).await;
    assert_eq!(b.seqs(), [4, 5, 6]);
    let report = p.remove("b", Duration::from_secs(1)).await.unwrap();
    assert_eq!(report.map(|r| r.delivered), Some(3));
    assert!(p.forwarder("b").is_none());
    accept(&backlog, &p, 7..=8);
    acked(&p, "a", 8).await;
    assert_eq!(b.seqs(), [4, 5, 6]);
    assert_eq!(a.seqs(), (1..=8).collect::<Vec<_>>());
    let names: Vec<String> = p.forwarders().iter().map(|f| f.name.to_string()).collect();
    assert_eq!(names, ["a"]);
    p.shutdown(Duration::from_secs(1)).await;
}
