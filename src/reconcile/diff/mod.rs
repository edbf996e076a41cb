//! The differences between what eventgate recorded and what the daemon holds, as the
//! standard containerd events that would have said so, in the order they must have
//! happened: namespaces and images first, then containers, then their tasks (create,
//! start, pause, exit, delete), then what was removed, namespaces last.
//!
//! Objects the live stream spoke about while the lists were read are left out: the
//! stream is the better witness for them, and a change it reports must not be
//! recorded twice.

mod tasks;

use tasks::TaskChanges;

use std::collections::{BTreeMap, BTreeSet};
use std::time::SystemTime;

use prost::Message;
use prost_types::{Any, Timestamp};

use super::apply::Object;
use super::state::{ContainerState, ImageState, Labels, NamespaceState, NodeState};
use crate::proto::containerd::events as ev;
use crate::proto::containerd::services::images::v1 as img;

/// The exit status containerd (and its CRI plugin) records when a process's real one
/// is unknown.
pub(crate) const UNKNOWN_EXIT_STATUS: u32 = 255;

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
        };
        context.images(r, d, &mut phases);
        context.containers(r, d, &mut phases);
        context.tasks(r, d, &mut phases, &mut unknown_exits);
    }
    // Exits in the order the daemon says they happened; unknown times last.
    phases
        .task_exits
        .sort_by_key(|c| (c.daemon_time.is_none(), c.daemon_time));
    // Destructured, not read field by field: a phase added later cannot be left out.
    let Phases {
        namespaces,
        images,
        containers,
        container_updates,
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
                (Some(r), None) => task.closed(r, phases, unknown_exits),
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
