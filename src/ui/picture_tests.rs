//! Pictures built from real SQLite stores written by the store's own insert.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use super::*;
use crate::event::{Clock, Origin, Workload};
use crate::markers::{self, Connected};
use crate::testing::{self, T0, TempStore};

pub(crate) fn workload(namespace: &str, pod: &str, container: Option<&str>) -> Arc<Workload> {
    Arc::new(testing::pod_workload(namespace, pod, container))
}

/// Builds events one second apart from T0 (plus `offset` seconds).
pub(crate) struct Life {
    pub events: Vec<Event>,
    pub offset: i64,
}

impl Life {
    pub(crate) fn new() -> Self {
        Self {
            events: Vec::new(),
            offset: 0,
        }
    }

    pub(crate) fn add(&mut self, topic: &str, json: &str, workload: Option<Arc<Workload>>) {
        self.push(topic, json, workload, Origin::Live);
    }

    pub(crate) fn push(
        &mut self,
        topic: &str,
        json: &str,
        workload: Option<Arc<Workload>>,
        origin: Origin,
    ) {
        let type_name = match topic {
            "/tasks/start" => "containerd.events.TaskStart",
            "/tasks/exit" => "containerd.events.TaskExit",
            "/tasks/oom" => "containerd.events.TaskOOM",
            "/containers/delete" => "containerd.events.ContainerDelete",
            _ => "containerd.events.ContainerCreate",
        };
        let n = self.events.len() as i64;
        self.events.push(
            testing::event(n as u64 + 1)
                .at(T0 + self.offset + n)
                .namespace("k8s.io")
                .topic(topic)
                .json(type_name, json)
                .workload(workload)
                .origin(origin)
                .node("node-a")
                .build(),
        );
    }
}

pub(crate) fn start(id: &str) -> String {
    format!(r#"{{"container_id":"{id}","pid":42}}"#)
}

pub(crate) fn exit(id: &str, status: u32) -> String {
    format!(r#"{{"container_id":"{id}","id":"{id}","pid":42,"exit_status":{status}}}"#)
}

pub(crate) fn oom(id: &str) -> String {
    format!(r#"{{"container_id":"{id}"}}"#)
}

pub(crate) fn create(id: &str) -> String {
    format!(r#"{{"id":"{id}","image":"nginx"}}"#)
}

/// shop/web-7: its sandbox and five attempts of nginx ending with each exit class
/// (the OOM of c3 published after its exit), and a pod of another namespace.
pub(crate) fn web7() -> Vec<Event> {
    let sandbox = || Some(workload("shop", "web-7", None));
    let nginx = || Some(workload("shop", "web-7", Some("nginx")));
    let mut life = Life::new();
    life.add("/containers/create", &create("sb1"), sandbox());
    life.add("/tasks/start", &start("sb1"), sandbox());
    life.add("/containers/create", &create("c1"), nginx());
    life.add("/tasks/start", &start("c1"), nginx());
    life.add("/tasks/exit", &exit("c1", 1), nginx());
    life.add("/containers/delete", r#"{"id":"c1"}"#, nginx());
    life.add("/tasks/start", &start("c2"), nginx());
    life.add("/tasks/oom", &oom("c2"), nginx());
    life.add("/tasks/exit", &exit("c2", 137), nginx());
    life.add("/tasks/start", &start("c3"), nginx());
    life.add("/tasks/exit", &exit("c3", 137), nginx());
    life.add("/tasks/oom", &oom("c3"), nginx());
    life.add("/tasks/start", &start("c4"), nginx());
    life.add("/tasks/exit", &exit("c4", 137), nginx());
    life.add("/tasks/start", &start("c5"), nginx());
    life.add("/tasks/exit", &exit("c5", 0), nginx());
    life.add("/tasks/start", &start("c6"), nginx());
    let other = || Some(workload("staging", "web-7", Some("app")));
    life.add("/tasks/start", &start("a1"), other());
    life.events
}

pub(crate) fn web7_query() -> PictureQuery {
    PictureQuery {
        query: Query::default(),
        pod: Some(PodName {
            namespace: "shop".into(),
            name: "web-7".into(),
        }),
        group: Group::Pod,
        max_rows: 10_000,
        deadline: Instant::now() + Duration::from_secs(60),
    }
}

fn exits(lane: &Lane) -> Vec<(ExitClass, Option<u32>)> {
    lane.marks
        .iter()
        .filter_map(|m| m.exit.map(|e| (e, m.status)))
        .collect()
}

#[test]
fn one_lane_per_container_with_its_exits_classed_by_the_pods_rules() {
    let store = TempStore::with(&web7());
    let reader = Reader::open(store.path()).unwrap();
    let picture = build(&reader, &web7_query()).unwrap();
    assert_eq!(picture.groups.len(), 1, "only shop/web-7: {picture:#?}");
    let group = &picture.groups[0];
    assert_eq!(group.key, "shop/web-7");
    let ids: Vec<&str> = group
        .lanes
        .iter()
        .map(|l| l.container_id.as_str())
        .collect();
    assert_eq!(ids, ["sb1", "c1", "c2", "c3", "c4", "c5", "c6"]);
    assert_eq!(group.lanes[0].container, "sandbox");
    assert!(group.lanes[1..].iter().all(|l| l.container == "nginx"));

    let classes: Vec<_> = group.lanes[1..6].iter().map(exits).collect();
    assert_eq!(
        classes,
        [
            vec![(ExitClass::NonZero, Some(1))],
            vec![(ExitClass::OomKilled, Some(137))],
            // The oom came after the exit, and still makes it an OOM kill.
            vec![(ExitClass::OomKilled, Some(137))],
            vec![(ExitClass::Killed, Some(137))],
            vec![(ExitClass::Zero, Some(0))],
        ]
    );
    let restarts: Vec<Option<u64>> = group.lanes[1..]
        .iter()
        .map(|l| {
            l.marks
                .iter()
                .find(|m| m.kind == Kind::Start)
                .and_then(|m| m.restart)
        })
        .collect();
    assert_eq!(
        restarts,
        [None, Some(1), Some(2), Some(3), Some(4), Some(5)]
    );
    let counts = group.counts.unwrap();
    assert_eq!(
        (
            counts.restarts,
            counts.ooms,
            counts.nonzero_exits,
            counts.killed,
            counts.oom_killed
        ),
        (5, 2, 4, 3, 2)
    );
    assert_eq!(picture.counts, counts);

    // c1 lives from its create to its delete and ran from start to exit; c6 still
    // runs at the end of the axis.
    let ms = |secs: i64| (T0 + secs) * 1000;
    assert_eq!(
        group.lanes[1].life,
        Span {
            from: ms(2),
            to: ms(5)
        }
    );
    assert_eq!(
        group.lanes[1].running,
        [Span {
            from: ms(3),
            to: ms(4)
        }]
    );
    let c6 = &group.lanes[6];
    assert_eq!(
        c6.running,
        [Span {
            from: ms(16),
            to: picture.to
        }]
    );
    assert_eq!(c6.life.to, picture.to);
    assert!(
        picture.from < ms(0) && picture.to > ms(16),
        "a margin either side"
    );
    assert!(picture.truncated.is_none());
    assert_eq!(picture.rows, 17);
}

#[test]
fn a_time_range_is_the_axis_and_a_start_after_an_earlier_one_is_a_restart() {
    let store = TempStore::with(&web7());
    let reader = Reader::open(store.path()).unwrap();
    let at = |secs: i64| SystemTime::UNIX_EPOCH + Duration::from_secs((T0 + secs) as u64);
    let mut q = web7_query();
    q.query.since = Some(at(9));
    q.query.until = Some(at(14));
    let picture = build(&reader, &q).unwrap();
    assert_eq!((picture.from, picture.to), (millis(at(9)), millis(at(14))));
    let lanes = &picture.groups[0].lanes;
    let first = lanes[0]
        .marks
        .iter()
        .find(|m| m.kind == Kind::Start)
        .unwrap();
    // nginx started before the range: c3's start restarts it.
    assert_eq!(
        (lanes[0].container_id.as_str(), first.restart),
        ("c3", Some(1))
    );

    q.query.until = q.query.since;
    assert!(matches!(build(&reader, &q), Err(PictureError::BadInput(_))));
}

#[test]
fn gaps_come_from_the_connected_markers_and_reconciled_events_shade_them() {
    let nginx = || Some(workload("shop", "web-7", Some("nginx")));
    let mut life = Life::new();
    life.add("/tasks/start", &start("c1"), nginx());
    life.push(
        "/tasks/exit",
        &exit("c1", 1),
        nginx(),
        Origin::reconciled(Clock::Daemon),
    );
    life.push(
        "/tasks/start",
        &start("c2"),
        nginx(),
        Origin::reconciled(Clock::Reconcile),
    );
    life.add("/tasks/exit", &exit("c2", 0), nginx());
    let at = |secs: i64| SystemTime::UNIX_EPOCH + Duration::from_secs((T0 + secs) as u64);
    let marker = markers::connected(&Connected {
        upstream: "containerd",
        address: "/run/containerd/containerd.sock",
        filters: &[],
        connected_at: at(2),
        gap_started_at: at(0),
        attempts: 3,
    });
    life.events.push(testing::event(9).envelope(marker).build());
    // Another gateway's gap is not this picture's: its events were all on node-a.
    let elsewhere = markers::connected(&Connected {
        upstream: "containerd",
        address: "/run/containerd/containerd.sock",
        filters: &[],
        connected_at: at(4),
        gap_started_at: at(3),
        attempts: 1,
    });
    life.events.push(
        testing::event(10)
            .envelope(elsewhere)
            .node("node-b")
            .build(),
    );
    let store = TempStore::with(&life.events);
    let reader = Reader::open(store.path()).unwrap();
    let picture = build(&reader, &web7_query()).unwrap();
    assert_eq!(
        picture.gaps,
        [Span {
            from: millis(at(0)),
            to: millis(at(2))
        }]
    );
    assert_eq!(
        picture.reconciled,
        [Span {
            from: millis(at(1)),
            to: millis(at(2))
        }]
    );
    let marks: Vec<(bool, &str)> = picture.groups[0]
        .lanes
        .iter()
        .flat_map(|l| &l.marks)
        .map(|m| (m.reconciled, m.origin.as_str()))
        .collect();
    assert_eq!(
        marks,
        [
            (false, "live"),
            (true, "reconciled"),
            (true, "reconciled"),
            (false, "live")
        ]
    );
}

#[test]
fn a_passed_deadline_is_an_error() {
    let store = TempStore::with(&web7());
    let reader = Reader::open(store.path()).unwrap();
    let mut q = web7_query();
    q.deadline = Instant::now();
    std::thread::sleep(Duration::from_millis(2));
    assert!(matches!(
        build(&reader, &q),
        Err(PictureError::Deadline { .. })
    ));
}

#[test]
fn by_namespace_and_by_node_events_without_a_pod_get_lanes_by_container_id() {
    let mut events = web7();
    events.push(
        testing::event(50)
            .at(T0 + 30)
            .namespace("default")
            .topic("/tasks/exit")
            .json("containerd.events.TaskExit", &exit("plain", 3))
            .build(),
    );
    let store = TempStore::with(&events);
    let reader = Reader::open(store.path()).unwrap();
    let mut q = web7_query();
    q.pod = None;
    q.group = Group::Namespace;
    let picture = build(&reader, &q).unwrap();
    let keys: Vec<&str> = picture.groups.iter().map(|g| g.key.as_str()).collect();
    assert_eq!(keys, ["shop", "staging", "default"]);
    let plain = &picture.groups[2].lanes;
    assert_eq!(plain.len(), 1);
    assert_eq!(
        (plain[0].container_id.as_str(), plain[0].pod.is_none()),
        ("plain", true)
    );
    assert!(picture.groups.iter().all(|g| g.counts.is_none()));

    q.group = Group::Node;
    let picture = build(&reader, &q).unwrap();
    let keys: Vec<&str> = picture.groups.iter().map(|g| g.key.as_str()).collect();
    assert_eq!(keys, ["node-a", "unknown node"]);
    assert_eq!("node".parse::<Group>(), Ok(Group::Node));
    assert!("pods".parse::<Group>().is_err());
}

/// A killed pause process is drawn as the sandbox's exit, not as a clean one; a
/// container of no pod, which the pods rules do not see, is classed by its status.
#[test]
fn a_sandbox_kill_and_a_podless_exit_are_classed_by_their_status() {
    let mut life = Life::new();
    life.add(
        "/tasks/start",
        &start("sb1"),
        Some(workload("shop", "web-8", None)),
    );
    life.add(
        "/tasks/exit",
        &exit("sb1", 137),
        Some(workload("shop", "web-8", None)),
    );
    life.add("/tasks/start", &start("plain"), None);
    life.add("/tasks/exit", &exit("plain", 137), None);
    life.add("/tasks/start", &start("other"), None);
    life.add("/tasks/exit", &exit("other", 3), None);
    let store = TempStore::with(&life.events);
    let reader = Reader::open(store.path()).unwrap();
    let picture = build(
        &reader,
        &PictureQuery {
            query: Query::default(),
            pod: None,
            group: Group::Namespace,
            max_rows: 1000,
            deadline: Instant::now() + Duration::from_secs(30),
        },
    )
    .unwrap();
    let classes: Vec<_> = picture
        .groups
        .iter()
        .flat_map(|g| g.lanes.iter().map(exits))
        .collect();
    assert_eq!(
        classes,
        [
            vec![(ExitClass::Uncounted, Some(137))],
            vec![(ExitClass::Killed, Some(137))],
            vec![(ExitClass::NonZero, Some(3))],
        ]
    );
}
