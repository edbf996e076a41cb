use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use prost::Message;

use super::*;
use crate::proto::containerd::events as ev;
use crate::reconcile::diff::{Change, diff};
use crate::reconcile::merge::merged;
use crate::reconcile::state::NamespaceState;

const NS: &str = "k8s.io";

fn at(seconds: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + seconds)
}

fn container(created: u64) -> ContainerState {
    ContainerState {
        image: "eventgate.test/busybox:1".into(),
        runtime: "io.containerd.runc.v2".into(),
        labels: Some(BTreeMap::new()),
        created_at: Some(at(created)),
        updated_at: Some(at(created)),
        ..ContainerState::default()
    }
}

fn running(pid: u32) -> TaskState {
    TaskState {
        pid,
        status: TaskStatus::Running,
        ..TaskState::default()
    }
}

fn exited_cri(status: ManagedStatus, run: Option<(u64, u64, i32, &str)>) -> ManagedContainer {
    ManagedContainer {
        status,
        created_at: None,
        exit: run.map(|(started, finished, code, reason)| ManagedExit {
            started_at: Some(at(started)),
            finished_at: Some(at(finished)),
            exit_code: code,
            reason: Some(reason.into()),
        }),
        workload: None,
        image: String::new(),
        started_at: None,
        restart_count: None,
    }
}

fn node(ns: &str, f: impl FnOnce(&mut NamespaceState)) -> NodeState {
    let mut state = NodeState::default();
    f(state.namespaces.entry(ns.into()).or_default());
    state
}

fn told(changes: &[Change]) -> Vec<String> {
    changes
        .iter()
        .map(|c| {
            let id = match &c.object {
                crate::reconcile::apply::Object::Container(_, id)
                | crate::reconcile::apply::Object::Task(_, id) => id.as_str(),
                _ => "",
            };
            let status = match c.topic {
                "/tasks/exit" => {
                    let exit = ev::TaskExit::decode(c.event.value.as_slice()).unwrap();
                    format!(" {}", exit.exit_status)
                }
                _ => String::new(),
            };
            let reason = c
                .reason
                .as_deref()
                .map(|r| format!(" {r}"))
                .unwrap_or_default();
            format!("{} {id}{status}{reason} {}", c.topic, c.from.label())
        })
        .collect()
}

/// Recorded: attempt 0 ran and exited 0 live (its task deleted, as the CRI does),
/// attempt 1 recorded running. In the gap attempt 1 exited 1 (the CRI deleted its
/// task), attempt 2 was created, started and exited 5: containerd's lists show the
/// three containers and no task at all.
fn kubernetes_gap() -> (NodeState, NodeState, ManagerView) {
    let mut recorded = node(NS, |ns| {
        ns.containers.insert("a0".into(), container(1));
        ns.containers.insert("a1".into(), container(10));
        ns.tasks.insert("a1".into(), running(101));
    });
    // Attempt 0's live life, as recorded events leave it.
    for (topic, any) in [
        (
            "/tasks/start",
            any(
                "containerd.events.TaskStart",
                &ev::TaskStart {
                    container_id: "a0".into(),
                    pid: 100,
                },
            ),
        ),
        (
            "/tasks/exit",
            any(
                "containerd.events.TaskExit",
                &ev::TaskExit {
                    container_id: "a0".into(),
                    id: "a0".into(),
                    pid: 100,
                    exit_status: 0,
                    exited_at: Some(at(5).into()),
                },
            ),
        ),
        (
            "/tasks/delete",
            any(
                "containerd.events.TaskDelete",
                &ev::TaskDelete {
                    container_id: "a0".into(),
                    pid: 100,
                    exit_status: 0,
                    exited_at: Some(at(5).into()),
                    id: String::new(),
                },
            ),
        ),
    ] {
        recorded.apply(NS, topic, Some(&any));
    }
    let daemon = node(NS, |ns| {
        ns.containers.insert("a0".into(), container(1));
        ns.containers.insert("a1".into(), container(10));
        ns.containers.insert("a2".into(), container(30));
    });
    let view = ManagerView {
        from: Witness::Cri,
        containers: Some(BTreeMap::from([
            ("a0".into(), exited_cri(ManagedStatus::Exited, None)),
            (
                "a1".into(),
                exited_cri(ManagedStatus::Exited, Some((11, 20, 1, "Error"))),
            ),
            (
                "a2".into(),
                exited_cri(ManagedStatus::Exited, Some((31, 40, 5, "Error"))),
            ),
        ])),
        log: None,
    };
    (recorded, daemon, view)
}

fn any<M: Message>(type_url: &str, m: &M) -> prost_types::Any {
    prost_types::Any {
        type_url: type_url.into(),
        value: m.encode_to_vec(),
    }
}

#[test]
fn only_exits_the_record_lacks_are_asked_about() {
    let (recorded, daemon, _) = kubernetes_gap();
    let exits = recorded_exits(&recorded);
    assert_eq!(exits, BTreeSet::from(["a0".to_owned()]));
    assert!(!needs_status("a0", ManagedStatus::Exited, &daemon, &exits));
    assert!(needs_status("a1", ManagedStatus::Exited, &daemon, &exits));
    assert!(needs_status("a2", ManagedStatus::Exited, &daemon, &exits));
    assert!(!needs_status("a2", ManagedStatus::Running, &daemon, &exits));
}

#[test]
fn the_cri_tells_the_runs_containerd_deleted_in_the_order_they_happened() {
    let (recorded, mut daemon, view) = kubernetes_gap();
    fold(&mut daemon, &recorded, &view);
    let found = diff(&recorded, &daemon, &BTreeSet::new());
    assert_eq!(
        told(&found.changes),
        [
            "/tasks/exit a1 1 Error cri",
            "/tasks/delete a1 cri",
            "/containers/create a2 containerd",
            "/tasks/start a2 cri",
            "/tasks/exit a2 5 Error cri",
            "/tasks/delete a2 cri",
        ]
    );
    assert!(found.unknown_exits.is_empty());
    let times: Vec<_> = found.changes.iter().map(|c| c.daemon_time).collect();
    assert_eq!(
        times,
        [at(20), at(20), at(30), at(31), at(40), at(40)].map(Some)
    );
    // Recorded, the next reconcile finds nothing, asking nothing, whether the CRI
    // answers the same or cannot be asked at all.
    let after = merged(&recorded, &daemon, &BTreeSet::new());
    assert_eq!(recorded_exits(&after).len(), 3);
    let (_, plain, _) = kubernetes_gap();
    for again in [
        view.clone(),
        ManagerView {
            from: Witness::Cri,
            containers: None,
            log: None,
        },
    ] {
        let mut next = plain.clone();
        fold(&mut next, &after, &again);
        assert_eq!(diff(&after, &next, &BTreeSet::new()).changes, vec![]);
    }
}

#[test]
fn an_oom_kill_is_told_before_its_exit() {
    let recorded = node(NS, |ns| {
        ns.containers.insert("c".into(), container(1));
        ns.tasks.insert("c".into(), running(7));
    });
    let mut daemon = node(NS, |ns| {
        ns.containers.insert("c".into(), container(1));
    });
    let view = ManagerView {
        from: Witness::Cri,
        containers: Some(BTreeMap::from([(
            "c".into(),
            exited_cri(ManagedStatus::Exited, Some((2, 9, 137, "OOMKilled"))),
        )])),
        log: None,
    };
    fold(&mut daemon, &recorded, &view);
    let found = diff(&recorded, &daemon, &BTreeSet::new());
    assert_eq!(
        told(&found.changes),
        [
            "/tasks/oom c OOMKilled cri",
            "/tasks/exit c 137 OOMKilled cri",
            "/tasks/delete c cri",
        ]
    );
}

#[test]
fn without_the_cri_a_deleted_task_s_exit_is_unknown_as_before() {
    let (recorded, mut daemon, _) = kubernetes_gap();
    fold(
        &mut daemon,
        &recorded,
        &ManagerView {
            from: Witness::Cri,
            containers: None,
            log: None,
        },
    );
    let found = diff(&recorded, &daemon, &BTreeSet::new());
    assert_eq!(
        told(&found.changes),
        [
            "/containers/create a2 containerd",
            "/tasks/exit a1 255 containerd",
            "/tasks/delete a1 containerd",
        ]
    );
    assert_eq!(found.unknown_exits, [(NS.to_owned(), "a1".to_owned())]);
}

#[test]
fn dockerd_s_exited_containers_are_told_created_run_and_deleted_once() {
    let docker = |run: Option<(u64, u64, i32, &str)>| ManagedContainer {
        status: ManagedStatus::Exited,
        created_at: Some(at(1)),
        exit: run.map(|(s, f, code, reason)| ManagedExit {
            started_at: Some(at(s)),
            finished_at: Some(at(f)),
            exit_code: code,
            reason: (!reason.is_empty()).then(|| reason.to_owned()),
        }),
        workload: Workload::from_record("busybox", [("app".to_owned(), "web".to_owned())]),
        image: "busybox".into(),
        started_at: None,
        restart_count: None,
    };
    let recorded = node(DOCKER_NAMESPACE, |_| {});
    let mut daemon = node(DOCKER_NAMESPACE, |_| {});
    let view = ManagerView {
        from: Witness::Docker,
        containers: Some(BTreeMap::from([("d".into(), docker(Some((2, 3, 7, ""))))])),
        log: None,
    };
    fold(&mut daemon, &recorded, &view);
    let found = diff(&recorded, &daemon, &BTreeSet::new());
    assert_eq!(
        told(&found.changes),
        [
            "/containers/create d docker",
            "/tasks/start d docker",
            "/tasks/exit d 7 docker",
            "/tasks/delete d docker",
            "/containers/delete d docker",
        ]
    );
    let after = merged(&recorded, &daemon, &BTreeSet::new());
    // The next reconcile does not inspect it again, and finds nothing; nor does one
    // that cannot reach dockerd. `docker rm` then leaves nothing to tell.
    assert!(recorded_exits(&after).contains("d"));
    let listed_only = ManagerView {
        from: Witness::Docker,
        containers: Some(BTreeMap::from([("d".into(), docker(None))])),
        log: None,
    };
    let removed = ManagerView {
        from: Witness::Docker,
        containers: Some(BTreeMap::new()),
        log: None,
    };
    let unreachable = ManagerView {
        from: Witness::Docker,
        containers: None,
        log: None,
    };
    for again in [listed_only, unreachable, removed] {
        let mut next = node(DOCKER_NAMESPACE, |_| {});
        fold(&mut next, &after, &again);
        assert_eq!(diff(&after, &next, &BTreeSet::new()).changes, vec![]);
    }
    // A later run of the same container (docker start) is told again, with the
    // containerd container dockerd made for it.
    let mut next = node(DOCKER_NAMESPACE, |_| {});
    let rerun = ManagerView {
        from: Witness::Docker,
        containers: Some(BTreeMap::from([(
            "d".into(),
            docker(Some((10, 12, 0, ""))),
        )])),
        log: None,
    };
    fold(&mut next, &after, &rerun);
    assert_eq!(
        told(&diff(&after, &next, &BTreeSet::new()).changes),
        [
            "/containers/create d docker",
            "/tasks/start d docker",
            "/tasks/exit d 0 docker",
            "/tasks/delete d docker",
            "/containers/delete d docker"
        ]
    );
}

/// dockerd's view of `d` after runs of its restart policy: the last exited with
/// `code` between `started` and `finished`, `restarts` runs before it.
fn restarted(started: u64, finished: u64, code: i32, restarts: u64) -> ManagedContainer {
    ManagedContainer {
        status: ManagedStatus::Exited,
        created_at: Some(at(1)),
        exit: Some(ManagedExit {
            started_at: Some(at(started)),
            finished_at: Some(at(finished)),
            exit_code: code,
            reason: None,
        }),
        workload: None,
        image: "busybox".into(),
        started_at: None,
        restart_count: Some(restarts),
    }
}

fn docker_log(oldest: u64, runs: &[(u64, u64, i32)]) -> crate::reconcile::run::EventLog {
    use crate::reconcile::run::{Action, EventLog, Logged};
    let events = runs
        .iter()
        .flat_map(|&(start, die, code)| {
            [
                Logged {
                    at: at(start),
                    action: Action::Start,
                },
                Logged {
                    at: at(die),
                    action: Action::Die(code),
                },
            ]
        })
        .collect();
    EventLog {
        oldest: Some(at(oldest)),
        events: runs.len() * 2,
        containers: BTreeMap::from([("d".to_owned(), events)]),
    }
}

#[test]
fn every_run_dockerd_s_log_holds_is_told_with_its_exit_and_once() {
    let recorded = node(DOCKER_NAMESPACE, |_| {});
    let mut daemon = node(DOCKER_NAMESPACE, |_| {});
    let log = docker_log(0, &[(2, 3, 10), (5, 6, 11), (8, 9, 12)]);
    let view = ManagerView {
        from: Witness::Docker,
        containers: Some(BTreeMap::from([("d".into(), restarted(8, 9, 12, 2))])),
        log: Some(log.clone()),
    };
    fold(&mut daemon, &recorded, &view);
    let found = diff(&recorded, &daemon, &BTreeSet::new());
    let run = |code: u32| {
        [
            "/containers/create d docker".to_owned(),
            "/tasks/start d docker".to_owned(),
            format!("/tasks/exit d {code} docker"),
            "/tasks/delete d docker".to_owned(),
            "/containers/delete d docker".to_owned(),
        ]
    };
    assert_eq!(told(&found.changes), [run(10), run(11), run(12)].concat());
    let times: Vec<_> = found.changes.iter().map(|c| c.daemon_time).collect();
    let expected: Vec<_> = [2, 2, 3, 3, 3, 5, 5, 6, 6, 6, 8, 8, 9, 9, 9]
        .map(|s| Some(at(s)))
        .to_vec();
    assert_eq!(times, expected);
    assert!(found.changes.iter().all(|c| !c.bound));
    assert!(found.unknown_exits.is_empty());
    // Recorded, the same log tells nothing again.
    let after = merged(&recorded, &daemon, &BTreeSet::new());
    let mut next = node(DOCKER_NAMESPACE, |_| {});
    fold(&mut next, &after, &view);
    assert_eq!(diff(&after, &next, &BTreeSet::new()).changes, vec![]);

    // The same runs with the log gone: RestartCount proves two runs before the
    // last, their exits unknown, at the container's creation on the reconcile's
    // clock, in order.
    let mut daemon = node(DOCKER_NAMESPACE, |_| {});
    let counted = ManagerView {
        log: Some(docker_log(7, &[(8, 9, 12)])),
        ..view.clone()
    };
    fold(&mut daemon, &recorded, &counted);
    let found = diff(&recorded, &daemon, &BTreeSet::new());
    assert_eq!(told(&found.changes), [run(255), run(255), run(12)].concat());
    assert!(
        found.changes[..10]
            .iter()
            .all(|c| c.bound && c.daemon_time == Some(at(1)))
    );
    assert!(found.changes[10..].iter().all(|c| !c.bound));
    let unknown = (DOCKER_NAMESPACE.to_owned(), "d".to_owned());
    assert_eq!(found.unknown_exits, [unknown.clone(), unknown]);
    let after = merged(&recorded, &daemon, &BTreeSet::new());
    let mut next = node(DOCKER_NAMESPACE, |_| {});
    fold(&mut next, &after, &counted);
    assert_eq!(diff(&after, &next, &BTreeSet::new()).changes, vec![]);
}

#[test]
fn a_run_recorded_under_way_ends_with_the_exit_dockerd_logged_for_it() {
    // The record saw the run start (pid 41, at 2) and nothing after: dockerd's log
    // has its exit, one more run, and the run under way.
    let recorded = node(DOCKER_NAMESPACE, |ns| {
        ns.containers.insert("d".into(), container(1));
        ns.tasks.insert(
            "d".into(),
            TaskState {
                started_at: Some(at(2)),
                ..running(41)
            },
        );
    });
    let mut daemon = node(DOCKER_NAMESPACE, |ns| {
        ns.containers.insert("d".into(), container(8));
        ns.tasks.insert("d".into(), running(77));
    });
    let mut log = docker_log(0, &[(2, 3, 10), (5, 6, 11)]);
    log.containers
        .get_mut("d")
        .unwrap()
        .push(crate::reconcile::run::Logged {
            at: at(8),
            action: crate::reconcile::run::Action::Start,
        });
    let mut view_of = restarted(8, 9, 0, 2);
    view_of.status = ManagedStatus::Running;
    view_of.exit = None;
    let view = ManagerView {
        from: Witness::Docker,
        containers: Some(BTreeMap::from([("d".into(), view_of)])),
        log: Some(log),
    };
    fold(&mut daemon, &recorded, &view);
    let found = diff(&recorded, &daemon, &BTreeSet::new());
    assert_eq!(
        told(&found.changes),
        [
            "/tasks/exit d 10 docker",
            "/tasks/delete d docker",
            "/containers/delete d docker",
            "/containers/create d docker",
            "/tasks/start d docker",
            "/tasks/exit d 11 docker",
            "/tasks/delete d docker",
            "/containers/delete d docker",
            "/containers/create d containerd",
            "/tasks/start d containerd",
        ]
    );
    assert!(found.unknown_exits.is_empty());
}
