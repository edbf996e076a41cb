//! One container's task: the events that lead from the recorded state of its init
//! process to the daemon's.

use std::time::SystemTime;

use prost_types::Any;

use super::{Change, Context, Phases, UNKNOWN_EXIT_STATUS, any, stamp};
use crate::event::Witness;
use crate::proto::containerd::events as ev;
use crate::reconcile::apply::Object;
use crate::reconcile::state::{TaskState, TaskStatus};

use crate::reconcile::run::OOM_KILLED;

/// One container's task: the events that lead from one state to another.
pub(super) struct TaskChanges<'a> {
    pub(super) context: &'a Context<'a>,
    pub(super) id: &'a str,
    pub(super) object: &'a Object,
}

/// Where a task's events go and what they carry: containerd's own lists tell
/// changes in their phases at the daemon's or the reconcile's time; a manager's
/// record tells a whole run at its own times.
#[derive(Clone, Copy)]
struct Told<'a> {
    from: Witness,
    reason: Option<&'a str>,
}

const CONTAINERD: Told<'static> = Told {
    from: Witness::Containerd,
    reason: None,
};

fn told(task: &TaskState) -> Told<'_> {
    Told {
        from: task.from.unwrap_or_default(),
        reason: task.reason.as_deref(),
    }
}

impl TaskChanges<'_> {
    fn push(
        &self,
        phases: &mut Phases,
        phase: fn(&mut Phases) -> &mut Vec<Change>,
        (topic, event): (&'static str, Any),
        at: Option<SystemTime>,
        told: Told<'_>,
    ) {
        let mut change = self.context.change(topic, event, at, self.object);
        change.from = told.from;
        change.reason = told.reason.map(str::to_owned);
        match told.from {
            Witness::Containerd => phase(phases).push(change),
            _ => phases.runs.push(change),
        }
    }

    fn create(&self, task: &TaskState, phases: &mut Phases) {
        let event = ev::TaskCreate {
            container_id: self.id.to_owned(),
            pid: task.pid,
            ..Default::default()
        };
        self.push(
            phases,
            |p| &mut p.task_starts,
            ("/tasks/create", any("containerd.events.TaskCreate", &event)),
            None,
            CONTAINERD,
        );
    }

    fn start(&self, task: &TaskState, phases: &mut Phases, told: Told<'_>) {
        let event = ev::TaskStart {
            container_id: self.id.to_owned(),
            pid: task.pid,
        };
        self.push(
            phases,
            |p| &mut p.task_starts,
            ("/tasks/start", any("containerd.events.TaskStart", &event)),
            task.started_at,
            Told {
                reason: None,
                ..told
            },
        );
    }

    fn exit(&self, task: &TaskState, phases: &mut Phases, told: Told<'_>) {
        if told.reason == Some(OOM_KILLED) {
            // containerd publishes the OOM before the exit it causes.
            let event = ev::TaskOom {
                container_id: self.id.to_owned(),
            };
            self.push(
                phases,
                |p| &mut p.task_exits,
                ("/tasks/oom", any("containerd.events.TaskOOM", &event)),
                task.exited_at,
                told,
            );
        }
        let event = ev::TaskExit {
            container_id: self.id.to_owned(),
            id: self.id.to_owned(),
            pid: task.pid,
            exit_status: task.exit_status.unwrap_or(UNKNOWN_EXIT_STATUS),
            exited_at: stamp(task.exited_at),
        };
        self.push(
            phases,
            |p| &mut p.task_exits,
            ("/tasks/exit", any("containerd.events.TaskExit", &event)),
            task.exited_at,
            told,
        );
    }

    fn delete(&self, task: &TaskState, phases: &mut Phases, told: Told<'_>) {
        let event = ev::TaskDelete {
            container_id: self.id.to_owned(),
            pid: task.pid,
            exit_status: task.exit_status.unwrap_or(UNKNOWN_EXIT_STATUS),
            exited_at: stamp(task.exited_at),
            id: String::new(),
        };
        // A manager deletes the task as it exits: the delete is told at the exit.
        let at = match told.from {
            Witness::Containerd => None,
            _ => task.exited_at,
        };
        self.push(
            phases,
            |p| &mut p.task_deletes,
            ("/tasks/delete", any("containerd.events.TaskDelete", &event)),
            at,
            Told {
                reason: None,
                ..told
            },
        );
    }

    fn paused(&self, paused: bool, phases: &mut Phases) {
        let container_id = self.id.to_owned();
        let change = if paused {
            (
                "/tasks/paused",
                any(
                    "containerd.events.TaskPaused",
                    &ev::TaskPaused { container_id },
                ),
            )
        } else {
            (
                "/tasks/resumed",
                any(
                    "containerd.events.TaskResumed",
                    &ev::TaskResumed { container_id },
                ),
            )
        };
        self.push(phases, |p| &mut p.task_pauses, change, None, CONTAINERD);
    }

    /// A task the record does not know: it got as far as the daemon says (for one a
    /// manager kept, as far as deleted).
    pub(super) fn opened(&self, d: &TaskState, phases: &mut Phases) {
        match d.status {
            TaskStatus::Created => self.create(d, phases),
            TaskStatus::Running | TaskStatus::Unknown => self.start(d, phases, CONTAINERD),
            TaskStatus::Paused | TaskStatus::Pausing => {
                self.start(d, phases, CONTAINERD);
                self.paused(true, phases);
            }
            TaskStatus::Stopped => {
                self.start(d, phases, told(d));
                self.exit(d, phases, told(d));
                if d.deleted {
                    self.delete(d, phases, told(d));
                }
            }
        }
    }

    /// A task the daemon no longer has: it was deleted, and if its exit was not
    /// recorded, that exit is lost.
    pub(super) fn closed(
        &self,
        r: &TaskState,
        phases: &mut Phases,
        unknown_exits: &mut Vec<(String, String)>,
    ) {
        let mut last = r.clone();
        if r.status != TaskStatus::Stopped {
            last.exit_status = None;
            last.exited_at = None;
            self.exit(&last, phases, CONTAINERD);
            unknown_exits.push((self.context.namespace.to_owned(), self.id.to_owned()));
        }
        self.delete(&last, phases, CONTAINERD);
    }

    /// A task the record has not seen deleted, which a manager shows exited and
    /// deleted: its exit, where not recorded, and its delete, as the manager tells.
    pub(super) fn ended(&self, r: &TaskState, d: &TaskState, phases: &mut Phases) {
        let mut last = d.clone();
        last.pid = r.pid;
        match r.status {
            TaskStatus::Stopped => {
                last.exit_status = r.exit_status.or(d.exit_status);
                last.exited_at = r.exited_at.or(d.exited_at);
            }
            TaskStatus::Created => {
                self.start(&last, phases, told(d));
                self.exit(&last, phases, told(d));
            }
            _ => self.exit(&last, phases, told(d)),
        }
        self.delete(&last, phases, told(d));
    }

    /// The same task (same pid) in another state.
    pub(super) fn moved(&self, r: &TaskState, d: &TaskState, phases: &mut Phases) {
        use TaskStatus::*;
        match (r.status, d.status) {
            (Created, Running) => self.start(d, phases, CONTAINERD),
            (Created, Paused | Pausing) => {
                self.start(d, phases, CONTAINERD);
                self.paused(true, phases);
            }
            (Created, Stopped) => {
                self.start(d, phases, CONTAINERD);
                self.exit(d, phases, CONTAINERD);
            }
            (Running | Unknown, Paused | Pausing) => self.paused(true, phases),
            (Paused | Pausing, Running) => self.paused(false, phases),
            (Running | Unknown | Paused | Pausing, Stopped) => self.exit(d, phases, CONTAINERD),
            _ => {}
        }
    }
}
