//! One container's task: the events that lead from the recorded state of its init
//! process to the daemon's.

use std::time::SystemTime;

use prost_types::Any;

use super::{Change, Context, Phases, UNKNOWN_EXIT_STATUS, any, stamp};
use crate::proto::containerd::events as ev;
use crate::reconcile::apply::Object;
use crate::reconcile::state::{TaskState, TaskStatus};

/// One container's task: the events that lead from one state to another.
pub(super) struct TaskChanges<'a> {
    pub(super) context: &'a Context<'a>,
    pub(super) id: &'a str,
    pub(super) object: &'a Object,
}

impl TaskChanges<'_> {
    fn push(
        &self,
        into: &mut Vec<Change>,
        topic: &'static str,
        event: Any,
        at: Option<SystemTime>,
    ) {
        into.push(self.context.change(topic, event, at, self.object));
    }

    fn create(&self, task: &TaskState, phases: &mut Phases) {
        let event = ev::TaskCreate {
            container_id: self.id.to_owned(),
            pid: task.pid,
            ..Default::default()
        };
        self.push(
            &mut phases.task_starts,
            "/tasks/create",
            any("containerd.events.TaskCreate", &event),
            None,
        );
    }

    fn start(&self, task: &TaskState, phases: &mut Phases) {
        let event = ev::TaskStart {
            container_id: self.id.to_owned(),
            pid: task.pid,
        };
        self.push(
            &mut phases.task_starts,
            "/tasks/start",
            any("containerd.events.TaskStart", &event),
            None,
        );
    }

    fn exit(&self, task: &TaskState, phases: &mut Phases) {
        let event = ev::TaskExit {
            container_id: self.id.to_owned(),
            id: self.id.to_owned(),
            pid: task.pid,
            exit_status: task.exit_status.unwrap_or(UNKNOWN_EXIT_STATUS),
            exited_at: stamp(task.exited_at),
        };
        self.push(
            &mut phases.task_exits,
            "/tasks/exit",
            any("containerd.events.TaskExit", &event),
            task.exited_at,
        );
    }

    fn paused(&self, paused: bool, phases: &mut Phases) {
        let container_id = self.id.to_owned();
        let (topic, event) = if paused {
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
        self.push(&mut phases.task_pauses, topic, event, None);
    }

    /// A task the record does not know: it got as far as the daemon says.
    pub(super) fn opened(&self, d: &TaskState, phases: &mut Phases) {
        match d.status {
            TaskStatus::Created => self.create(d, phases),
            TaskStatus::Running | TaskStatus::Unknown => self.start(d, phases),
            TaskStatus::Paused | TaskStatus::Pausing => {
                self.start(d, phases);
                self.paused(true, phases);
            }
            TaskStatus::Stopped => {
                self.start(d, phases);
                self.exit(d, phases);
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
            self.exit(&last, phases);
            unknown_exits.push((self.context.namespace.to_owned(), self.id.to_owned()));
        }
        let event = ev::TaskDelete {
            container_id: self.id.to_owned(),
            pid: last.pid,
            exit_status: last.exit_status.unwrap_or(UNKNOWN_EXIT_STATUS),
            exited_at: stamp(last.exited_at),
            id: String::new(),
        };
        self.push(
            &mut phases.task_deletes,
            "/tasks/delete",
            any("containerd.events.TaskDelete", &event),
            None,
        );
    }

    /// The same task (same pid) in another state.
    pub(super) fn moved(&self, r: &TaskState, d: &TaskState, phases: &mut Phases) {
        use TaskStatus::*;
        match (r.status, d.status) {
            (Created, Running) => self.start(d, phases),
            (Created, Paused | Pausing) => {
                self.start(d, phases);
                self.paused(true, phases);
            }
            (Created, Stopped) => {
                self.start(d, phases);
                self.exit(d, phases);
            }
            (Running | Unknown, Paused | Pausing) => self.paused(true, phases),
            (Paused | Pausing, Running) => self.paused(false, phases),
            (Running | Unknown | Paused | Pausing, Stopped) => self.exit(d, phases),
            _ => {}
        }
    }
}
