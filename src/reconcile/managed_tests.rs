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
    };
    let recorded = node(DOCKER_NAMESPACE, |_| {});
    let mut daemon = node(DOCKER_NAMESPACE, |_| {});
    let view = ManagerView {
        from: Witness::Docker,
        containers: Some(BTreeMap::from([("d".into(), docker(Some((2, 3, 7, ""))))])),
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
    };
    let removed = ManagerView {
        from: Witness::Docker,
        containers: Some(BTreeMap::new()),
    };
    let unreachable = ManagerView {
        from: Witness::Docker,
        containers: None,
    };
    for again in [listed_only, unreachable, removed] {
        let mut next = node(DOCKER_NAMESPACE, |_| {});
        fold(&mut next, &after, &again);
        assert_eq!(diff(&after, &next, &BTreeSet::new()).changes, vec![]);
    }
    // A later run of the same container (docker start) is told again.
    let mut next = node(DOCKER_NAMESPACE, |_| {});
    let rerun = ManagerView {
        from: Witness::Docker,
        containers: Some(BTreeMap::from([(
            "d".into(),
            docker(Some((10, 12, 0, ""))),
        )])),
    };
    fold(&mut next, &after, &rerun);
    assert_eq!(
        told(&diff(&after, &next, &BTreeSet::new()).changes),
        [
            "/tasks/start d docker",
            "/tasks/exit d 0 docker",
            "/tasks/delete d docker"
        ]
    );
}
