use std::time::{Duration, UNIX_EPOCH};

use prost_types::Timestamp;

use super::*;
use crate::event::Witness;
use crate::proto::containerd::events::{TaskExit, TaskStart};

fn at(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_800_000_000) + Duration::from_millis(ms)
}

fn any<M: prost::Message>(type_url: &str, m: &M) -> Any {
    Any {
        type_url: type_url.into(),
        value: m.encode_to_vec(),
    }
}

fn exit(id: &str, status: u32) -> (&'static str, Any) {
    let event = TaskExit {
        container_id: id.into(),
        id: id.into(),
        pid: 7,
        exit_status: status,
        exited_at: None,
    };
    ("/tasks/exit", any("containerd.events.TaskExit", &event))
}

fn start(id: &str) -> (&'static str, Any) {
    let event = TaskStart {
        container_id: id.into(),
        pid: 7,
    };
    ("/tasks/start", any("containerd.events.TaskStart", &event))
}

fn told((topic, event): (&'static str, Any), id: &str) -> Change {
    Change {
        namespace: "default".into(),
        topic,
        event,
        daemon_time: None,
        object: Object::Task("default".into(), id.into()),
        from: Witness::Containerd,
        reason: None,
        bound: false,
        order: 0,
    }
}

fn live((topic, event): (&'static str, Any), published: u64) -> Envelope {
    Envelope {
        timestamp: Some(Timestamp::from(at(published))),
        namespace: "default".into(),
        topic: topic.into(),
        event: Some(event),
    }
}

#[test]
fn a_live_event_published_before_the_lists_repeats_what_they_told_once() {
    let mut memory = Told::default();
    memory.remember(&[told_change("c1"), told(start("c2"), "c2")], at(1000));
    // Published after the lists began: a change of its own, not a repeat.
    assert!(!memory.repeats(&live(exit("c1", 3), 1000)));
    // Another status, another container, another namespace: not the change told.
    assert!(!memory.repeats(&live(exit("c1", 4), 900)));
    assert!(!memory.repeats(&live(exit("c3", 3), 900)));
    let mut elsewhere = live(exit("c1", 3), 900);
    elsewhere.namespace = "k8s.io".into();
    assert!(!memory.repeats(&elsewhere));
    // The one that repeats it, once.
    assert!(memory.repeats(&live(exit("c1", 3), 900)));
    assert!(!memory.repeats(&live(exit("c1", 3), 900)));
    assert!(memory.repeats(&live(start("c2"), 950)));
}

#[test]
fn what_a_reconcile_told_is_forgotten_once_the_stream_is_well_past_it() {
    let mut memory = Told::default();
    memory.remember(&[told_change("c1")], at(1000));
    // An event 10 s and more past the lists: the stream is past anything late.
    assert!(!memory.repeats(&live(start("c9"), 11_001)));
    assert!(!memory.repeats(&live(exit("c1", 3), 900)));
    // At most MAX_TOLD changes are kept, the oldest forgotten first.
    let many: Vec<Change> = (0..=MAX_TOLD)
        .map(|n| told(start(&format!("c{n}")), &format!("c{n}")))
        .collect();
    memory.remember(&many, at(20_000));
    assert!(!memory.repeats(&live(start("c0"), 19_000)));
    assert!(memory.repeats(&live(start("c1"), 19_000)));
}

fn told_change(id: &str) -> Change {
    told(exit(id, 3), id)
}
