//! A realistic audit store for the query benchmark, written through the writer the
//! `sqlite` forwarder uses (`store::open_writer` + `store::insert_rows`), from real
//! events: standard containerd payloads encoded as protobuf, their JSON rendered
//! exactly as the forwarder renders it, UUIDv7 ids taken at the receive time.
//!
//! The mix, per event (weights in per mille): `/tasks/exit` 160, `/tasks/exec-added`
//! 130, `/tasks/exec-started` 130 (exec probes), `/snapshot/prepare` 70,
//! `/snapshot/remove` 70, `/tasks/create`, `/tasks/start`, `/tasks/delete`,
//! `/containers/create`, `/containers/delete` 60 each, `/containers/update` 40,
//! `/snapshot/commit` 30, `/images/create` 20, `/images/update` 20, `/tasks/oom` 5,
//! `/tasks/paused` and `/tasks/resumed` 2.5 each. Each event concerns one container of
//! a pool (64-hex ids, as containerd's clients make them); a container belongs to one
//! namespace: `k8s.io` 80%, `moby` 10%, `default` 6%, `buildkit` 2.5%, `ci` 1.5%.
//! Timestamps increase with random gaps (mean span/rows) over the span; an event is
//! received 50 µs to 2 ms after its timestamp. Task events come from shims
//! (`publish`), the rest from containerd (`forward`).
//!
//! The `k8s.io` containers carry what the CRI plugin's labels say (the workload
//! columns), three to a pod in pool order: the pod's sandbox, `app` and `sidecar`, in
//! one of a few Kubernetes namespaces. A pod thus has a life over the whole span: a
//! few hundred events per container at the default sizes, starts, exits (some 137,
//! some 1), OOMs, creates and deletes among them, what `query --pod` and the timeline
//! picture read.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use prost::Message;
use prost_types::{Any, Timestamp};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use uuid::timestamp::context::ContextV7;

use crate::event::{Event, EventId, Source, Workload};
use crate::proto::containerd::events::{
    ContainerCreate, ContainerDelete, ContainerUpdate, SnapshotCommit, SnapshotPrepare,
    SnapshotRemove, TaskCreate, TaskDelete, TaskExecAdded, TaskExecStarted, TaskExit, TaskIo,
    TaskOom, TaskPaused, TaskResumed, TaskStart, container_create::Runtime,
};
use crate::proto::containerd::runc::v1::Options as RuncOptions;
use crate::proto::containerd::services::images::v1::{ImageCreate, ImageUpdate};
use crate::proto::containerd::types::{Envelope, Mount};
use crate::query::pods::PodName;

/// Bumped whenever the events generated for the same parameters change, so a store
/// made by an older generator is not reused.
pub(crate) const GENERATOR_VERSION: u32 = 2;

/// 2024-05-01T00:00:00Z: stores are reproducible, so queries can name fixed times.
pub(crate) const START_SECS: i64 = 1_714_521_600;

/// Per-mille weights of the topics (see the module documentation).
const TOPICS: &[(&str, u32)] = &[
    ("/tasks/exit", 1600),
    ("/tasks/exec-added", 1300),
    ("/tasks/exec-started", 1300),
    ("/snapshot/prepare", 700),
    ("/snapshot/remove", 700),
    ("/tasks/create", 600),
    ("/tasks/start", 600),
    ("/tasks/delete", 600),
    ("/containers/create", 600),
    ("/containers/delete", 600),
    ("/containers/update", 400),
    ("/snapshot/commit", 300),
    ("/images/create", 200),
    ("/images/update", 200),
    ("/tasks/oom", 50),
    ("/tasks/paused", 25),
    ("/tasks/resumed", 25),
];

const NAMESPACES: &[(&str, u32)] = &[
    ("k8s.io", 800),
    ("moby", 100),
    ("default", 60),
    ("buildkit", 25),
    ("ci", 15),
];

/// The Kubernetes namespaces pods are spread over.
const POD_NAMESPACES: &[&str] = &["shop", "payments", "monitoring", "kube-system"];

const IMAGES: &[&str] = &[
    "registry.k8s.io/pause:3.9",
    "docker.io/library/nginx:1.25.4",
    "docker.io/library/redis:7.2",
    "docker.io/library/postgres:16.2",
    "quay.io/prometheus/node-exporter:v1.7.0",
    "registry.k8s.io/coredns/coredns:v1.11.1",
    "ghcr.io/example/api:2024.04.30-1",
    "docker.io/library/busybox:1.36",
];

/// What a generated store is made of; equal parameters make equal stores (up to the
/// random bits of the ids).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Params {
    pub rows: u64,
    /// Timestamps run from [`START_SECS`] over this many seconds.
    pub span_secs: i64,
    /// Containers in the pool.
    pub containers: u32,
    pub seed: u64,
}

impl Params {
    /// The `index`-th container id of the pool (what `event.container_id` queries name).
    pub(crate) fn container_id(&self, index: u32) -> String {
        let mut rng = StdRng::seed_from_u64(self.seed ^ 0xc0_47a1_4e45);
        let mut id = String::new();
        for _ in 0..=index.min(self.containers.saturating_sub(1)) {
            id = hex64(&mut rng);
        }
        id
    }
}

struct Container {
    id: String,
    namespace: &'static str,
    image: &'static str,
    pid: u32,
    /// The CRI plugin's labels, for a `k8s.io` container.
    workload: Option<Arc<Workload>>,
}

/// The workload of the `k8s.io` container that is the `index`-th of the pool's
/// `k8s.io` containers: three to a pod (sandbox, `app`, `sidecar`).
fn workload(index: usize, image: &str) -> Workload {
    let pod = index / 3;
    let (kind, container) = match index % 3 {
        0 => ("sandbox", None),
        1 => ("container", Some("app")),
        _ => ("container", Some("sidecar")),
    };
    Workload {
        kind: Some(kind.into()),
        pod_name: Some(format!("app-{pod}")),
        pod_namespace: Some(POD_NAMESPACES[pod % POD_NAMESPACES.len()].into()),
        pod_uid: Some(format!("{pod:08x}-0000-4000-8000-{pod:012x}")),
        container_name: container.map(str::to_owned),
        image: match kind {
            "sandbox" => IMAGES[0].into(),
            _ => image.into(),
        },
        ..Workload::default()
    }
}

/// Produces the store's events in order, in batches.
pub(crate) struct Generator {
    params: Params,
    rng: StdRng,
    containers: Vec<Container>,
    ids: ContextV7,
    next_seq: u64,
    /// The current timestamp, in nanoseconds since [`START_SECS`].
    at_nanos: u64,
    mean_gap_nanos: f64,
    topic_total: u32,
}

fn hex64(rng: &mut StdRng) -> String {
    (0..4)
        .map(|_| format!("{:016x}", rng.random::<u64>()))
        .collect()
}

fn pick<T: Copy>(rng: &mut StdRng, table: &[(T, u32)]) -> T {
    let total: u32 = table.iter().map(|(_, w)| w).sum();
    let mut roll = rng.random_range(0..total);
    for (item, weight) in table {
        if roll < *weight {
            return *item;
        }
        roll -= weight;
    }
    table[0].0
}

fn any<M: Message>(type_url: &str, message: &M) -> Any {
    Any {
        type_url: type_url.into(),
        value: message.encode_to_vec(),
    }
}

impl Generator {
    pub(crate) fn new(params: &Params) -> Self {
        let mut pool_rng = StdRng::seed_from_u64(params.seed ^ 0xc0_47a1_4e45);
        let mut rng = StdRng::seed_from_u64(params.seed);
        let mut pods = 0;
        let containers = (0..params.containers.max(1))
            .map(|_| {
                let namespace = pick(&mut rng, NAMESPACES);
                let image = IMAGES[rng.random_range(0..IMAGES.len())];
                let workload = (namespace == "k8s.io").then(|| {
                    pods += 1;
                    Arc::new(workload(pods - 1, image))
                });
                Container {
                    id: hex64(&mut pool_rng),
                    namespace,
                    image,
                    pid: rng.random_range(1000..4_000_000),
                    workload,
                }
            })
            .collect();
        Self {
            rng,
            containers,
            ids: ContextV7::new(),
            next_seq: 1,
            at_nanos: 0,
            mean_gap_nanos: params.span_secs as f64 * 1e9 / params.rows.max(1) as f64,
            topic_total: TOPICS.iter().map(|(_, w)| w).sum(),
            params: params.clone(),
        }
    }

    /// The pod the pod timeline measurements read: the first one.
    pub(crate) fn measured_pod(&self) -> Option<PodName> {
        let workload = self.containers.iter().find_map(|c| c.workload.as_deref())?;
        Some(PodName {
            namespace: workload.pod_namespace.clone()?,
            name: workload.pod_name.clone()?,
        })
    }

    /// Every pod of the pool, in pool order (the first is [`Self::measured_pod`]).
    pub(crate) fn pods(&self) -> Vec<PodName> {
        let mut pods: Vec<PodName> = Vec::new();
        for workload in self.containers.iter().filter_map(|c| c.workload.as_deref()) {
            let (Some(namespace), Some(name)) = (&workload.pod_namespace, &workload.pod_name)
            else {
                continue;
            };
            let pod = PodName {
                namespace: namespace.clone(),
                name: name.clone(),
            };
            // A pod's three containers are consecutive in the pool.
            if pods.last() != Some(&pod) {
                pods.push(pod);
            }
        }
        pods
    }

    /// Up to `count` more events (fewer at the end of the store).
    pub(crate) fn batch(&mut self, count: usize) -> Vec<Event> {
        let left = self.params.rows + 1 - self.next_seq;
        let count = count.min(usize::try_from(left).unwrap_or(usize::MAX));
        (0..count).map(|_| self.next()).collect()
    }

    fn next(&mut self) -> Event {
        let seq = self.next_seq;
        self.next_seq += 1;
        let gap = self.rng.random_range(0.0..2.0) * self.mean_gap_nanos;
        self.at_nanos += gap as u64;
        let timestamp = START_SECS as u128 * 1_000_000_000 + u128::from(self.at_nanos);
        let received = timestamp + self.rng.random_range(50_000..2_000_000);
        let time = |nanos: u128| Timestamp {
            seconds: (nanos / 1_000_000_000) as i64,
            nanos: (nanos % 1_000_000_000) as i32,
        };
        let received_secs = (received / 1_000_000_000) as u64;
        let received_sub = (received % 1_000_000_000) as u32;
        let id = uuid::Uuid::new_v7(uuid::Timestamp::from_unix(
            &self.ids,
            received_secs,
            received_sub,
        ));
        let mut roll = self.rng.random_range(0..self.topic_total);
        let mut topic = TOPICS[0].0;
        for (name, weight) in TOPICS {
            if roll < *weight {
                topic = name;
                break;
            }
            roll -= weight;
        }
        let c = self.rng.random_range(0..self.containers.len());
        let payload = self.payload(topic, c, time(timestamp));
        let container = &self.containers[c];
        let source = match topic.starts_with("/tasks/") {
            true => Source::Publish,
            false => Source::Forward,
        };
        let envelope = Envelope {
            timestamp: Some(time(timestamp)),
            namespace: container.namespace.into(),
            topic: topic.into(),
            event: Some(payload),
        };
        let received_at = SystemTime::UNIX_EPOCH + Duration::new(received_secs, received_sub);
        Event::with_received_at(
            seq,
            EventId::from_bytes(id.into_bytes()),
            received_at,
            source,
            envelope,
        )
        .with_workload(container.workload.clone())
    }

    fn payload(&mut self, topic: &str, c: usize, now: Timestamp) -> Any {
        let rng = &mut self.rng;
        let container = &self.containers[c];
        let id = container.id.clone();
        let ns = container.namespace;
        let pid = container.pid;
        let exec_id = |rng: &mut StdRng| format!("{:08x}", rng.random::<u32>());
        let snapshot_key =
            |rng: &mut StdRng| format!("{ns}/{}/{}", rng.random_range(1..90_000), id);
        match topic {
            "/tasks/exit" => {
                // Half are exec probes ending, half init processes.
                let exec = rng.random_bool(0.5);
                let exit_status = match rng.random_range(0..10) {
                    0 => 137,
                    1 => 1,
                    _ => 0,
                };
                any(
                    "containerd.events.TaskExit",
                    &TaskExit {
                        id: match exec {
                            true => format!("{:064x}", rng.random::<u128>()),
                            false => id.clone(),
                        },
                        container_id: id,
                        pid: pid + u32::from(exec) * rng.random_range(1..500),
                        exit_status,
                        exited_at: Some(now),
                    },
                )
            }
            "/tasks/exec-added" => any(
                "containerd.events.TaskExecAdded",
                &TaskExecAdded {
                    container_id: id,
                    exec_id: exec_id(rng),
                },
            ),
            "/tasks/exec-started" => any(
                "containerd.events.TaskExecStarted",
                &TaskExecStarted {
                    container_id: id,
                    exec_id: exec_id(rng),
                    pid: pid + rng.random_range(1..500),
                },
            ),
            "/snapshot/prepare" => any(
                "containerd.events.SnapshotPrepare",
                &SnapshotPrepare {
                    key: snapshot_key(rng),
                    parent: format!("sha256:{:032x}{:032x}", rng.random::<u128>(), c),
                    snapshotter: "overlayfs".into(),
                },
            ),
            "/snapshot/commit" => any(
                "containerd.events.SnapshotCommit",
                &SnapshotCommit {
                    key: snapshot_key(rng),
                    name: format!("sha256:{:032x}{:032x}", rng.random::<u128>(), c),
                    snapshotter: "overlayfs".into(),
                },
            ),
            "/snapshot/remove" => any(
                "containerd.events.SnapshotRemove",
                &SnapshotRemove {
                    key: snapshot_key(rng),
                    snapshotter: "overlayfs".into(),
                },
            ),
            "/tasks/create" => any(
                "containerd.events.TaskCreate",
                &TaskCreate {
                    bundle: format!("/run/containerd/io.containerd.runtime.v2.task/{ns}/{id}"),
                    rootfs: vec![Mount {
                        r#type: "overlay".into(),
                        source: "overlay".into(),
                        target: String::new(),
                        options: vec![
                            "index=off".into(),
                            format!(
                                "workdir=/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs/snapshots/{}/work",
                                c
                            ),
                        ],
                    }],
                    io: Some(TaskIo {
                        stdin: String::new(),
                        stdout: format!("/run/containerd/fifo/{c}/{id}-stdout"),
                        stderr: format!("/run/containerd/fifo/{c}/{id}-stderr"),
                        terminal: false,
                    }),
                    checkpoint: String::new(),
                    pid,
                    container_id: id,
                },
            ),
            "/tasks/start" => any(
                "containerd.events.TaskStart",
                &TaskStart {
                    container_id: id,
                    pid,
                },
            ),
            "/tasks/delete" => any(
                "containerd.events.TaskDelete",
                &TaskDelete {
                    container_id: id,
                    pid,
                    exit_status: 0,
                    exited_at: Some(now),
                    id: String::new(),
                },
            ),
            "/containers/create" => any(
                "containerd.events.ContainerCreate",
                &ContainerCreate {
                    id,
                    image: container.image.into(),
                    runtime: Some(Runtime {
                        name: "io.containerd.runc.v2".into(),
                        options: Some(any(
                            "containerd.runc.v1.Options",
                            &RuncOptions {
                                systemd_cgroup: true,
                                ..RuncOptions::default()
                            },
                        )),
                    }),
                },
            ),
            "/containers/update" => any(
                "containerd.events.ContainerUpdate",
                &ContainerUpdate {
                    image: container.image.into(),
                    labels: [
                        ("io.kubernetes.pod.name", format!("app-{}", c % 997)),
                        ("io.kubernetes.pod.namespace", "default".to_owned()),
                        ("io.kubernetes.container.name", "app".to_owned()),
                    ]
                    .into_iter()
                    .map(|(k, v)| (k.to_owned(), v))
                    .collect(),
                    snapshot_key: id.clone(),
                    id,
                },
            ),
            "/containers/delete" => {
                any("containerd.events.ContainerDelete", &ContainerDelete { id })
            }
            "/images/create" | "/images/update" => {
                let name = container.image.to_owned();
                let labels = [("io.cri-containerd.image".to_owned(), "managed".to_owned())]
                    .into_iter()
                    .collect();
                match topic {
                    "/images/create" => any(
                        "containerd.services.images.v1.ImageCreate",
                        &ImageCreate { name, labels },
                    ),
                    _ => any(
                        "containerd.services.images.v1.ImageUpdate",
                        &ImageUpdate { name, labels },
                    ),
                }
            }
            "/tasks/oom" => any("containerd.events.TaskOOM", &TaskOom { container_id: id }),
            "/tasks/paused" => any(
                "containerd.events.TaskPaused",
                &TaskPaused { container_id: id },
            ),
            _ => any(
                "containerd.events.TaskResumed",
                &TaskResumed { container_id: id },
            ),
        }
    }
}
