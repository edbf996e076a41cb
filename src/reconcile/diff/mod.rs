//! The differences between what eventgate recorded and what the daemon holds, as the
//! standard containerd events that would have said so, in the order they must have
//! happened: namespaces and images first, then containers, then their tasks (create,
//! start, pause, exit, delete), then what was removed, namespaces last.
//!
//! Objects the live stream spoke about while the lists were read are left out: the
//! stream is the better witness for them, and a change it reports must not be
//! recorded twice.

mod gap;
mod tasks;

use tasks::TaskChanges;

use std::collections::{BTreeMap, BTreeSet};
use std::time::SystemTime;

use prost::Message;
use prost_types::{Any, Timestamp};

use super::apply::Object;
use super::state::{ContainerState, ImageState, Labels, NamespaceState, NodeState};
use crate::event::Witness;
use crate::proto::containerd::events as ev;
use crate::proto::containerd::services::images::v1 as img;

pub(crate) use super::run::UNKNOWN_EXIT_STATUS;

/// One event to record.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Change {
    pub namespace: String,
    pub topic: &'static str,
    pub event: Any,
    /// The daemon's own time for it, where a list said; otherwise it is recorded at
    /// the reconcile's time.
    pub daemon_time: Option<SystemTime>,
    pub object: Object,
    /// Whose record told it: containerd's lists, or a manager above containerd.
    pub from: Witness,
    /// The manager's reason, on an exit it told.
    pub reason: Option<String>,
    /// `daemon_time` is a bound the daemon's record gives (the run happened after
    /// it), not when this happened: the record says the reconcile's clock.
    pub bound: bool,
    /// Among changes at the same time, which run of its container it belongs to.
    pub order: u32,
}

/// Everything a reconcile found.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Diff {
    pub changes: Vec<Change>,
    /// Tasks that exited and were removed while nobody watched: their exit status is
    /// recorded as 255 because it is lost.
    pub unknown_exits: Vec<(String, String)>,
}

impl Diff {
    /// How many changes of each topic, for the marker.
    pub(crate) fn counts(&self) -> BTreeMap<&'static str, u64> {
        let mut counts = BTreeMap::new();
        for change in &self.changes {
            *counts.entry(change.topic).or_default() += 1;
        }
        counts
    }
}

pub(super) fn any<M: Message>(type_url: &str, message: &M) -> Any {
    Any {
        type_url: type_url.to_owned(),
        value: message.encode_to_vec(),
    }
}

pub(super) fn stamp(time: Option<SystemTime>) -> Option<Timestamp> {
    time.map(Timestamp::from)
}

fn labels(labels: &Option<Labels>) -> std::collections::HashMap<String, String> {
    labels
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Known on both sides and different: an unknown value (`None`) is never a change.
fn differ<T: PartialEq>(recorded: &Option<T>, daemon: &Option<T>) -> bool {
    matches!((recorded, daemon), (Some(r), Some(d)) if r != d)
}

/// Changes are gathered per phase and concatenated in phase order.
#[derive(Default)]
pub(super) struct Phases {
    pub(super) namespaces: Vec<Change>,
    pub(super) images: Vec<Change>,
    pub(super) containers: Vec<Change>,
    pub(super) container_updates: Vec<Change>,
    /// Whole runs a manager kept (start, exit, deletes, each at the manager's
    /// time), merged in time order with the creates of their containers.
    pub(super) runs: Vec<Change>,
    pub(super) task_starts: Vec<Change>,
    pub(super) task_pauses: Vec<Change>,
    pub(super) task_exits: Vec<Change>,
    pub(super) task_deletes: Vec<Change>,
    pub(super) container_deletes: Vec<Change>,
    pub(super) image_deletes: Vec<Change>,
    pub(super) namespace_deletes: Vec<Change>,
}

/// What must have happened for `recorded` to become `daemon`, leaving out `skip`.
pub(crate) fn diff(recorded: &NodeState, daemon: &NodeState, skip: &BTreeSet<Object>) -> Diff {
    let mut phases = Phases::default();
    let mut unknown_exits = Vec::new();
    let empty = NamespaceState::default();
    let names: BTreeSet<&String> = recorded
        .namespaces
        .keys()
        .chain(daemon.namespaces.keys())
        .collect();
    for name in names {
        let r = recorded.namespaces.get(name);
        let d = daemon.namespaces.get(name);
        if !skip.contains(&Object::Namespace(name.clone())) {
            namespace(name, r, d, &mut phases);
        }
        let (r, d) = (r.unwrap_or(&empty), d.unwrap_or(&empty));
        let context = Context {
            namespace: name,
            skip,
            daemon_tasks: &d.tasks,
            recorded_tasks: &r.tasks,
        };
        // A manager's runs the record missed before each container's last: told
        // first, and the rest compared with the record as it would be had it seen
        // them.
        let advanced;
        let r = match d.gap_runs.is_empty() {
            true => r,
            false => {
                advanced = context.gap_runs(r, d, &mut phases, &mut unknown_exits);
                &advanced
            }
        };
        let context = Context {
            recorded_tasks: &r.tasks,
            ..context
        };
        context.images(r, d, &mut phases);
        context.containers(r, d, &mut phases);
        context.tasks(r, d, &mut phases, &mut unknown_exits);
    }
    // Exits in the order the daemon says they happened; unknown times last.
    phases
        .task_exits
        .sort_by_key(|c| (c.daemon_time.is_none(), c.daemon_time));
    // A manager's runs in the order they happened, each container's create taken
    // in with them (a container made for a later attempt was created after the
    // earlier one exited). Each container's own events are in order already and
    // their times never go backwards, so a stable sort keeps it.
    let run_containers: BTreeSet<Object> = phases
        .runs
        .iter()
        .filter_map(|c| match &c.object {
            Object::Task(ns, id) => Some(Object::Container(ns.clone(), id.clone())),
            _ => None,
        })
        .collect();
    let (creates, others): (Vec<Change>, Vec<Change>) = std::mem::take(&mut phases.containers)
        .into_iter()
        .partition(|c| run_containers.contains(&c.object) && c.daemon_time.is_some());
    phases.containers = others;
    phases.runs.splice(0..0, creates);
    // A time a manager did not keep sorts last, as the reconcile's own would.
    phases.runs.sort_by_key(|c| {
        (
            c.daemon_time.is_none(),
            c.daemon_time,
            c.order,
            run_rank(c.topic),
        )
    });
    // Destructured, not read field by field: a phase added later cannot be left out.
    let Phases {
        namespaces,
        images,
        containers,
        container_updates,
        runs,
        task_starts,
        task_pauses,
        task_exits,
        task_deletes,
        container_deletes,
        image_deletes,
        namespace_deletes,
    } = phases;
    let changes = [
        namespaces,
        images,
        containers,
        container_updates,
        runs,
        task_starts,
        task_pauses,
        task_exits,
        task_deletes,
        container_deletes,
        image_deletes,
        namespace_deletes,
    ]
    .into_iter()
    .flatten()
    .collect();
    Diff {
        changes,
        unknown_exits,
    }
}

fn namespace(
    name: &str,
    r: Option<&NamespaceState>,
    d: Option<&NamespaceState>,
    phases: &mut Phases,
) {
    let object = Object::Namespace(name.to_owned());
    let change = |topic, event| Change {
        namespace: name.to_owned(),
        topic,
        event,
        daemon_time: None,
        object: object.clone(),
        from: Witness::Containerd,
        reason: None,
        bound: false,
        order: 0,
    };
    match (r, d) {
        (None, Some(d)) => phases.namespaces.push(change(
            "/namespaces/create",
            any(
                "containerd.events.NamespaceCreate",
                &ev::NamespaceCreate {
                    name: name.to_owned(),
                    labels: labels(&d.labels),
                },
            ),
        )),
        (Some(r), Some(d)) if differ(&r.labels, &d.labels) => phases.namespaces.push(change(
            "/namespaces/update",
            any(
                "containerd.events.NamespaceUpdate",
                &ev::NamespaceUpdate {
                    name: name.to_owned(),
                    labels: labels(&d.labels),
                },
            ),
        )),
        (Some(_), None) => phases.namespace_deletes.push(change(
            "/namespaces/delete",
            any(
                "containerd.events.NamespaceDelete",
                &ev::NamespaceDelete {
                    name: name.to_owned(),
                },
            ),
        )),
        _ => {}
    }
}

pub(super) struct Context<'a> {
    pub(super) namespace: &'a str,
    skip: &'a BTreeSet<Object>,
    /// The daemon's side's tasks of this namespace, for the times of deletes that
    /// happened at an exit.
    daemon_tasks: &'a BTreeMap<String, super::state::TaskState>,
    /// The record's, to tell a container dockerd ran again from one it did not.
    recorded_tasks: &'a BTreeMap<String, super::state::TaskState>,
}

impl Context<'_> {
    fn change(
        &self,
        topic: &'static str,
        event: Any,
        daemon_time: Option<SystemTime>,
        object: &Object,
    ) -> Change {
        Change {
            namespace: self.namespace.to_owned(),
            topic,
            event,
            daemon_time,
            object: object.clone(),
            from: Witness::Containerd,
            reason: None,
            bound: false,
            order: 0,
        }
    }

    fn images(&self, r: &NamespaceState, d: &NamespaceState, phases: &mut Phases) {
        let names: BTreeSet<&String> = r.images.keys().chain(d.images.keys()).collect();
        for name in names {
            let object = Object::Image(self.namespace.to_owned(), name.clone());
            if self.skip.contains(&object) {
                continue;
            }
            let labels_of = |image: &ImageState| labels(&image.labels);
            match (r.images.get(name), d.images.get(name)) {
                (None, Some(d)) => phases.images.push(self.change(
                    "/images/create",
                    any(
                        "containerd.services.images.v1.ImageCreate",
                        &img::ImageCreate {
                            name: name.clone(),
                            labels: labels_of(d),
                        },
                    ),
                    d.created_at,
                    &object,
                )),
                (Some(r), Some(d))
                    if differ(&r.target_digest, &d.target_digest)
                        || differ(&r.labels, &d.labels) =>
                {
                    phases.images.push(self.change(
                        "/images/update",
                        any(
                            "containerd.services.images.v1.ImageUpdate",
                            &img::ImageUpdate {
                                name: name.clone(),
                                labels: labels_of(d),
                            },
                        ),
                        d.updated_at,
                        &object,
                    ))
                }
                (Some(_), None) => phases.image_deletes.push(self.change(
                    "/images/delete",
                    any(
                        "containerd.services.images.v1.ImageDelete",
                        &img::ImageDelete { name: name.clone() },
                    ),
                    None,
                    &object,
                )),
                _ => {}
            }
        }
    }

    fn containers(&self, r: &NamespaceState, d: &NamespaceState, phases: &mut Phases) {
        let ids: BTreeSet<&String> = r.containers.keys().chain(d.containers.keys()).collect();
        for id in ids {
            let object = Object::Container(self.namespace.to_owned(), id.clone());
            if self.skip.contains(&object) {
                continue;
            }
            match (r.containers.get(id), d.containers.get(id)) {
                (None, Some(d)) if d.gone => {
                    // Ran and was removed from containerd inside the gap (dockerd):
                    // created, and deleted when its task exited.
                    let mut create = self.change(
                        "/containers/create",
                        any("containerd.events.ContainerCreate", &create(id, d)),
                        d.created_at,
                        &object,
                    );
                    create.from = d.from.unwrap_or_default();
                    phases.containers.push(create);
                    self.deleted(id, d, &object, phases);
                }
                (Some(r), Some(d)) if !r.gone && d.gone => self.deleted(id, d, &object, phases),
                (Some(r), Some(d)) if r.gone && !d.gone => phases.containers.push(self.change(
                    "/containers/create",
                    any("containerd.events.ContainerCreate", &create(id, d)),
                    d.created_at,
                    &object,
                )),
                (Some(_), Some(d)) if d.gone && self.ran_again(id) => {
                    // dockerd ran it again under the same id: containerd's container
                    // was created for that run, and deleted at its exit.
                    let at = self.daemon_tasks.get(id).and_then(|t| t.started_at);
                    let mut create = self.change(
                        "/containers/create",
                        any("containerd.events.ContainerCreate", &create(id, d)),
                        at,
                        &object,
                    );
                    create.from = d.from.unwrap_or(Witness::Docker);
                    match at {
                        Some(_) => phases.runs.push(create),
                        None => phases.containers.push(create),
                    }
                    self.deleted(id, d, &object, phases);
                }
                (Some(r), Some(d)) if r.gone || d.gone => {}
                (Some(r), None) if r.gone => {}
                (None, Some(d)) => phases.containers.push(self.change(
                    "/containers/create",
                    any("containerd.events.ContainerCreate", &create(id, d)),
                    d.created_at,
                    &object,
                )),
                (Some(r), Some(d)) if r.image != d.image || differ(&r.labels, &d.labels) => {
                    phases.container_updates.push(self.change(
                        "/containers/update",
                        any(
                            "containerd.events.ContainerUpdate",
                            &ev::ContainerUpdate {
                                id: id.clone(),
                                image: d.image.clone(),
                                labels: labels(&d.labels),
                                snapshot_key: String::new(),
                            },
                        ),
                        d.updated_at,
                        &object,
                    ))
                }
                (Some(_), None) => phases.container_deletes.push(self.change(
                    "/containers/delete",
                    any(
                        "containerd.events.ContainerDelete",
                        &ev::ContainerDelete { id: id.clone() },
                    ),
                    None,
                    &object,
                )),
                _ => {}
            }
        }
    }

    fn tasks(
        &self,
        r: &NamespaceState,
        d: &NamespaceState,
        phases: &mut Phases,
        unknown_exits: &mut Vec<(String, String)>,
    ) {
        let ids: BTreeSet<&String> = r.tasks.keys().chain(d.tasks.keys()).collect();
        for id in ids {
            let object = Object::Task(self.namespace.to_owned(), id.clone());
            if self.skip.contains(&object) {
                continue;
            }
            let task = TaskChanges {
                context: self,
                id,
                object: &object,
            };
            match (r.tasks.get(id), d.tasks.get(id)) {
                (None, Some(d)) => task.opened(d, phases),
                // Deleted, and the delete was recorded.
                (Some(r), None) if r.deleted => {}
                (Some(r), None) => task.closed(r, phases, unknown_exits),
                (Some(r), Some(d)) if r.deleted && d.deleted => {
                    if crate::reconcile::managed::later(d, r) {
                        task.opened(d, phases);
                    }
                }
                (Some(r), Some(d)) if r.deleted => task.opened(d, phases),
                (Some(r), Some(d)) if d.deleted => task.ended(r, d, phases),
                (Some(r), Some(d)) if r.pid != d.pid => {
                    // Another task of the same container ran in the gap: the old one
                    // ended before it, whatever the phases say.
                    let mut old = Phases::default();
                    task.closed(r, &mut old, unknown_exits);
                    phases.task_starts.append(&mut old.task_exits);
                    phases.task_starts.append(&mut old.task_deletes);
                    task.opened(d, phases);
                }
                (Some(r), Some(d)) => task.moved(r, d, phases),
                (None, None) => {}
            }
        }
    }
}

impl Context<'_> {
    /// Whether the record's container is gone with its run deleted, and the daemon's
    /// side shows a later run of it, also ended.
    fn ran_again(&self, id: &str) -> bool {
        match (self.recorded_tasks.get(id), self.daemon_tasks.get(id)) {
            (Some(r), Some(d)) => r.deleted && d.deleted && crate::reconcile::managed::later(d, r),
            _ => false,
        }
    }

    /// A container removed from containerd when its task exited (dockerd does so),
    /// told at that exit where the manager said when it was.
    fn deleted(&self, id: &str, d: &ContainerState, object: &Object, phases: &mut Phases) {
        let exited_at = self.daemon_tasks.get(id).and_then(|t| t.exited_at);
        let mut change = self.change(
            "/containers/delete",
            any(
                "containerd.events.ContainerDelete",
                &ev::ContainerDelete { id: id.to_owned() },
            ),
            exited_at,
            object,
        );
        change.from = d.from.unwrap_or(Witness::Docker);
        match exited_at {
            Some(_) => phases.runs.push(change),
            None => phases.container_deletes.push(change),
        }
    }
}

/// The order of a run's events that share a time: a manager deletes the task, and
/// dockerd the container, at the exit.
fn run_rank(topic: &str) -> u8 {
    match topic {
        "/containers/create" => 0,
        "/tasks/start" => 1,
        "/tasks/oom" => 2,
        "/tasks/exit" => 3,
        "/tasks/delete" => 4,
        _ => 5,
    }
}

fn create(id: &str, container: &ContainerState) -> ev::ContainerCreate {
    ev::ContainerCreate {
        id: id.to_owned(),
        image: container.image.clone(),
        runtime: Some(ev::container_create::Runtime {
            name: container.runtime.clone(),
            options: None,
        }),
    }
}
