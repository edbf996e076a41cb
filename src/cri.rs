//! The Kubernetes CRI (`runtime.v1.RuntimeService`) as a reconcile's second source
//! of truth: which pod sandboxes and containers it keeps, and, for a container whose
//! exit the record lacks, its exit code, times and reason.
//!
//! containerd's CRI plugin serves the CRI on containerd's own socket. It deletes a
//! container's task the moment it exits, so containerd's Tasks List has nothing to
//! compare; the CRI keeps the exit until the kubelet removes the container. The
//! list calls are cheap and made at every reconcile; `ContainerStatus` only for
//! exited containers the record does not know exited (the kubelet's relist does the
//! same), so an unchanged node costs two calls whatever its size.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use thiserror::Error;
use tonic::transport::Channel;
use tonic::{Code, Request, Status};

use crate::proto::runtime::v1 as cri;
use crate::proto::runtime::v1::runtime_service_client::RuntimeServiceClient;
use crate::reconcile::managed::{ManagedContainer, ManagedExit, ManagedStatus};

/// The largest answer read: containerd's own send limit. A node's list of 5,000
/// containers with the kubelet's labels and annotations is about 5 MiB.
const MAX_MESSAGE: usize = 16 * 1024 * 1024;

/// Status calls in flight at once: enough to cover a gap in which a node's pods all
/// restarted, without a burst of hundreds of calls at the daemon.
const STATUS_CONCURRENCY: usize = 8;

#[derive(Debug, Error)]
pub(crate) enum CriError {
    /// The socket answers, but not the CRI (a containerd with its CRI plugin
    /// disabled, or another eventgate).
    #[error("the socket does not serve the CRI (runtime.v1.RuntimeService)")]
    Absent,
    #[error("the CRI's {call} failed")]
    Call {
        call: &'static str,
        #[source]
        source: Status,
    },
}

fn call_error(call: &'static str) -> impl FnOnce(Status) -> CriError {
    move |source| match source.code() {
        Code::Unimplemented => CriError::Absent,
        _ => CriError::Call { call, source },
    }
}

/// What a reconcile read from the CRI.
#[derive(Debug, Default)]
pub(crate) struct CriListing {
    pub(crate) sandboxes: usize,
    /// By container id.
    pub(crate) containers: BTreeMap<String, ManagedContainer>,
    /// `ContainerStatus` calls made (only for exits the record lacks).
    pub(crate) status_calls: usize,
}

pub(crate) struct CriClient {
    client: RuntimeServiceClient<Channel>,
    timeout: Duration,
}

impl CriClient {
    /// Each call must answer within `timeout`.
    pub(crate) fn new(channel: Channel, timeout: Duration) -> Self {
        CriClient {
            client: RuntimeServiceClient::new(channel).max_decoding_message_size(MAX_MESSAGE),
            timeout,
        }
    }

    fn request<T>(&self, message: T) -> Request<T> {
        let mut request = Request::new(message);
        request.set_timeout(self.timeout);
        request
    }

    /// Every pod sandbox and container the CRI keeps. `needs_status` picks the
    /// containers whose exit to read (see `reconcile::managed::needs_status`).
    pub(crate) async fn list(
        &self,
        needs_status: impl Fn(&str, ManagedStatus) -> bool,
    ) -> Result<CriListing, CriError> {
        let mut client = self.client.clone();
        let sandboxes = bounded(
            self.timeout,
            client.list_pod_sandbox(self.request(cri::ListPodSandboxRequest::default())),
        )
        .await
        .map_err(call_error("ListPodSandbox"))?
        .into_inner()
        .items;
        let containers = bounded(
            self.timeout,
            client.list_containers(self.request(cri::ListContainersRequest::default())),
        )
        .await
        .map_err(call_error("ListContainers"))?
        .into_inner()
        .containers;
        let mut listing = CriListing {
            sandboxes: sandboxes.len(),
            ..CriListing::default()
        };
        let mut wanted = Vec::new();
        for container in containers {
            let managed = managed_of(&container);
            if needs_status(&container.id, managed.status) {
                wanted.push(container.id.clone());
            }
            listing.containers.insert(container.id, managed);
        }
        listing.status_calls = wanted.len();
        let mut exits = futures::stream::iter(wanted)
            .map(|id| async move {
                let exit = self.exit(&id).await;
                (id, exit)
            })
            .buffer_unordered(STATUS_CONCURRENCY);
        while let Some((id, exit)) = exits.next().await {
            match exit {
                Ok(exit) => {
                    if let Some(container) = listing.containers.get_mut(&id) {
                        container.exit = exit;
                    }
                }
                // Removed between the list and the call: the next list says so.
                Err(CriError::Call { source, .. }) if source.code() == Code::NotFound => {}
                Err(error) => return Err(error),
            }
        }
        Ok(listing)
    }

    /// One container's last run, if it exited.
    async fn exit(&self, id: &str) -> Result<Option<ManagedExit>, CriError> {
        let mut client = self.client.clone();
        let response = bounded(
            self.timeout,
            client.container_status(self.request(cri::ContainerStatusRequest {
                container_id: id.to_owned(),
                verbose: false,
            })),
        )
        .await
        .map_err(call_error("ContainerStatus"))?
        .into_inner();
        Ok(exit_of(response))
    }
}

/// A listed container as the record takes it; its exit comes from [`exit_of`].
pub(crate) fn managed_of(container: &cri::Container) -> ManagedContainer {
    ManagedContainer {
        status: status_of(container.state),
        created_at: nanos(container.created_at),
        exit: None,
        workload: None,
        image: String::new(),
        started_at: None,
        restart_count: None,
    }
}

/// The last run a ContainerStatus answer tells of, if the container exited.
pub(crate) fn exit_of(response: cri::ContainerStatusResponse) -> Option<ManagedExit> {
    let status = response.status?;
    if status_of(status.state) != ManagedStatus::Exited {
        return None;
    }
    Some(ManagedExit {
        started_at: nanos(status.started_at),
        finished_at: nanos(status.finished_at),
        exit_code: status.exit_code,
        reason: (!status.reason.is_empty()).then(|| clip(status.reason)),
    })
}

fn status_of(state: i32) -> ManagedStatus {
    match cri::ContainerState::try_from(state) {
        Ok(cri::ContainerState::ContainerCreated) => ManagedStatus::Created,
        Ok(cri::ContainerState::ContainerRunning) => ManagedStatus::Running,
        Ok(cri::ContainerState::ContainerExited) => ManagedStatus::Exited,
        _ => ManagedStatus::Unknown,
    }
}

/// A CRI time (nanoseconds since the epoch; 0 until it happened).
fn nanos(value: i64) -> Option<SystemTime> {
    (value > 0).then(|| UNIX_EPOCH + Duration::from_nanos(value as u64))
}

/// A reason is a short word (`OOMKilled`); anything longer is cut, as the record's
/// other texts are.
fn clip(mut text: String) -> String {
    const MAX: usize = 256;
    if text.len() > MAX {
        let mut end = MAX;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

/// `call` within `timeout`, for a daemon that does not answer at all.
async fn bounded<T>(
    timeout: Duration,
    call: impl Future<Output = Result<T, Status>>,
) -> Result<T, Status> {
    match tokio::time::timeout(timeout, call).await {
        Ok(answer) => answer,
        Err(_) => Err(Status::deadline_exceeded(format!(
            "no answer within {timeout:?}"
        ))),
    }
}

#[cfg(test)]
#[path = "cri_tests.rs"]
mod tests;
