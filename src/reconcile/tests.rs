use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

use proptest::prelude::*;
use prost::Message;

use super::apply::Object;
use super::diff::{Change, UNKNOWN_EXIT_STATUS, diff};
use super::merge::merged;
use super::state::{ImageState, Labels};
use super::*;
use crate::proto::containerd::events as ev;

fn at(seconds: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + seconds)
}

fn labels(pairs: &[(&str, &str)]) -> Option<Labels> {
    Some(
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    )
}

fn container(image: &str) -> ContainerState {
    ContainerState {
        image: image.into(),
        runtime: "io.containerd.runc.v2".into(),
        labels: labels(&[]),
        created_at: Some(at(1)),
        updated_at: Some(at(1)),
        ..ContainerState::default()
    }
}

fn task(pid: u32, status: TaskStatus) -> TaskState {
    TaskState {
        pid,
        status,
        exit_status: None,
        exited_at: None,
        ..TaskState::default()
    }
}

fn exited(pid: u32, code: u32, when: u64) -> TaskState {
    TaskState {
        pid,
        status: TaskStatus::Stopped,
        exit_status: Some(code),
        exited_at: Some(at(when)),
        ..TaskState::default()
    }
}

fn node(ns: &str, f: impl FnOnce(&mut NamespaceState)) -> NodeState {
    let mut state = NodeState::default();
    f(state.namespaces.entry(ns.into()).or_default());
    state
}

fn topics(changes: &[Change]) -> Vec<String> {
    changes
        .iter()
        .map(|c| format!("{} {}", c.topic, object_id(&c.object)))
        .collect()
}

fn object_id(object: &Object) -> &str {
    match object {
        Object::Namespace(n) => n,
        Object::Container(_, id) | Object::Task(_, id) | Object::Image(_, id) => id,
    }
}

/// Applies a diff's events to the recorded state, as recording them does.
fn record(mut state: NodeState, changes: &[Change]) -> NodeState {
    for change in changes {
        state.apply(&change.namespace, change.topic, Some(&change.event));
    }
    state
}

#[test]
fn an_unchanged_node_needs_no_event() {
    let state = node("default", |ns| {
        ns.containers.insert("web".into(), container("busybox"));
        ns.tasks.insert("web".into(), task(42, TaskStatus::Running));
    });
    assert_eq!(diff(&state, &state, &BTreeSet::new()).changes, vec![]);
}

#[test]
fn what_happened_in_a_gap_is_told_in_the_order_it_must_have_happened() {
    let recorded = node("default", |ns| {
        ns.containers.insert("killed".into(), container("busybox"));
        ns.tasks
            .insert("killed".into(), task(10, TaskStatus::Running));
        ns.containers.insert("removed".into(), container("busybox"));
        ns.tasks.insert("removed".into(), exited(11, 0, 5));
        ns.images.insert(
            "busybox".into(),
            ImageState {
                target_digest: Some("sha256:a".into()),
                ..Default::default()
            },
        );
    });
    let daemon = node("default", |ns| {
        ns.containers.insert("killed".into(), container("busybox"));
        ns.tasks.insert("killed".into(), exited(10, 137, 20));
        ns.containers.insert("new".into(), container("busybox"));
        ns.tasks.insert("new".into(), exited(12, 3, 15));
        ns.images.insert(
            "busybox".into(),
            ImageState {
                target_digest: Some("sha256:a".into()),
                ..Default::default()
            },
        );
        ns.images.insert(
            "tagged".into(),
            ImageState {
                target_digest: Some("sha256:a".into()),
                labels: labels(&[]),
                created_at: Some(at(9)),
                ..Default::default()
            },
        );
    });
    let found = diff(&recorded, &daemon, &BTreeSet::new());
    assert_eq!(
        topics(&found.changes),
        [
            "/images/create tagged",
            "/containers/create new",
            "/tasks/start new",
            "/tasks/exit new",
            "/tasks/exit killed",
            "/tasks/delete removed",
            "/containers/delete removed",
        ]
    );
    let exit: ev::TaskExit = ev::TaskExit::decode(found.changes[4].event.value.as_slice()).unwrap();
    assert_eq!(exit.exit_status, 137);
    assert_eq!(found.changes[4].daemon_time, Some(at(20)));
    assert_eq!(found.changes[0].daemon_time, Some(at(9)));
    assert_eq!(found.changes[1].daemon_time, Some(at(1)));
    // The removed task's exit was recorded: its delete carries that status.
    let delete = ev::TaskDelete::decode(found.changes[5].event.value.as_slice()).unwrap();
    assert_eq!((delete.pid, delete.exit_status), (11, 0));
    assert!(found.unknown_exits.is_empty());
    assert_eq!(found.counts()["/tasks/exit"], 2);
}

#[test]
fn an_exit_nobody_saw_is_recorded_as_unknown_and_named() {
    let recorded = node("k8s.io", |ns| {
        ns.containers.insert("gone".into(), container("pause"));
        ns.tasks.insert("gone".into(), task(7, TaskStatus::Running));
    });
    let daemon = node("k8s.io", |_| {});
    let found = diff(&recorded, &daemon, &BTreeSet::new());
    assert_eq!(
        topics(&found.changes),
        [
            "/tasks/exit gone",
            "/tasks/delete gone",
            "/containers/delete gone"
        ]
    );
    let exit = ev::TaskExit::decode(found.changes[0].event.value.as_slice()).unwrap();
    assert_eq!(
        (exit.pid, exit.exit_status, exit.exited_at),
        (7, UNKNOWN_EXIT_STATUS, None)
    );
    assert_eq!(found.changes[0].daemon_time, None);
    assert_eq!(
        found.unknown_exits,
        [("k8s.io".to_owned(), "gone".to_owned())]
    );
}

#[test]
fn a_task_replaced_in_the_gap_is_closed_then_opened() {
    let recorded = node("default", |ns| {
        ns.tasks.insert("c".into(), task(10, TaskStatus::Running));
    });
    let daemon = node("default", |ns| {
        ns.tasks.insert("c".into(), task(20, TaskStatus::Running));
    });
    let found = diff(&recorded, &daemon, &BTreeSet::new());
    assert_eq!(
        topics(&found.changes),
        ["/tasks/exit c", "/tasks/delete c", "/tasks/start c"]
    );
    let start = ev::TaskStart::decode(found.changes[2].event.value.as_slice()).unwrap();
    assert_eq!(start.pid, 20);
    assert_eq!(found.unknown_exits.len(), 1);
}

#[test]
fn unknown_values_are_not_changes_and_known_ones_are() {
    let mut recorded = node("default", |ns| {
        let mut c = container("busybox");
        c.labels = None;
        ns.containers.insert("c".into(), c);
        ns.images.insert("i".into(), ImageState::default());
    });
    let mut daemon = node("default", |ns| {
        let mut c = container("busybox");
        c.labels = labels(&[("app", "web")]);
        ns.containers.insert("c".into(), c);
        ns.images.insert(
            "i".into(),
            ImageState {
                target_digest: Some("sha256:b".into()),
                labels: labels(&[]),
                ..Default::default()
            },
        );
    });
    assert_eq!(diff(&recorded, &daemon, &BTreeSet::new()).changes, vec![]);
    // Once known, a different digest or different labels are changes.
    recorded = merged(&recorded, &daemon, &BTreeSet::new());
    let ns = daemon.namespaces.get_mut("default").unwrap();
    ns.images.get_mut("i").unwrap().target_digest = Some("sha256:c".into());
    ns.containers.get_mut("c").unwrap().labels = labels(&[("app", "api")]);
    let found = diff(&recorded, &daemon, &BTreeSet::new());
    assert_eq!(
        topics(&found.changes),
        ["/images/update i", "/containers/update c"]
    );
}

#[test]
fn objects_the_live_stream_spoke_about_are_left_to_it() {
    let recorded = node("default", |ns| {
        ns.tasks.insert("live".into(), task(1, TaskStatus::Running));
    });
    let daemon = node("default", |ns| {
        ns.containers.insert("new".into(), container("busybox"));
    });
    let skip: BTreeSet<Object> = [
        Object::Task("default".into(), "live".into()),
        Object::Container("default".into(), "new".into()),
    ]
    .into();
    assert_eq!(diff(&recorded, &daemon, &skip).changes, vec![]);
    // And the snapshot keeps what the stream said about them.
    let after = merged(&recorded, &daemon, &skip);
    let ns = &after.namespaces["default"];
    assert!(ns.tasks.contains_key("live") && !ns.containers.contains_key("new"));
}

#[test]
fn exec_events_leave_the_task_alone() {
    let mut state = node("default", |ns| {
        ns.tasks.insert("c".into(), task(5, TaskStatus::Running));
    });
    let exec_exit = ev::TaskExit {
        container_id: "c".into(),
        id: "exec-1".into(),
        pid: 9,
        exit_status: 1,
        exited_at: None,
    };
    let any = prost_types::Any {
        type_url: "containerd.events.TaskExit".into(),
        value: exec_exit.encode_to_vec(),
    };
    assert_eq!(state.apply("default", "/tasks/exit", Some(&any)), None);
    assert_eq!(
        state.namespaces["default"].tasks["c"].status,
        TaskStatus::Running
    );
    // A payload of the wrong type for its topic changes nothing either.
    let wrong = prost_types::Any {
        type_url: "containerd.events.TaskStart".into(),
        value: exec_exit.encode_to_vec(),
    };
    assert_eq!(state.apply("default", "/tasks/exit", Some(&wrong)), None);
}

/// A task delete missed in a gap, then its container's delete seen live (the stream
/// came back between the two): the next reconcile still records the task's delete
/// instead of the record never saying so.
#[test]
fn a_container_delete_seen_live_leaves_a_missed_task_delete_to_the_reconcile() {
    let mut recorded = node("default", |ns| {
        ns.containers.insert("c".into(), container("busybox"));
        ns.tasks.insert("c".into(), exited(5, 1, 2));
        ns.containers.insert("done".into(), container("busybox"));
        ns.tasks.insert(
            "done".into(),
            TaskState {
                deleted: true,
                ..exited(6, 0, 2)
            },
        );
    });
    for id in ["c", "done"] {
        let delete = prost_types::Any {
            type_url: "containerd.events.ContainerDelete".into(),
            value: ev::ContainerDelete { id: id.into() }.encode_to_vec(),
        };
        recorded.apply("default", "/containers/delete", Some(&delete));
    }
    let ns = &recorded.namespaces["default"];
    assert!(ns.containers.is_empty());
    assert_eq!(
        ns.tasks.keys().collect::<Vec<_>>(),
        ["c"],
        "a recorded delete clears it"
    );
    let daemon = node("default", |_| {});
    let found = diff(&recorded, &daemon, &BTreeSet::new());
    assert_eq!(topics(&found.changes), ["/tasks/delete c"]);
    assert!(found.unknown_exits.is_empty(), "its exit was recorded");
}

fn arb_labels() -> impl Strategy<Value = Option<Labels>> {
    prop_oneof![
        Just(None),
        Just(labels(&[])),
        Just(labels(&[("a", "1")])),
        Just(labels(&[("a", "2")])),
    ]
}

fn arb_task() -> impl Strategy<Value = TaskState> {
    (1u32..4, 0usize..4, 0u32..3, 1u64..30).prop_map(|(pid, status, code, when)| match status {
        0 => task(pid, TaskStatus::Created),
        1 => task(pid, TaskStatus::Running),
        2 => task(pid, TaskStatus::Paused),
        _ => exited(pid, code, when),
    })
}

/// A state as a snapshot may hold it (unknown values allowed) or, with `listed`, as
/// a daemon's lists give it (everything known).
fn arb_state(listed: bool) -> impl Strategy<Value = NodeState> {
    let ids = prop::collection::btree_set(prop_oneof![Just("a"), Just("b"), Just("c")], 0..3);
    let namespace = (
        arb_labels(),
        prop::collection::btree_map(
            prop_oneof![Just("a"), Just("b"), Just("c")],
            (prop_oneof![Just("x"), Just("y")], arb_labels()),
            0..3,
        ),
        prop::collection::btree_map(
            prop_oneof![Just("a"), Just("b"), Just("c")],
            arb_task(),
            0..3,
        ),
        prop::collection::btree_map(
            prop_oneof![Just("i"), Just("j")],
            (
                prop_oneof![Just(None), Just(Some("sha256:1")), Just(Some("sha256:2"))],
                arb_labels(),
            ),
            0..2,
        ),
    );
    (ids, prop::collection::vec((any::<bool>(), namespace), 2)).prop_map(move |(_, namespaces)| {
        let mut state = NodeState::default();
        for (name, (present, (ns_labels, containers, tasks, images))) in
            ["default", "k8s.io"].into_iter().zip(namespaces)
        {
            if !present {
                continue;
            }
            let known = |l: Option<Labels>| if listed { l.or_else(|| labels(&[])) } else { l };
            let ns = state.namespaces.entry(name.into()).or_default();
            ns.labels = known(ns_labels);
            for (id, (image, l)) in containers {
                ns.containers.insert(
                    id.into(),
                    ContainerState {
                        image: image.into(),
                        labels: known(l),
                        ..container(image)
                    },
                );
            }
            for (id, t) in tasks {
                // A daemon's task always has its container.
                if listed && !ns.containers.contains_key(id) {
                    continue;
                }
                ns.tasks.insert(id.into(), t);
            }
            for (name, (digest, l)) in images {
                let digest = digest.or(listed.then_some("sha256:1"));
                ns.images.insert(
                    name.into(),
                    ImageState {
                        target_digest: digest.map(Into::into),
                        labels: known(l),
                        ..Default::default()
                    },
                );
            }
        }
        state
    })
}

proptest! {
    /// Recording the events a diff produces brings the snapshot to the daemon's
    /// state: a second reconcile right after finds nothing.
    #[test]
    fn recording_a_diff_leaves_nothing_to_reconcile(recorded in arb_state(false), daemon in arb_state(true)) {
        let found = diff(&recorded, &daemon, &BTreeSet::new());
        let after = record(recorded, &found.changes);
        let again = diff(&after, &daemon, &BTreeSet::new());
        prop_assert_eq!(topics(&again.changes), Vec::<String>::new());
        // Every task's events come in create, start, pause, exit, delete order.
        let rank = |topic: &str| ["/tasks/create", "/tasks/start", "/tasks/paused", "/tasks/resumed", "/tasks/exit", "/tasks/delete"].iter().position(|t| *t == topic);
        let mut last: std::collections::BTreeMap<(String, String), usize> = Default::default();
        for change in &found.changes {
            if let (Object::Task(ns, id), Some(r)) = (&change.object, rank(change.topic)) {
                let previous = last.insert((ns.clone(), id.clone()), r);
                // Only a replaced task starts again after a delete.
                if let Some(previous) = previous {
                    prop_assert!(previous <= r || previous == 5, "{:?}", topics(&found.changes));
                }
            }
        }
    }

    /// The merged snapshot equals the daemon's state when the stream was silent.
    #[test]
    fn a_silent_stream_leaves_the_daemons_state(recorded in arb_state(false), daemon in arb_state(true)) {
        prop_assert_eq!(merged(&recorded, &daemon, &BTreeSet::new()), daemon);
    }
}
