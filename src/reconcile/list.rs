//! The daemon's side of a reconcile: what a containerd holds right now, read through
//! its own Namespaces, Containers, Tasks and Images List calls.
//!
//! containerd scopes every call but the namespace list by the `containerd-namespace`
//! request header, so each namespace costs three calls; they run side by side on the
//! one channel. Containers, the list that grows with a node (each carries its whole
//! OCI spec: 3.1 KiB on the wire for a `ctr container create`, more for most
//! orchestrators'), are streamed one per message where the daemon can.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::{Duration, Instant, SystemTime};

use thiserror::Error;
use tonic::metadata::MetadataValue;
use tonic::metadata::errors::InvalidMetadataValue;
use tonic::transport::Channel;
use tonic::{Code, Request, Status};

use super::state::{
    ContainerState, ImageState, Labels, NamespaceState, NodeState, TaskState, TaskStatus,
};
use crate::proto::containerd::services::containers::v1::containers_client::ContainersClient;
use crate::proto::containerd::services::containers::v1::{Container, ListContainersRequest};
use crate::proto::containerd::services::images::v1::images_client::ImagesClient;
use crate::proto::containerd::services::images::v1::{Image, ListImagesRequest};
use crate::proto::containerd::services::namespaces::v1::ListNamespacesRequest;
use crate::proto::containerd::services::namespaces::v1::namespaces_client::NamespacesClient;
use crate::proto::containerd::services::tasks::v1::ListTasksRequest;
use crate::proto::containerd::services::tasks::v1::tasks_client::TasksClient;
use crate::proto::containerd::v1::types::Process;

/// The largest message a list answer may be. containerd sends at most 16 MiB
/// (`defaults.DefaultMaxSendMsgSize`), four times tonic's 4 MiB default: a plain
/// Containers/List of 2,000 `ctr`-made containers is 6.2 MB (measured), and a
/// daemon without ListStream answers only that way; a large Tasks or Images list
/// may pass 4 MiB too. Anything the daemon can send is taken; past 16 MiB the
/// daemon itself refuses, which is why containers are streamed where possible.
pub(crate) const MAX_LIST_MESSAGE: usize = 16 * 1024 * 1024;

/// The request header containerd takes a call's namespace from.
pub(crate) const NAMESPACE_HEADER: &str = "containerd-namespace";

/// Go's zero `time.Time` (0001-01-01T00:00:00Z) as a protobuf timestamp: what
/// containerd sends for a time it does not have, e.g. a running task's `exited_at`.
const GO_ZERO_SECONDS: i64 = -62_135_596_800;

#[derive(Debug, Error)]
pub enum ListError {
    #[error("containerd's Namespaces/List failed")]
    Namespaces {
        #[source]
        source: Status,
    },
    #[error("containerd's Containers/{call} failed in namespace {namespace:?}")]
    Containers {
        namespace: String,
        /// `ListStream`, or `List` where the daemon has no stream.
        call: &'static str,
        #[source]
        source: Status,
    },
    #[error("containerd's Tasks/List failed in namespace {namespace:?}")]
    Tasks {
        namespace: String,
        #[source]
        source: Status,
    },
    #[error("containerd's Images/List failed in namespace {namespace:?}")]
    Images {
        namespace: String,
        #[source]
        source: Status,
    },
    #[error(
        "the daemon listed namespace {namespace:?}, which cannot be sent as a {NAMESPACE_HEADER} header"
    )]
    BadNamespace {
        namespace: String,
        #[source]
        source: InvalidMetadataValue,
    },
}

#[derive(Clone)]
struct Clients {
    namespaces: NamespacesClient<Channel>,
    containers: ContainersClient<Channel>,
    tasks: TasksClient<Channel>,
    images: ImagesClient<Channel>,
}

impl Clients {
    fn new(channel: Channel) -> Self {
        Clients {
            namespaces: NamespacesClient::new(channel.clone())
                .max_decoding_message_size(MAX_LIST_MESSAGE),
            containers: ContainersClient::new(channel.clone())
                .max_decoding_message_size(MAX_LIST_MESSAGE),
            tasks: TasksClient::new(channel.clone()).max_decoding_message_size(MAX_LIST_MESSAGE),
            images: ImagesClient::new(channel).max_decoding_message_size(MAX_LIST_MESSAGE),
        }
    }
}

/// One namespace's calls share its header and the per-call time limit.
struct Scope<'a> {
    namespace: &'a str,
    header: MetadataValue<tonic::metadata::Ascii>,
    timeout: Duration,
}

impl Scope<'_> {
    fn request<T>(&self, message: T) -> Request<T> {
        let mut request = Request::new(message);
        request
            .metadata_mut()
            .insert(NAMESPACE_HEADER, self.header.clone());
        request.set_timeout(self.timeout);
        request
    }
}

/// Every namespace of the daemon behind `channel`, with its containers, tasks (init
/// processes, by container id) and images. Each call must answer within `timeout`
/// (sent to the daemon as the call's deadline, and enforced here for a daemon that
/// does not answer at all); a call that fails fails the whole list, since a partial
/// list would read as containers that vanished.
pub async fn list_node(channel: Channel, timeout: Duration) -> Result<NodeState, ListError> {
    let started = Instant::now();
    let clients = Clients::new(channel);
    let mut request = Request::new(ListNamespacesRequest::default());
    request.set_timeout(timeout);
    let mut namespaces_client = clients.namespaces.clone();
    let namespaces = within(timeout, async move {
        Ok(namespaces_client
            .list(request)
            .await?
            .into_inner()
            .namespaces)
    })
    .await
    .map_err(|source| ListError::Namespaces { source })?;

    let mut node = NodeState::default();
    for namespace in namespaces {
        let header = MetadataValue::try_from(namespace.name.as_str()).map_err(|source| {
            ListError::BadNamespace {
                namespace: namespace.name.clone(),
                source,
            }
        })?;
        let scope = Scope {
            namespace: &namespace.name,
            header,
            timeout,
        };
        let (containers, tasks, images) = tokio::try_join!(
            list_containers(&clients, &scope),
            list_tasks(&clients, &scope),
            list_images(&clients, &scope),
        )?;
        let state = NamespaceState {
            labels: Some(labels(namespace.labels)),
            containers,
            tasks,
            images,
            gap_runs: Default::default(),
        };
        node.namespaces.insert(namespace.name, state);
    }
    tracing::debug!(
        namespaces = node.namespaces.len(),
        containers = node
            .namespaces
            .values()
            .map(|n| n.containers.len())
            .sum::<usize>(),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "listed the daemon's state"
    );
    Ok(node)
}

/// `call` bounded by `timeout`, as a deadline-exceeded status when it runs over.
async fn within<T>(
    timeout: Duration,
    call: impl Future<Output = Result<T, Status>>,
) -> Result<T, Status> {
    let started = Instant::now();
    let overdue = || Status::deadline_exceeded(format!("no complete answer within {timeout:?}"));
    match tokio::time::timeout(timeout, call).await {
        Ok(Ok(value)) => Ok(value),
        // tonic enforces the request's own deadline too, and reports it as CANCELLED
        // ("Timeout expired"); it is the same deadline, so it reads as containerd's
        // clients would report it.
        Ok(Err(status)) if status.code() == Code::Cancelled && started.elapsed() >= timeout => {
            Err(overdue())
        }
        Ok(Err(status)) => Err(status),
        Err(_) => Err(overdue()),
    }
}

async fn list_containers(
    clients: &Clients,
    scope: &Scope<'_>,
) -> Result<BTreeMap<String, ContainerState>, ListError> {
    let mut client = clients.containers.clone();
    let mut call = "ListStream";
    let listed = within(scope.timeout, async {
        let mut out = BTreeMap::new();
        match client
            .list_stream(scope.request(ListContainersRequest::default()))
            .await
        {
            Ok(response) => {
                let mut stream = response.into_inner();
                while let Some(message) = stream.message().await? {
                    if let Some(container) = message.container {
                        let (id, state) = container_state(container);
                        out.insert(id, state);
                    }
                }
            }
            // Daemons from before the stream answer only the buffered List.
            Err(status) if status.code() == Code::Unimplemented => {
                call = "List";
                tracing::debug!(
                    namespace = scope.namespace,
                    "containerd has no Containers/ListStream; using List"
                );
                let response = client
                    .list(scope.request(ListContainersRequest::default()))
                    .await?;
                for container in response.into_inner().containers {
                    let (id, state) = container_state(container);
                    out.insert(id, state);
                }
            }
            Err(status) => return Err(status),
        }
        Ok(out)
    })
    .await;
    listed.map_err(|source| ListError::Containers {
        namespace: scope.namespace.to_owned(),
        call,
        source,
    })
}

async fn list_tasks(
    clients: &Clients,
    scope: &Scope<'_>,
) -> Result<BTreeMap<String, TaskState>, ListError> {
    let mut client = clients.tasks.clone();
    let listed = within(scope.timeout, async {
        Ok(client
            .list(scope.request(ListTasksRequest::default()))
            .await?
            .into_inner()
            .tasks)
    })
    .await
    .map_err(|source| ListError::Tasks {
        namespace: scope.namespace.to_owned(),
        source,
    })?;
    Ok(listed.into_iter().filter_map(task_state).collect())
}

async fn list_images(
    clients: &Clients,
    scope: &Scope<'_>,
) -> Result<BTreeMap<String, ImageState>, ListError> {
    let mut client = clients.images.clone();
    let listed = within(scope.timeout, async {
        Ok(client
            .list(scope.request(ListImagesRequest::default()))
            .await?
            .into_inner()
            .images)
    })
    .await
    .map_err(|source| ListError::Images {
        namespace: scope.namespace.to_owned(),
        source,
    })?;
    Ok(listed.into_iter().map(image_state).collect())
}

fn labels(map: impl IntoIterator<Item = (String, String)>) -> Labels {
    map.into_iter().collect()
}

/// A daemon timestamp, or `None` for the absent, the zero (Unix 0, as an unset
/// proto3 field decodes) and Go's zero `time.Time`, all of which containerd sends
/// for "no such time", and for one `SystemTime` cannot hold.
pub(crate) fn daemon_time(timestamp: Option<prost_types::Timestamp>) -> Option<SystemTime> {
    let timestamp = timestamp?;
    if timestamp.nanos == 0 && (timestamp.seconds == 0 || timestamp.seconds == GO_ZERO_SECONDS) {
        return None;
    }
    SystemTime::try_from(timestamp).ok()
}

fn container_state(container: Container) -> (String, ContainerState) {
    let state = ContainerState {
        image: container.image,
        runtime: container.runtime.map(|r| r.name).unwrap_or_default(),
        labels: Some(labels(container.labels)),
        created_at: daemon_time(container.created_at),
        updated_at: daemon_time(container.updated_at),
        ..ContainerState::default()
    };
    (container.id, state)
}

/// The task's init process, by container id; `None` for anything else. containerd
/// lists one init process per task with `id` set to the container id; an exec
/// process (its own `id`, the task's `container_id`) is not a task.
fn task_state(process: Process) -> Option<(String, TaskState)> {
    let container = if process.container_id.is_empty() {
        process.id
    } else if process.id.is_empty() || process.id == process.container_id {
        process.container_id
    } else {
        return None;
    };
    if container.is_empty() {
        return None;
    }
    let status = TaskStatus::from_wire(process.status);
    // A running task's exit status reads 0; only a stopped one has exited.
    let exited = status == TaskStatus::Stopped;
    let state = TaskState {
        pid: process.pid,
        status,
        exit_status: exited.then_some(process.exit_status),
        exited_at: if exited {
            daemon_time(process.exited_at)
        } else {
            None
        },
        ..TaskState::default()
    };
    Some((container, state))
}

fn image_state(image: Image) -> (String, ImageState) {
    let state = ImageState {
        target_digest: Some(image.target.map(|t| t.digest).unwrap_or_default()),
        labels: Some(labels(image.labels)),
        created_at: daemon_time(image.created_at),
        updated_at: daemon_time(image.updated_at),
    };
    (image.name, state)
}

#[cfg(test)]
#[path = "list_tests.rs"]
mod tests;
