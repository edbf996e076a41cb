//! A pod's life written by the store's own writer into a real SQLite file, then
//! counted: restarts, OOMs and non-zero exits by the documented rules.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::*;
use crate::event::Workload;
use crate::query::tests::T0;
use crate::testing::{self, TempStore};

fn workload(namespace: &str, pod: &str, container: Option<&str>) -> Arc<Workload> {
    Arc::new(Workload {
        image: "docker.io/library/nginx:1.27".into(),
        ..testing::pod_workload(namespace, pod, container)
    })
}

/// (topic, payload JSON, workload): one event a second from T0.
type Step<'a> = (&'a str, String, Option<Arc<Workload>>);

fn events(steps: Vec<Step<'_>>) -> Vec<Event> {
    steps
        .into_iter()
        .enumerate()
        .map(|(i, (topic, json, workload))| {
            let type_name = match topic {
                "/tasks/start" => "containerd.events.TaskStart",
                "/tasks/exit" => "containerd.events.TaskExit",
                "/tasks/oom" => "containerd.events.TaskOOM",
                _ => "containerd.events.ContainerCreate",
            };
            testing::event(i as u64 + 1)
                .at(T0 + i as i64)
                .topic(topic)
                .json(type_name, &json)
                .workload(workload)
                .build()
        })
        .collect()
}

fn start(id: &str) -> String {
    format!(r#"{{"container_id":"{id}","pid":42}}"#)
}

fn exit(id: &str, process: &str, status: u32) -> String {
    format!(r#"{{"container_id":"{id}","id":"{process}","pid":42,"exit_status":{status}}}"#)
}

/// shop/web-7: a sandbox, nginx failing, restarting, OOM-killed, restarting again,
/// a sidecar, a failing exec; staging/web-7 (same name, another namespace) exiting
/// cleanly; shop/db-0 killed without an OOM; an event about no pod.
fn life() -> Vec<Event> {
    let sandbox = || Some(workload("shop", "web-7", None));
    let nginx = || Some(workload("shop", "web-7", Some("nginx")));
    events(vec![
        ("/containers/create", r#"{"id":"sb1"}"#.into(), sandbox()),
        ("/tasks/start", start("sb1"), sandbox()),
        ("/tasks/start", start("c1"), nginx()),
        ("/tasks/exit", exit("c1", "probe", 2), nginx()),
        ("/tasks/exit", exit("c1", "c1", 1), nginx()),
        ("/tasks/start", start("c2"), nginx()),
        ("/tasks/oom", r#"{"container_id":"c2"}"#.into(), nginx()),
        ("/tasks/exit", exit("c2", "c2", 137), nginx()),
        ("/tasks/start", start("c3"), nginx()),
        (
            "/tasks/start",
            start("s1"),
            Some(workload("shop", "web-7", Some("sidecar"))),
        ),
        ("/tasks/exit", exit("sb1", "sb1", 137), sandbox()),
        (
            "/tasks/start",
            start("a1"),
            Some(workload("staging", "web-7", Some("app"))),
        ),
        (
            "/tasks/exit",
            exit("a1", "a1", 0),
            Some(workload("staging", "web-7", Some("app"))),
        ),
        (
            "/tasks/start",
            start("d1"),
            Some(workload("shop", "db-0", Some("db"))),
        ),
        (
            "/tasks/exit",
            exit("d1", "d1", 137),
            Some(workload("shop", "db-0", Some("db"))),
        ),
        ("/tasks/exit", exit("x", "x", 1), None),
    ])
}

fn pod(namespace: &str, name: &str) -> PodName {
    PodName {
        namespace: namespace.into(),
        name: name.into(),
    }
}

fn counts(restarts: u64, ooms: u64, nonzero: u64, killed: u64, oom_killed: u64) -> PodCounts {
    PodCounts {
        restarts,
        ooms,
        nonzero_exits: nonzero,
        killed,
        oom_killed,
    }
}

#[test]
fn restarts_ooms_and_nonzero_exits_per_pod_crash_looping_first() {
    let store = TempStore::with(&life());
    let reader = Reader::open(store.path()).unwrap();
    let stats = reader.pod_stats(&Query::default()).unwrap();
    assert_eq!(
        stats,
        [
            // Two restarts (c2, c3), the OOM event, exit 1 and the OOM kill; not the
            // probe's exit, not the sandbox's 137.
            (pod("shop", "web-7"), counts(2, 1, 2, 1, 1)),
            // Killed, but no OOM came first.
            (pod("shop", "db-0"), counts(0, 0, 1, 1, 0)),
            (pod("staging", "web-7"), counts(0, 0, 0, 0, 0)),
        ]
    );

    // Filters narrow what is counted, as for every query.
    let staging = Query {
        filter: Filter::parse("pod.namespace==staging").unwrap(),
        ..Query::default()
    };
    assert_eq!(
        reader.pod_stats(&staging).unwrap(),
        [(pod("staging", "web-7"), counts(0, 0, 0, 0, 0))]
    );
}

#[test]
fn a_start_in_a_time_range_is_a_restart_when_the_container_started_before_it() {
    let store = TempStore::with(&life());
    let reader = Reader::open(store.path()).unwrap();
    // From the second nginx start (the sixth event) on: c2 and c3 both restart
    // nginx, which first started before the range; the sidecar's start is its first.
    let since = SystemTime::UNIX_EPOCH + Duration::from_secs(T0 as u64 + 5);
    let query = Query {
        since: Some(since),
        ..Query::default()
    };
    let stats = reader.pod_stats(&query).unwrap();
    assert_eq!(stats[0], (pod("shop", "web-7"), counts(2, 1, 1, 1, 1)));

    let before = reader
        .started_before(Some(&pod("shop", "web-7")), since)
        .unwrap();
    assert_eq!(
        before,
        [ContainerKey {
            pod: pod("shop", "web-7"),
            uid: "uid-shop-web-7".into(),
            container: "nginx".into(),
        }],
        "the sandbox's start is not a container's"
    );
}

#[test]
fn a_name_used_in_two_namespaces_is_found_in_both() {
    let store = TempStore::with(&life());
    let reader = Reader::open(store.path()).unwrap();
    assert_eq!(
        reader.pod_namespaces("web-7", &Query::default()).unwrap(),
        [("shop".to_owned(), 11), ("staging".to_owned(), 2)]
    );
    assert_eq!(
        reader.pod_namespaces("db-0", &Query::default()).unwrap(),
        [("shop".to_owned(), 2)]
    );
    assert!(
        reader
            .pod_namespaces("nope", &Query::default())
            .unwrap()
            .is_empty()
    );
    // Answered by the matcher when SQL cannot (a regex): the same namespaces.
    let regex = Query {
        filter: Filter::parse("topic~=^/tasks/").unwrap(),
        ..Query::default()
    };
    assert_eq!(
        reader.pod_namespaces("web-7", &regex).unwrap(),
        [("shop".to_owned(), 10), ("staging".to_owned(), 2)]
    );
}

#[test]
fn the_tally_says_what_each_event_meant() {
    let mut tally = Tally::default();
    let changes: Vec<Change> = life().iter().map(|e| tally.add(e)).collect();
    assert_eq!(
        changes[..10],
        [
            Change::Other,
            Change::Other,
            Change::Start { restart: 0 },
            Change::Other,
            Change::Failed {
                status: 1,
                oom_killed: false
            },
            Change::Start { restart: 1 },
            Change::Oom { explains: None },
            Change::Failed {
                status: 137,
                oom_killed: true
            },
            Change::Start { restart: 2 },
            Change::Start { restart: 0 },
        ]
    );
}

/// containerd's shim may publish an OOM-killed task's exit before its `/tasks/oom`:
/// the oom after the exit still makes it an OOM kill, and only until the container's
/// next start (an oom of the next attempt explains nothing of the last one).
#[test]
fn an_oom_after_a_status_137_exit_makes_it_an_oom_kill() {
    let nginx = || Some(workload("shop", "web-7", Some("nginx")));
    let oom = |id: &str| format!(r#"{{"container_id":"{id}"}}"#);
    let mut tally = Tally::default();
    let changes: Vec<Change> = events(vec![
        ("/tasks/start", start("c1"), nginx()),
        ("/tasks/exit", exit("c1", "c1", 137), nginx()),
        ("/tasks/oom", oom("c1"), nginx()),
        ("/tasks/start", start("c2"), nginx()),
        ("/tasks/exit", exit("c2", "c2", 137), nginx()),
        ("/tasks/start", start("c2"), nginx()),
        ("/tasks/oom", oom("c2"), nginx()),
        ("/tasks/exit", exit("c2", "c2", 137), nginx()),
    ])
    .iter()
    .map(|e| tally.add(e))
    .collect();
    let killed = |oom_killed| Change::Failed {
        status: 137,
        oom_killed,
    };
    assert_eq!(
        changes,
        [
            Change::Start { restart: 0 },
            killed(false),
            Change::Oom { explains: Some(1) },
            Change::Start { restart: 1 },
            killed(false),
            Change::Start { restart: 2 },
            Change::Oom { explains: None },
            killed(true),
        ]
    );
    // Two status-137 exits, each an OOM kill: one by the oom after it, one by the oom
    // before it; the exit of the attempt between was killed without one.
    assert_eq!(
        tally.pods.get(&pod("shop", "web-7")).copied(),
        Some(counts(2, 2, 3, 3, 2))
    );
}

#[test]
fn a_live_repeat_of_a_reconciled_change_is_not_counted_again() {
    use crate::event::{Clock, Origin};
    let nginx = || Some(workload("shop", "web-7", Some("nginx")));
    let run = |id: &str, status: u32| {
        vec![
            ("/tasks/start", start(id), nginx()),
            ("/tasks/exit", exit(id, id, status), nginx()),
        ]
    };
    // The first run recorded live; the second told by a reconcile, and its live
    // events came after.
    let live = events(run("c1", 1));
    let told = events(run("c2", 2))
        .into_iter()
        .map(|e| e.with_origin(Origin::reconciled(Clock::Daemon)));
    let repeats = events(run("c2", 2))
        .into_iter()
        .map(|e| e.with_origin(Origin::Repeat));
    let mut tally = Tally::default();
    for event in live.into_iter().chain(told).chain(repeats) {
        tally.add(&event);
    }
    let counts = tally.pods[&PodName {
        namespace: "shop".into(),
        name: "web-7".into(),
    }];
    assert_eq!((counts.restarts, counts.nonzero_exits), (1, 2));
}
