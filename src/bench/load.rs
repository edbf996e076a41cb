//! Load for the forwarder benchmarks: a realistic mix of container lifecycle events,
//! published over the socket by several clients with several calls in flight each.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use prost::Message;
use prost_types::{Any, Timestamp};
use tokio::task::JoinSet;
use tonic::metadata::{Ascii, MetadataValue};

use super::BenchError;
use super::wire::{WireClient, publish_request};
use crate::event::{Event, EventId, Source, Workload};
use crate::proto::containerd::events::{
    ContainerCreate, ContainerDelete, TaskCreate, TaskDelete, TaskExit, TaskStart,
    container_create::Runtime,
};
use crate::proto::containerd::types::Envelope;

/// One event to publish: (namespace, topic, payload).
#[derive(Clone, Debug)]
pub struct Item {
    pub namespace: String,
    pub topic: &'static str,
    pub event: Any,
}

fn any<M: Message>(type_url: &str, message: &M) -> Any {
    Any {
        type_url: type_url.into(),
        value: message.encode_to_vec(),
    }
}

/// `count` events: containers going through create, start, exit, delete, six
/// events each, spread over three namespaces.
pub fn lifecycle(count: usize) -> Vec<Item> {
    let now = Some(Timestamp::from(SystemTime::now()));
    let mut items = Vec::with_capacity(count);
    let mut n = 0u32;
    while items.len() < count {
        let id = format!("bench-{n:08}");
        let namespace = ["default", "k8s.io", "moby"][n as usize % 3].to_string();
        let mut push = |topic: &'static str, event: Any| {
            if items.len() < count {
                items.push(Item {
                    namespace: namespace.clone(),
                    topic,
                    event,
                });
            }
        };
        push(
            "/containers/create",
            any(
                "containerd.events.ContainerCreate",
                &ContainerCreate {
                    id: id.clone(),
                    image: "docker.io/library/busybox:latest".into(),
                    runtime: Some(Runtime {
                        name: "io.containerd.runc.v2".into(),
                        options: None,
                    }),
                },
            ),
        );
        push(
            "/tasks/create",
            any(
                "containerd.events.TaskCreate",
                &TaskCreate {
                    container_id: id.clone(),
                    bundle: format!("/run/containerd/io.containerd.runtime.v2.task/default/{id}"),
                    pid: 1000 + n,
                    ..TaskCreate::default()
                },
            ),
        );
        push(
            "/tasks/start",
            any(
                "containerd.events.TaskStart",
                &TaskStart {
                    container_id: id.clone(),
                    pid: 1000 + n,
                },
            ),
        );
        push(
            "/tasks/exit",
            any(
                "containerd.events.TaskExit",
                &TaskExit {
                    container_id: id.clone(),
                    id: id.clone(),
                    pid: 1000 + n,
                    exit_status: n % 4,
                    exited_at: now,
                },
            ),
        );
        push(
            "/tasks/delete",
            any(
                "containerd.events.TaskDelete",
                &TaskDelete {
                    container_id: id.clone(),
                    pid: 1000 + n,
                    exit_status: n % 4,
                    exited_at: now,
                    id: String::new(),
                },
            ),
        );
        push(
            "/containers/delete",
            any(
                "containerd.events.ContainerDelete",
                &ContainerDelete { id: id.clone() },
            ),
        );
        n += 1;
    }
    items
}

/// The same items as accepted events (what a forwarder receives), for raw baselines.
pub(crate) fn as_events(items: &[Item]) -> Vec<Arc<Event>> {
    items
        .iter()
        .enumerate()
        .map(|(i, item)| Arc::new(accepted(i, item)))
        .collect()
}

fn accepted(i: usize, item: &Item) -> Event {
    let envelope = Envelope {
        timestamp: Some(Timestamp::from(SystemTime::now())),
        namespace: item.namespace.clone(),
        topic: item.topic.into(),
        event: Some(item.event.clone()),
    };
    Event::new(i as u64 + 1, EventId::generate(), Source::Publish, envelope)
}

/// [`as_events`], each with what a Kubernetes container's record says (as an
/// upstream's enrichment attaches it): its pod's name, namespace and uid, the
/// container's name and kind, its image and three labels. One pod per container of
/// the lifecycle, sandbox and container alternating.
pub(crate) fn as_pod_events(items: &[Item]) -> Vec<Arc<Event>> {
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let pod = i / 6;
            let workload = Workload {
                kind: Some(["sandbox", "container"][pod % 2].into()),
                pod_name: Some(format!("web-{pod}")),
                pod_namespace: Some(["shop", "kube-system", "default"][pod % 3].into()),
                pod_uid: Some(format!("0b1c2d3e-0000-4000-8000-{pod:012}")),
                container_name: (pod % 2 == 1).then(|| "nginx".to_owned()),
                image: "docker.io/library/nginx:1.27".into(),
                labels: [
                    ("app.kubernetes.io/name", "web"),
                    ("io.kubernetes.container.restartCount", "0"),
                    ("pod-template-hash", "7d4b9c8f5"),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
                reason: None,
            };
            Arc::new(accepted(i, item).with_workload(Some(Arc::new(workload))))
        })
        .collect()
}

/// Publishes every item over `address`: `publishers` connections, each with
/// `in_flight` calls outstanding. Requests are encoded before the clock starts.
/// Returns when every call has been answered.
pub async fn publish_all(
    address: &str,
    items: Arc<Vec<Item>>,
    publishers: usize,
    in_flight: usize,
) -> Result<Duration, BenchError> {
    let mut clients = Vec::new();
    for _ in 0..publishers.max(1) {
        clients.push(WireClient::connect(address, Duration::from_secs(5)).await?);
    }
    let mut requests = Vec::with_capacity(items.len());
    for item in items.iter() {
        let namespace: MetadataValue<Ascii> =
            item.namespace.parse().map_err(|_| BenchError::Timeout {
                what: format!("namespace {:?} is not a header value", item.namespace),
            })?;
        let request = publish_request(item.topic, &item.event.type_url, &item.event.value);
        requests.push((namespace, request));
    }
    let requests = Arc::new(requests);
    let lanes = clients.len() * in_flight.max(1);
    let start = Instant::now();
    let mut tasks = JoinSet::new();
    for lane in 0..lanes {
        let mut client = clients[lane % clients.len()].clone();
        let requests = Arc::clone(&requests);
        tasks.spawn(async move {
            // Lane k sends items k, k+lanes, ...: every item once, interleaved.
            for (namespace, request) in requests.iter().skip(lane).step_by(lanes) {
                client.publish(namespace, request.clone()).await?;
            }
            Ok::<_, BenchError>(())
        });
    }
    while let Some(result) = tasks.join_next().await {
        result.map_err(|e| BenchError::Timeout {
            what: format!("a publisher task failed: {e}"),
        })??;
    }
    Ok(start.elapsed())
}

/// Polls `done` every few milliseconds until it is true or `timeout` passes.
pub(crate) async fn wait_until(
    what: &str,
    timeout: Duration,
    mut done: impl FnMut() -> Result<bool, BenchError>,
) -> Result<(), BenchError> {
    let deadline = Instant::now() + timeout;
    while !done()? {
        if Instant::now() > deadline {
            return Err(BenchError::Timeout {
                what: format!("{what} within {timeout:?}"),
            });
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(())
}
