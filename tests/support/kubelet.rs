//! A kubelet-like CRI client: drives containerd's CRI plugin (`Containerd::start_cri`)
//! through the Kubernetes runtime v1 API the way the kubelet does for a hostNetwork
//! pod (the same labels, annotations, metadata, log paths and namespace modes), so
//! tests get the containerd events of a real node without a cluster. Blocking: it
//! owns its tokio runtime, and every call is bounded by [`DEADLINE`].

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use eventgate::proto::runtime::v1::image_service_client::ImageServiceClient;
use eventgate::proto::runtime::v1::runtime_service_client::RuntimeServiceClient;
use eventgate::proto::runtime::v1::{
    Container, ContainerConfig, ContainerMetadata, ContainerState, ContainerStatus,
    ContainerStatusRequest, CreateContainerRequest, ImageSpec, ImageStatusRequest,
    LinuxContainerConfig, LinuxContainerResources, LinuxContainerSecurityContext,
    LinuxPodSandboxConfig, LinuxSandboxSecurityContext, ListContainersRequest,
    ListPodSandboxRequest, NamespaceMode, NamespaceOption, PodSandbox, PodSandboxConfig,
    PodSandboxMetadata, PodSandboxStatus, PodSandboxStatusRequest, RemoveContainerRequest,
    RemovePodSandboxRequest, RunPodSandboxRequest, StartContainerRequest, StopContainerRequest,
    StopPodSandboxRequest, VersionRequest, VersionResponse,
};
use tonic::transport::Channel;

use super::containerd::{Containerd, IMAGE};
use super::{DEADLINE, path_str};

/// The kubelet's CRI API version string.
const API_VERSION: &str = "v1";

/// How often [`Kubelet::wait_exited`] and the start-up waits ask again.
const POLL: Duration = Duration::from_millis(20);

/// A pod as the kubelet ran it: the sandbox id and the config it gave, which every
/// CreateContainer of the pod repeats.
#[derive(Clone, Debug)]
pub struct Pod {
    pub id: String,
    pub config: PodSandboxConfig,
}

impl Pod {
    /// The pod's log directory (`<logs>/NAMESPACE_NAME_UID`).
    pub fn log_directory(&self) -> &Path {
        Path::new(&self.config.log_directory)
    }
}

/// One container attempt of a pod, as [`Kubelet::create`] makes it.
#[derive(Clone, Debug)]
pub struct ContainerSpec<'a> {
    /// The container's name in the pod spec.
    pub name: &'a str,
    /// The restart count: 0, then 1, 2, ... for each new container of that name.
    pub attempt: u32,
    /// Run as `/bin/busybox sh -c SCRIPT`.
    pub script: &'a str,
    /// `resources.limits.memory`, in bytes.
    pub memory_limit: Option<i64>,
}

pub struct Kubelet {
    client: RuntimeServiceClient<Channel>,
    images: ImageServiceClient<Channel>,
    /// Where the pods' log directories go (`/var/log/pods` on a node).
    logs: tempfile::TempDir,
    /// Sandboxes run by this kubelet, stopped and removed on drop if still there.
    pods: Vec<String>,
    // Last: the clients' connection tasks run on it.
    rt: tokio::runtime::Runtime,
}

impl Kubelet {
    /// Connects to `containerd`'s socket and waits until its CRI plugin serves (it
    /// refuses every call while it initialises, after the socket accepts).
    pub fn connect(containerd: &Containerd) -> Kubelet {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let address = containerd.address();
        let channel = rt
            .block_on(eventgate::client::connect_channel(&address, DEADLINE))
            .unwrap_or_else(|e| {
                panic!(
                    "connect to containerd at {address}: {}",
                    eventgate::errors::chain(&e)
                )
            });
        let mut kubelet = Kubelet {
            client: RuntimeServiceClient::new(channel.clone()),
            images: ImageServiceClient::new(channel),
            logs: tempfile::Builder::new()
                .prefix("eg-pods")
                .tempdir()
                .expect("tempdir"),
            pods: Vec::new(),
            rt,
        };
        kubelet.poll("the CRI plugin to serve", |k| k.try_version().ok());
        kubelet
    }

    /// Version, as the kubelet asks at start.
    pub fn version(&mut self) -> VersionResponse {
        self.try_version()
            .unwrap_or_else(|s| panic!("CRI Version: {s}"))
    }

    fn try_version(&mut self) -> Result<VersionResponse, tonic::Status> {
        let request = VersionRequest {
            version: API_VERSION.into(),
        };
        let client = &mut self.client;
        self.rt
            .block_on(with_deadline(client.version(request)))
            .map(tonic::Response::into_inner)
    }

    /// Waits until the CRI plugin knows `image` by name. It learns of images imported
    /// with `ctr -n k8s.io image import` from containerd's image events, after the
    /// import returned; a RunPodSandbox before that would try to pull the sandbox
    /// image from a registry.
    pub fn wait_image(&mut self, image: &str) {
        self.poll(&format!("the CRI plugin to know image {image}"), |k| {
            let request = ImageStatusRequest {
                image: Some(image_spec(image)),
                verbose: false,
            };
            let images = &mut k.images;
            k.rt.block_on(with_deadline(images.image_status(request)))
                .ok()?
                .into_inner()
                .image
                .map(drop)
        });
    }

    /// The PodSandboxConfig the kubelet builds for a hostNetwork pod: the metadata,
    /// no hostname, a log directory `NAMESPACE_NAME_UID` (created, as the
    /// kubelet does), the `io.kubernetes.pod.*` labels, the config source and
    /// first-seen annotations, and network NODE, PID CONTAINER, IPC POD.
    pub fn pod_config(
        &self,
        name: &str,
        namespace: &str,
        uid: &str,
        attempt: u32,
    ) -> PodSandboxConfig {
        let log_directory = self.logs.path().join(format!("{namespace}_{name}_{uid}"));
        std::fs::create_dir_all(&log_directory).expect("create the pod's log directory");
        PodSandboxConfig {
            metadata: Some(PodSandboxMetadata {
                name: name.into(),
                uid: uid.into(),
                namespace: namespace.into(),
                attempt,
            }),
            // The kubelet sets none for a hostNetwork pod: it shares the node's UTS
            // namespace too, where runc refuses to set one.
            hostname: String::new(),
            log_directory: path_str(&log_directory).to_owned(),
            dns_config: None,
            labels: strings(&[
                ("io.kubernetes.pod.name", name),
                ("io.kubernetes.pod.namespace", namespace),
                ("io.kubernetes.pod.uid", uid),
            ]),
            annotations: strings(&[
                ("kubernetes.io/config.source", "api"),
                ("kubernetes.io/config.seen", &rfc3339_now()),
            ]),
            linux: Some(LinuxPodSandboxConfig {
                cgroup_parent: String::new(),
                security_context: Some(LinuxSandboxSecurityContext {
                    namespace_options: Some(host_network()),
                    ..Default::default()
                }),
                sysctls: HashMap::new(),
            }),
        }
    }

    /// RunPodSandbox of [`pod_config`](Self::pod_config): the sandbox is ready when
    /// this returns.
    pub fn run_pod(&mut self, name: &str, namespace: &str, uid: &str, attempt: u32) -> Pod {
        let config = self.pod_config(name, namespace, uid, attempt);
        let request = RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: String::new(),
        };
        let client = &mut self.client;
        let id = self
            .rt
            .block_on(with_deadline(client.run_pod_sandbox(request)))
            .unwrap_or_else(|s| panic!("RunPodSandbox {namespace}/{name}: {s}"))
            .into_inner()
            .pod_sandbox_id;
        self.pods.push(id.clone());
        Pod { id, config }
    }

    /// CreateContainer of one attempt of a container in `pod`, as the kubelet builds
    /// it: metadata {name, attempt}, the test image, command `/bin/busybox sh -c
    /// SCRIPT`, the `io.kubernetes.container.name` and `io.kubernetes.pod.*` labels,
    /// the container hash, restart count, termination message and grace period
    /// annotations, log path `NAME/ATTEMPT.log` (its directory created, as the kubelet
    /// does), the pod's namespace modes, and the memory limit if any.
    pub fn create(&mut self, pod: &Pod, spec: &ContainerSpec<'_>) -> String {
        let meta = pod.config.metadata.clone().unwrap_or_default();
        std::fs::create_dir_all(pod.log_directory().join(spec.name))
            .expect("create the container's log directory");
        let command: Vec<String> = ["/bin/busybox", "sh", "-c", spec.script]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let config = ContainerConfig {
            metadata: Some(ContainerMetadata {
                name: spec.name.into(),
                attempt: spec.attempt,
            }),
            image: Some(image_spec(IMAGE)),
            command: command.clone(),
            labels: strings(&[
                ("io.kubernetes.container.name", spec.name),
                ("io.kubernetes.pod.name", &meta.name),
                ("io.kubernetes.pod.namespace", &meta.namespace),
                ("io.kubernetes.pod.uid", &meta.uid),
            ]),
            annotations: strings(&[
                (
                    "io.kubernetes.container.hash",
                    &container_hash(spec.name, &command, spec.memory_limit),
                ),
                (
                    "io.kubernetes.container.restartCount",
                    &spec.attempt.to_string(),
                ),
                (
                    "io.kubernetes.container.terminationMessagePath",
                    "/dev/termination-log",
                ),
                ("io.kubernetes.container.terminationMessagePolicy", "File"),
                ("io.kubernetes.pod.terminationGracePeriod", "30"),
            ]),
            log_path: format!("{}/{}.log", spec.name, spec.attempt),
            linux: Some(LinuxContainerConfig {
                resources: Some(LinuxContainerResources {
                    memory_limit_in_bytes: spec.memory_limit.unwrap_or(0),
                    ..Default::default()
                }),
                security_context: Some(LinuxContainerSecurityContext {
                    namespace_options: Some(host_network()),
                    ..Default::default()
                }),
            }),
            ..Default::default()
        };
        let request = CreateContainerRequest {
            pod_sandbox_id: pod.id.clone(),
            config: Some(config),
            sandbox_config: Some(pod.config.clone()),
        };
        let client = &mut self.client;
        self.rt
            .block_on(with_deadline(client.create_container(request)))
            .unwrap_or_else(|s| {
                panic!(
                    "CreateContainer {} attempt {} in {}: {s}",
                    spec.name, spec.attempt, pod.id
                )
            })
            .into_inner()
            .container_id
    }

    /// [`create`](Self::create) with the arguments spelled out and no spec struct.
    pub fn create_container(
        &mut self,
        pod: &Pod,
        name: &str,
        attempt: u32,
        script: &str,
        memory_limit: Option<i64>,
    ) -> String {
        self.create(
            pod,
            &ContainerSpec {
                name,
                attempt,
                script,
                memory_limit,
            },
        )
    }

    /// [`create`](Self::create) then [`start_container`](Self::start_container).
    pub fn run_container(&mut self, pod: &Pod, spec: &ContainerSpec<'_>) -> String {
        let id = self.create(pod, spec);
        self.start_container(&id);
        id
    }

    pub fn start_container(&mut self, id: &str) {
        let request = StartContainerRequest {
            container_id: id.into(),
        };
        let client = &mut self.client;
        self.rt
            .block_on(with_deadline(client.start_container(request)))
            .unwrap_or_else(|s| panic!("StartContainer {id}: {s}"));
    }

    /// StopContainer: SIGTERM, SIGKILL after `timeout_s` seconds (0: at once).
    pub fn stop_container(&mut self, id: &str, timeout_s: i64) {
        let request = StopContainerRequest {
            container_id: id.into(),
            timeout: timeout_s,
        };
        let client = &mut self.client;
        self.rt
            .block_on(with_deadline(client.stop_container(request)))
            .unwrap_or_else(|s| panic!("StopContainer {id}: {s}"));
    }

    pub fn remove_container(&mut self, id: &str) {
        let request = RemoveContainerRequest {
            container_id: id.into(),
        };
        let client = &mut self.client;
        self.rt
            .block_on(with_deadline(client.remove_container(request)))
            .unwrap_or_else(|s| panic!("RemoveContainer {id}: {s}"));
    }

    /// StopPodSandbox: every container of the pod killed, the sandbox stopped.
    pub fn stop_pod(&mut self, id: &str) {
        self.try_stop_pod(id)
            .unwrap_or_else(|s| panic!("StopPodSandbox {id}: {s}"));
    }

    fn try_stop_pod(&mut self, id: &str) -> Result<(), tonic::Status> {
        let request = StopPodSandboxRequest {
            pod_sandbox_id: id.into(),
        };
        let client = &mut self.client;
        self.rt
            .block_on(with_deadline(client.stop_pod_sandbox(request)))
            .map(drop)
    }

    /// RemovePodSandbox: the sandbox and its containers removed.
    pub fn remove_pod(&mut self, id: &str) {
        self.try_remove_pod(id)
            .unwrap_or_else(|s| panic!("RemovePodSandbox {id}: {s}"));
        self.pods.retain(|p| p != id);
    }

    fn try_remove_pod(&mut self, id: &str) -> Result<(), tonic::Status> {
        let request = RemovePodSandboxRequest {
            pod_sandbox_id: id.into(),
        };
        let client = &mut self.client;
        self.rt
            .block_on(with_deadline(client.remove_pod_sandbox(request)))
            .map(drop)
    }

    pub fn pod_status(&mut self, id: &str) -> PodSandboxStatus {
        let request = PodSandboxStatusRequest {
            pod_sandbox_id: id.into(),
            verbose: false,
        };
        let client = &mut self.client;
        self.rt
            .block_on(with_deadline(client.pod_sandbox_status(request)))
            .unwrap_or_else(|s| panic!("PodSandboxStatus {id}: {s}"))
            .into_inner()
            .status
            .unwrap_or_else(|| panic!("PodSandboxStatus {id}: no status"))
    }

    pub fn container_status(&mut self, id: &str) -> ContainerStatus {
        let request = ContainerStatusRequest {
            container_id: id.into(),
            verbose: false,
        };
        let client = &mut self.client;
        self.rt
            .block_on(with_deadline(client.container_status(request)))
            .unwrap_or_else(|s| panic!("ContainerStatus {id}: {s}"))
            .into_inner()
            .status
            .unwrap_or_else(|| panic!("ContainerStatus {id}: no status"))
    }

    /// Every container the CRI plugin has, of every pod and state.
    pub fn list_containers(&mut self) -> Vec<Container> {
        let client = &mut self.client;
        self.rt
            .block_on(with_deadline(
                client.list_containers(ListContainersRequest { filter: None }),
            ))
            .unwrap_or_else(|s| panic!("ListContainers: {s}"))
            .into_inner()
            .containers
    }

    /// Every sandbox the CRI plugin has, ready or not.
    pub fn list_pods(&mut self) -> Vec<PodSandbox> {
        self.try_list_pods()
            .unwrap_or_else(|s| panic!("ListPodSandbox: {s}"))
    }

    fn try_list_pods(&mut self) -> Result<Vec<PodSandbox>, tonic::Status> {
        let client = &mut self.client;
        self.rt
            .block_on(with_deadline(
                client.list_pod_sandbox(ListPodSandboxRequest { filter: None }),
            ))
            .map(|r| r.into_inner().items)
    }

    /// Polls ContainerStatus until the container has exited; its status then.
    pub fn wait_exited(&mut self, id: &str, deadline: Duration) -> ContainerStatus {
        self.wait_status(id, deadline, "to exit", |s| {
            s.state == ContainerState::ContainerExited as i32
        })
    }

    /// Polls ContainerStatus until `done` holds (`what` names it for the panic at the
    /// deadline, with the last status seen).
    pub fn wait_status(
        &mut self,
        id: &str,
        deadline: Duration,
        what: &str,
        done: impl Fn(&ContainerStatus) -> bool,
    ) -> ContainerStatus {
        let end = Instant::now() + deadline;
        loop {
            let status = self.container_status(id);
            if done(&status) {
                return status;
            }
            assert!(
                Instant::now() < end,
                "container {id} did not come {what} within {deadline:?}; last status: {status:#?}"
            );
            std::thread::sleep(POLL);
        }
    }

    fn poll<T>(&mut self, what: &str, mut check: impl FnMut(&mut Self) -> Option<T>) -> T {
        let end = Instant::now() + DEADLINE;
        loop {
            if let Some(value) = check(self) {
                return value;
            }
            assert!(
                Instant::now() < end,
                "timed out after {DEADLINE:?} waiting for {what}"
            );
            std::thread::sleep(POLL);
        }
    }

    /// Where the pods' log directories are.
    pub fn logs(&self) -> PathBuf {
        self.logs.path().to_owned()
    }
}

impl Drop for Kubelet {
    /// Stops and removes the pods still there (a test that failed half-way), so no
    /// shim or sandbox process outlives the test: what is left of a pod after its
    /// daemon is killed would be.
    fn drop(&mut self) {
        for id in std::mem::take(&mut self.pods) {
            let _ = self.try_stop_pod(&id);
            let _ = self.try_remove_pod(&id);
        }
    }
}

/// Every call gets the harness deadline, so a wedged runtime fails the test instead of
/// hanging it.
async fn with_deadline<T>(
    call: impl Future<Output = Result<T, tonic::Status>>,
) -> Result<T, tonic::Status> {
    tokio::time::timeout(DEADLINE, call)
        .await
        .unwrap_or_else(|_| {
            Err(tonic::Status::deadline_exceeded(format!(
                "no answer within {DEADLINE:?}"
            )))
        })
}

fn image_spec(image: &str) -> ImageSpec {
    ImageSpec {
        image: image.into(),
        annotations: HashMap::new(),
    }
}

/// A hostNetwork pod's namespaces, for its sandbox and each container: the node's
/// network, the pod's IPC, a PID namespace per container (the kubelet's default,
/// without shareProcessNamespace).
fn host_network() -> NamespaceOption {
    NamespaceOption {
        network: NamespaceMode::Node as i32,
        pid: NamespaceMode::Container as i32,
        ipc: NamespaceMode::Pod as i32,
        target_id: String::new(),
    }
}

fn strings(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Now, as Go's `time.RFC3339Nano` in UTC (the `kubernetes.io/config.seen` format).
fn rfc3339_now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
}

/// A stand-in for the kubelet's hash of the container spec (a hex hash, changing with
/// the spec).
fn container_hash(name: &str, command: &[String], memory_limit: Option<i64>) -> String {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (name, command, memory_limit).hash(&mut hasher);
    format!("{:08x}", hasher.finish() as u32)
}
