//! The managers above containerd as a second source of truth: the CRI on a
//! Kubernetes node and dockerd on a Docker host keep what containerd deletes.
//!
//! The CRI plugin deletes a container's task as soon as it exits, and keeps the
//! container's exit code, start and finish times and reason until the kubelet
//! removes the container. dockerd deletes even the containerd container at every
//! exit, and keeps its own record (`docker ps -a`) until `docker rm`. containerd's
//! lists alone then show a container that never ran, or nothing at all.
//!
//! A manager's view is folded into the daemon's side of a reconcile as what
//! containerd would have shown had it kept it: an exited task marked `deleted`
//! (with the manager's exit code, times and reason), and for dockerd a container
//! marked `gone`. The diff then tells the missing start, exit and deletes, and the
//! snapshot keeps them, so the next reconcile finds them recorded.
//!
//! Asking a manager per container is the expensive part, so only the containers
//! whose exit the record does not have yet are asked ([`needs_status`]); an
//! unchanged node costs the list calls alone, as the kubelet's relist does.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::SystemTime;

use super::run::EventLog;
pub(crate) use super::run::ManagedExit;
use super::runs::{self, Last, Seen};
use super::state::{ContainerState, NodeState, TaskState, TaskStatus};
use crate::event::{Witness, Workload};

/// The containerd namespace dockerd keeps its containers in (its default
/// `--containerd-namespace`).
pub(crate) const DOCKER_NAMESPACE: &str = "moby";

/// What a manager says of one container's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ManagedStatus {
    Created,
    Running,
    Exited,
    Unknown,
}

/// One container as a manager records it. The list calls give the status; the
/// times, exit code and reason come from a per-container status call, made only
/// when [`needs_status`] says so (`None` until then).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ManagedContainer {
    pub status: ManagedStatus,
    pub created_at: Option<SystemTime>,
    pub exit: Option<ManagedExit>,
    /// dockerd's name, image reference and labels (the CRI's are on containerd's
    /// own record already).
    pub workload: Option<Workload>,
    /// The image reference the user ran (dockerd; containerd's record has none).
    pub image: String,
    /// When the run under way started, where a status call said (dockerd).
    pub started_at: Option<SystemTime>,
    /// Runs its restart policy made since it was last started by hand, where a
    /// status call said (dockerd's `RestartCount`).
    pub restart_count: Option<u64>,
}

/// One manager's view at a reconcile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ManagerView {
    pub from: Witness,
    /// By container id; `None` when the manager could not be listed: what the
    /// record already took from it is kept, and nothing new is told.
    pub containers: Option<BTreeMap<String, ManagedContainer>>,
    /// dockerd's event log up to the reconcile's lists, where it could be read.
    pub log: Option<EventLog>,
}

/// The containers whose exit the record already has (a task stopped with its
/// status, or deleted), by id: a manager is not asked about them again.
pub(crate) fn recorded_exits(recorded: &NodeState) -> BTreeSet<String> {
    recorded
        .namespaces
        .values()
        .flat_map(|ns| {
            ns.tasks
                .iter()
                .filter(|(_, t)| t.deleted || exit_known(t))
                .map(|(id, _)| id.clone())
        })
        .collect()
}

fn exit_known(task: &TaskState) -> bool {
    task.status == TaskStatus::Stopped && task.exit_status.is_some()
}

/// Whether a container the manager lists needs its status read: it exited, and
/// neither containerd (a stopped task it still has) nor the record knows that exit.
pub(crate) fn needs_status(
    id: &str,
    status: ManagedStatus,
    daemon: &NodeState,
    recorded_exits: &BTreeSet<String>,
) -> bool {
    if status != ManagedStatus::Exited || recorded_exits.contains(id) {
        return false;
    }
    !daemon
        .namespaces
        .values()
        .any(|ns| ns.tasks.get(id).is_some_and(exit_known))
}

/// Folds `view` into `daemon` (containerd's lists), using `recorded` for what the
/// record already took from the manager.
pub(crate) fn fold(daemon: &mut NodeState, recorded: &NodeState, view: &ManagerView) {
    match view.from {
        Witness::Docker => fold_docker(daemon, recorded, view),
        _ => fold_cri(daemon, recorded, view),
    }
}

/// The CRI's containers are containerd's (one per attempt, same ids): only their
/// tasks are missing.
fn fold_cri(daemon: &mut NodeState, recorded: &NodeState, view: &ManagerView) {
    let namespace_of: HashMap<String, String> = daemon
        .namespaces
        .iter()
        .flat_map(|(ns, state)| state.containers.keys().map(|id| (id.clone(), ns.clone())))
        .collect();
    for (id, namespace) in namespace_of {
        let recorded_task = recorded
            .namespaces
            .get(&namespace)
            .and_then(|ns| ns.tasks.get(&id));
        let Some(ns) = daemon.namespaces.get_mut(&namespace) else {
            continue;
        };
        if ns.tasks.contains_key(&id) {
            continue;
        }
        let managed = view.containers.as_ref().map(|c| c.get(&id));
        if let Some(task) = folded_task(view.from, managed, recorded_task) {
            ns.tasks.insert(id, task);
        }
    }
}

/// The task to show for a container containerd has no task for: the record's
/// deleted task while the manager still shows that exit (or cannot be asked), or
/// one built from the manager's status.
fn folded_task(
    from: Witness,
    managed: Option<Option<&ManagedContainer>>,
    recorded: Option<&TaskState>,
) -> Option<TaskState> {
    let kept = recorded.filter(|t| t.deleted || exit_known(t)).map(|t| {
        let mut t = t.clone();
        t.deleted = true;
        t
    });
    match managed {
        // Not listed: the record's version stands.
        None => kept,
        // Listed, and the manager does not have it (removed): nothing to show.
        Some(None) => None,
        Some(Some(c)) if c.status != ManagedStatus::Exited => None,
        Some(Some(c)) => match (&c.exit, kept) {
            // A later run than the recorded one (dockerd restarts a container
            // under the same id).
            (Some(exit), Some(kept)) if later_run(exit, &kept) => task_of(from, exit, &kept),
            (_, Some(kept)) => Some(kept),
            (Some(exit), None) => task_of(from, exit, &TaskState::default()),
            (None, None) => None,
        },
    }
}

fn later_run(exit: &ManagedExit, recorded: &TaskState) -> bool {
    matches!((exit.started_at, recorded.exited_at), (Some(started), Some(ended)) if started > ended)
}

/// Whether the deleted task `d` is a run after the recorded deleted task `r`.
pub(crate) fn later(d: &TaskState, r: &TaskState) -> bool {
    matches!((d.started_at, r.exited_at), (Some(started), Some(ended)) if started > ended)
}

fn task_of(from: Witness, exit: &ManagedExit, recorded: &TaskState) -> Option<TaskState> {
    // A container whose start failed never had a task to tell about.
    let started_at = exit.started_at?;
    // The CRI plugin stamps the start with its own clock once the shim's Start
    // returned, and the finish with the exit time the shim reported: a process that
    // exits at once can "finish" a fraction of a millisecond before it started. It
    // started no later than it ended.
    let started_at = match exit.finished_at {
        Some(finished) if finished < started_at => finished,
        _ => started_at,
    };
    Some(TaskState {
        pid: recorded.pid,
        status: TaskStatus::Stopped,
        // Exit codes are a byte on Linux; the CRI and dockerd keep them as int32.
        exit_status: Some(exit.exit_code as u32),
        exited_at: exit.finished_at,
        deleted: true,
        started_at: Some(started_at),
        reason: exit.reason.clone(),
        from: Some(from),
    })
}

/// dockerd's containers are in containerd only while they run: the rest are shown
/// as containers that are `gone` from containerd, with their last run's task.
fn fold_docker(daemon: &mut NodeState, recorded: &NodeState, view: &ManagerView) {
    let recorded_ns = recorded.namespaces.get(DOCKER_NAMESPACE);
    let ns = daemon
        .namespaces
        .entry(DOCKER_NAMESPACE.to_owned())
        .or_default();
    let Some(containers) = &view.containers else {
        // Not listed: keep what the record took from dockerd.
        for (id, container) in recorded_ns.iter().flat_map(|r| &r.containers) {
            if container.gone && !ns.containers.contains_key(id) {
                ns.containers.insert(id.clone(), container.clone());
                if let Some(task) = recorded_ns.and_then(|r| r.tasks.get(id)) {
                    ns.tasks.entry(id.clone()).or_insert_with(|| task.clone());
                }
            }
        }
        return;
    };
    for (id, managed) in containers {
        let recorded_task = recorded_ns.and_then(|r| r.tasks.get(id));
        if let Some(container) = ns.containers.get_mut(id) {
            if container.workload.is_none() {
                container.workload = managed.workload.clone();
            }
            // containerd keeps no start time: the record's (its `/tasks/start`) for
            // the same task, or dockerd's.
            if let Some(task) = ns.tasks.get_mut(id)
                && task.started_at.is_none()
            {
                task.started_at = recorded_task
                    .filter(|r| r.pid == task.pid && !r.deleted && r.started_at.is_some())
                    .and_then(|r| r.started_at)
                    .or(managed.started_at);
            }
            if !ns.tasks.contains_key(id)
                && let Some(task) = folded_task(Witness::Docker, Some(Some(managed)), recorded_task)
            {
                ns.tasks.insert(id.clone(), task);
            }
            continue;
        }
        if managed.status != ManagedStatus::Exited {
            // Created and never started, or running and not in containerd's list
            // yet: containerd's own events and lists will tell.
            continue;
        }
        let Some(task) = folded_task(Witness::Docker, Some(Some(managed)), recorded_task) else {
            continue;
        };
        let recorded_container = recorded_ns.and_then(|r| r.containers.get(id));
        let container = match recorded_container {
            Some(kept) if kept.gone && Some(&task) == recorded_task => kept.clone(),
            _ => ContainerState {
                image: managed.image.clone(),
                created_at: managed.created_at,
                workload: managed.workload.clone(),
                gone: true,
                from: Some(Witness::Docker),
                ..ContainerState::default()
            },
        };
        ns.containers.insert(id.clone(), container);
        ns.tasks.insert(id.clone(), task);
    }
    for (id, managed) in containers {
        let last = match ns.tasks.get(id) {
            Some(task) if !task.deleted && task.status != TaskStatus::Stopped => Last::Running,
            _ if managed.status == ManagedStatus::Exited => Last::Exited,
            _ => Last::Other,
        };
        let seen = Seen {
            id,
            recorded: recorded_ns.and_then(|r| r.tasks.get(id)),
            created_at: managed.created_at,
            last,
            restart_count: managed.restart_count,
        };
        if let Some(found) = runs::gap_runs(&seen, view.log.as_ref()) {
            ns.gap_runs.insert(id.clone(), found);
        }
    }
    if ns.containers.is_empty() && ns.tasks.is_empty() && ns.images.is_empty() {
        let had = recorded.namespaces.contains_key(DOCKER_NAMESPACE);
        if !had && ns.labels.is_none() {
            daemon.namespaces.remove(DOCKER_NAMESPACE);
        }
    }
}

#[cfg(test)]
#[path = "managed_tests.rs"]
mod tests;
