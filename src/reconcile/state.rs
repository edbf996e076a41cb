//! What a containerd daemon holds, as eventgate knows it: namespaces, containers,
//! tasks and images. The same shape serves two sides of a reconcile: the snapshot
//! advanced from recorded events, and the daemon's own lists.
//!
//! Fields an event does not carry (a container's labels at `/containers/create`, an
//! image's target digest) are `None` in a snapshot until a list fills them in, so an
//! unknown value is never mistaken for a change.

use std::collections::BTreeMap;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::event::Witness;

pub(crate) type Labels = BTreeMap<String, String>;

/// One daemon's state, by namespace name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeState {
    pub namespaces: BTreeMap<String, NamespaceState>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamespaceState {
    pub labels: Option<Labels>,
    /// By container id.
    pub containers: BTreeMap<String, ContainerState>,
    /// By container id: a task's init process (execs are not tracked).
    pub tasks: BTreeMap<String, TaskState>,
    /// By image name (`docker.io/library/busybox:latest`).
    pub images: BTreeMap<String, ImageState>,
    /// The daemon's side only, for one reconcile: by container id, the runs a
    /// manager shows the record missed before the container's last (see
    /// `reconcile::runs`). Never part of a snapshot.
    #[serde(skip)]
    pub(crate) gap_runs: BTreeMap<String, super::run::GapRuns>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerState {
    pub image: String,
    /// The runtime's name (`io.containerd.runc.v2`).
    pub runtime: String,
    pub labels: Option<Labels>,
    /// The daemon's record of when it was created, where a list said.
    pub created_at: Option<SystemTime>,
    pub updated_at: Option<SystemTime>,
    /// What the record said when its events were captured, for a container no list
    /// has seen yet (`labels` is `None`): a reconcile that finds it deleted tells so
    /// with its pod and image. Not compared by a reconcile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<crate::event::Workload>,
    /// containerd no longer has it, but the manager above it still does: dockerd
    /// deletes its containerd container when the task exits and keeps its own record
    /// (`docker ps -a`) until `docker rm`. Kept so that the exit it shows is known
    /// to be recorded already.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub gone: bool,
    /// Whose record it was taken from when containerd's lists do not have it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<Witness>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskState {
    pub pid: u32,
    pub status: TaskStatus,
    /// Set once the init process exited.
    pub exit_status: Option<u32>,
    pub exited_at: Option<SystemTime>,
    /// The task was deleted after it exited, and its exit is still known: from the
    /// record (a `/tasks/delete` was recorded) or from the manager above containerd
    /// (the CRI deletes a task as soon as it exits, keeping the container's exit
    /// code, times and reason until the kubelet removes the container).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deleted: bool,
    /// When it started, where a manager said (containerd keeps no start time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<SystemTime>,
    /// The manager's reason for the exit (`OOMKilled`, `Error`, `Completed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Whose record it was taken from when containerd's lists do not have it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<Witness>,
}

/// containerd's `containerd.v1.types.Status`, by the same numbers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum TaskStatus {
    #[default]
    Unknown = 0,
    Created = 1,
    Running = 2,
    Stopped = 3,
    Paused = 4,
    Pausing = 5,
}

impl TaskStatus {
    pub fn from_wire(status: i32) -> Self {
        match status {
            1 => TaskStatus::Created,
            2 => TaskStatus::Running,
            3 => TaskStatus::Stopped,
            4 => TaskStatus::Paused,
            5 => TaskStatus::Pausing,
            _ => TaskStatus::Unknown,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageState {
    /// `sha256:...` of the image's target descriptor.
    pub target_digest: Option<String>,
    pub labels: Option<Labels>,
    pub created_at: Option<SystemTime>,
    pub updated_at: Option<SystemTime>,
}
