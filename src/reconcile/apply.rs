//! Advancing a snapshot by one recorded event: what each containerd topic says about
//! the daemon's state. Events of other topics, and payloads that do not decode as the
//! topic's type, leave the state as it is (they are kept in the record regardless).

use prost::Message;
use prost_types::Any;

use super::list::daemon_time;
use super::managed::DOCKER_NAMESPACE;
use super::state::{ContainerState, ImageState, NamespaceState, NodeState, TaskState, TaskStatus};
use crate::proto::containerd::events as ev;
use crate::proto::containerd::services::images::v1 as img;

/// What in a [`NodeState`] an event changed, so that a reconcile knows which objects
/// the live stream has spoken about since it began listing.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Object {
    Namespace(String),
    Container(String, String),
    Task(String, String),
    Image(String, String),
}

fn decode<M: Message + Default>(any: &Any, type_url: &str) -> Option<M> {
    if any.type_url != type_url {
        return None;
    }
    M::decode(any.value.as_slice()).ok()
}

impl NodeState {
    /// Applies one event; returns the object it changed, if any.
    pub fn apply(&mut self, namespace: &str, topic: &str, event: Option<&Any>) -> Option<Object> {
        let any = event?;
        match topic {
            "/namespaces/create" | "/namespaces/update" => {
                let (name, labels) = if topic == "/namespaces/create" {
                    let m: ev::NamespaceCreate = decode(any, "containerd.events.NamespaceCreate")?;
                    (m.name, m.labels)
                } else {
                    let m: ev::NamespaceUpdate = decode(any, "containerd.events.NamespaceUpdate")?;
                    (m.name, m.labels)
                };
                self.namespaces.entry(name.clone()).or_default().labels =
                    Some(labels.into_iter().collect());
                Some(Object::Namespace(name))
            }
            "/namespaces/delete" => {
                let m: ev::NamespaceDelete = decode(any, "containerd.events.NamespaceDelete")?;
                self.namespaces.remove(&m.name);
                Some(Object::Namespace(m.name))
            }
            "/containers/create" => {
                let m: ev::ContainerCreate = decode(any, "containerd.events.ContainerCreate")?;
                let ns = self.namespace(namespace);
                ns.containers.insert(
                    m.id.clone(),
                    ContainerState {
                        image: m.image,
                        runtime: m.runtime.map(|r| r.name).unwrap_or_default(),
                        ..ContainerState::default()
                    },
                );
                Some(Object::Container(namespace.to_owned(), m.id))
            }
            "/containers/update" => {
                let m: ev::ContainerUpdate = decode(any, "containerd.events.ContainerUpdate")?;
                let container = self
                    .namespace(namespace)
                    .containers
                    .entry(m.id.clone())
                    .or_default();
                container.image = m.image;
                container.labels = Some(m.labels.into_iter().collect());
                container.updated_at = None;
                Some(Object::Container(namespace.to_owned(), m.id))
            }
            "/containers/delete" => {
                let m: ev::ContainerDelete = decode(any, "containerd.events.ContainerDelete")?;
                let ns = self.namespace(namespace);
                if namespace == DOCKER_NAMESPACE {
                    // dockerd deletes the containerd container at every exit and keeps
                    // its own until `docker rm`: what ran is still to be known as
                    // recorded when its record shows that exit (see `managed`).
                    if let Some(container) = ns.containers.get_mut(&m.id) {
                        container.gone = true;
                    }
                } else {
                    ns.containers.remove(&m.id);
                    // containerd deletes no container with a task: a task the record
                    // has not seen deleted was, and that delete was missed (in a gap,
                    // or hidden by a filter). Kept, the next reconcile finds it gone
                    // and records its delete, and its exit if that was missed too.
                    if ns.tasks.get(&m.id).is_none_or(|task| task.deleted) {
                        ns.tasks.remove(&m.id);
                    }
                }
                Some(Object::Container(namespace.to_owned(), m.id))
            }
            "/tasks/create" => {
                let m: ev::TaskCreate = decode(any, "containerd.events.TaskCreate")?;
                self.set_task(namespace, &m.container_id, m.pid, TaskStatus::Created)
            }
            "/tasks/start" => {
                let m: ev::TaskStart = decode(any, "containerd.events.TaskStart")?;
                self.set_task(namespace, &m.container_id, m.pid, TaskStatus::Running)
            }
            "/tasks/paused" | "/tasks/resumed" => {
                let (id, status) = if topic == "/tasks/paused" {
                    let m: ev::TaskPaused = decode(any, "containerd.events.TaskPaused")?;
                    (m.container_id, TaskStatus::Paused)
                } else {
                    let m: ev::TaskResumed = decode(any, "containerd.events.TaskResumed")?;
                    (m.container_id, TaskStatus::Running)
                };
                let task = self.namespace(namespace).tasks.get_mut(&id)?;
                task.status = status;
                Some(Object::Task(namespace.to_owned(), id))
            }
            "/tasks/exit" => {
                let m: ev::TaskExit = decode(any, "containerd.events.TaskExit")?;
                // An exec's exit says nothing about the task's init process.
                if !m.id.is_empty() && m.id != m.container_id {
                    return None;
                }
                let task = self
                    .namespace(namespace)
                    .tasks
                    .entry(m.container_id.clone())
                    .or_insert(TaskState {
                        pid: m.pid,
                        status: TaskStatus::Stopped,
                        ..TaskState::default()
                    });
                task.status = TaskStatus::Stopped;
                task.exit_status = Some(m.exit_status);
                task.exited_at = daemon_time(m.exited_at);
                Some(Object::Task(namespace.to_owned(), m.container_id))
            }
            "/tasks/delete" => {
                let m: ev::TaskDelete = decode(any, "containerd.events.TaskDelete")?;
                if !m.id.is_empty() && m.id != m.container_id {
                    return None;
                }
                // Kept as deleted with its exit: a manager above containerd (the CRI,
                // dockerd) goes on showing that exit, which must read as recorded.
                let task = self
                    .namespace(namespace)
                    .tasks
                    .entry(m.container_id.clone())
                    .or_insert(TaskState {
                        pid: m.pid,
                        ..TaskState::default()
                    });
                if task.status != TaskStatus::Stopped || task.exit_status.is_none() {
                    task.exit_status = Some(m.exit_status);
                    task.exited_at = daemon_time(m.exited_at);
                }
                task.status = TaskStatus::Stopped;
                task.deleted = true;
                Some(Object::Task(namespace.to_owned(), m.container_id))
            }
            "/images/create" | "/images/update" => {
                let (name, labels) = if topic == "/images/create" {
                    let m: img::ImageCreate =
                        decode(any, "containerd.services.images.v1.ImageCreate")?;
                    (m.name, m.labels)
                } else {
                    let m: img::ImageUpdate =
                        decode(any, "containerd.services.images.v1.ImageUpdate")?;
                    (m.name, m.labels)
                };
                // The events do not carry the target: an update may be a new one, so
                // the digest is unknown until the next list.
                self.namespace(namespace).images.insert(
                    name.clone(),
                    ImageState {
                        target_digest: None,
                        labels: Some(labels.into_iter().collect()),
                        created_at: None,
                        updated_at: None,
                    },
                );
                Some(Object::Image(namespace.to_owned(), name))
            }
            "/images/delete" => {
                let m: img::ImageDelete = decode(any, "containerd.services.images.v1.ImageDelete")?;
                self.namespace(namespace).images.remove(&m.name);
                Some(Object::Image(namespace.to_owned(), m.name))
            }
            _ => None,
        }
    }

    /// A namespace that an event speaks of exists, whether or not its creation was
    /// recorded (`default` never is).
    fn namespace(&mut self, name: &str) -> &mut NamespaceState {
        self.namespaces.entry(name.to_owned()).or_default()
    }

    fn set_task(
        &mut self,
        namespace: &str,
        id: &str,
        pid: u32,
        status: TaskStatus,
    ) -> Option<Object> {
        let task = TaskState {
            pid,
            status,
            ..TaskState::default()
        };
        self.namespace(namespace).tasks.insert(id.to_owned(), task);
        Some(Object::Task(namespace.to_owned(), id.to_owned()))
    }
}
