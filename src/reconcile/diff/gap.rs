//! A Docker container's runs inside a gap before its last (see `reconcile::runs`):
//! each as containerd published it under dockerd, its containerd container created
//! for the run and deleted at its exit, all told as dockerd's.

use std::time::SystemTime;

use super::tasks::TaskChanges;
use super::{Context, Phases, any, create};
use crate::event::Witness;
use crate::proto::containerd::events as ev;
use crate::reconcile::apply::Object;
use crate::reconcile::managed::ManagedExit;
use crate::reconcile::run::GapRuns;
use crate::reconcile::state::{ContainerState, NamespaceState, TaskState, TaskStatus};

impl Context<'_> {
    /// Tells the runs the daemon's side shows the record missed (`d.gap_runs`), and
    /// returns the record as it would be had it recorded them.
    pub(super) fn gap_runs(
        &self,
        r: &NamespaceState,
        d: &NamespaceState,
        phases: &mut Phases,
        unknown_exits: &mut Vec<(String, String)>,
    ) -> NamespaceState {
        let mut advanced = r.clone();
        for (id, runs) in &d.gap_runs {
            let task_object = Object::Task(self.namespace.to_owned(), id.clone());
            let container_object = Object::Container(self.namespace.to_owned(), id.clone());
            // The live stream spoke of it while the lists were read: it tells.
            if self.skip.contains(&task_object) || self.skip.contains(&container_object) {
                continue;
            }
            let container = d
                .containers
                .get(id)
                .or_else(|| r.containers.get(id))
                .cloned()
                .unwrap_or_default();
            let run = Run {
                context: self,
                id,
                container: &container,
                task: TaskChanges {
                    context: self,
                    id,
                    object: &task_object,
                },
                object: &container_object,
            };
            let mut last = None;
            match runs {
                GapRuns::Logged { ended, runs } => {
                    if let (Some(exit), Some(recorded)) = (ended, r.tasks.get(id)) {
                        let mut ended = recorded.clone();
                        ended.status = TaskStatus::Stopped;
                        ended.exit_status = Some(exit.exit_code as u32);
                        ended.exited_at = exit.finished_at;
                        ended.reason = exit.reason.clone();
                        ended.deleted = true;
                        ended.from = Some(Witness::Docker);
                        run.task.ended(recorded, &ended, phases);
                        run.container_deleted(ended.exited_at, phases);
                        last = Some(ended);
                    }
                    for exit in runs {
                        last = Some(run.whole(exit, phases));
                    }
                }
                GapRuns::Counted { runs, after } => {
                    for n in 0..*runs {
                        let first = phases.runs.len();
                        let unknown = ManagedExit {
                            started_at: *after,
                            finished_at: *after,
                            exit_code: super::UNKNOWN_EXIT_STATUS as i32,
                            reason: None,
                        };
                        let told = run.whole(&unknown, phases);
                        for change in &mut phases.runs[first..] {
                            change.bound = true;
                            change.order = u32::try_from(n).unwrap_or(u32::MAX);
                        }
                        unknown_exits.push((self.namespace.to_owned(), id.clone()));
                        last = Some(told);
                    }
                }
            }
            if let Some(task) = last {
                advanced.tasks.insert(id.clone(), task);
                let container = advanced
                    .containers
                    .entry(id.clone())
                    .or_insert_with(|| container.clone());
                container.gone = true;
            }
        }
        advanced
    }
}

/// One container's runs being told.
struct Run<'a> {
    context: &'a Context<'a>,
    id: &'a str,
    container: &'a ContainerState,
    task: TaskChanges<'a>,
    object: &'a Object,
}

impl Run<'_> {
    /// A whole run: its containerd container created, its task started, exited and
    /// deleted, the container deleted. Returns the run's task as the record keeps it.
    fn whole(&self, exit: &ManagedExit, phases: &mut Phases) -> TaskState {
        let task = TaskState {
            pid: 0,
            status: TaskStatus::Stopped,
            exit_status: Some(exit.exit_code as u32),
            exited_at: exit.finished_at,
            deleted: true,
            started_at: exit.started_at,
            reason: exit.reason.clone(),
            from: Some(Witness::Docker),
        };
        let mut change = self.context.change(
            "/containers/create",
            any(
                "containerd.events.ContainerCreate",
                &create(self.id, self.container),
            ),
            exit.started_at,
            self.object,
        );
        change.from = Witness::Docker;
        phases.runs.push(change);
        self.task.opened(&task, phases);
        self.container_deleted(exit.finished_at, phases);
        task
    }

    fn container_deleted(&self, at: Option<SystemTime>, phases: &mut Phases) {
        let mut change = self.context.change(
            "/containers/delete",
            any(
                "containerd.events.ContainerDelete",
                &ev::ContainerDelete {
                    id: self.id.to_owned(),
                },
            ),
            at,
            self.object,
        );
        change.from = Witness::Docker;
        phases.runs.push(change);
    }
}
