//! A kubelet-like CRI client for the CRI reconcile benchmark: it runs hostNetwork
//! pods and creates and starts their containers through containerd's CRI plugin
//! with the requests the kubelet builds (the same metadata, labels, annotations, log
//! paths and namespace modes as `tests/support/kubelet.rs`), and relists the node
//! the way the kubelet's PLEG does every second: ListPodSandbox, then
//! ListContainers, on its open connection.

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tonic::transport::Channel;

use super::super::BenchError;
use crate::proto::runtime::v1::image_service_client::ImageServiceClient;
use crate::proto::runtime::v1::runtime_service_client::RuntimeServiceClient;
use crate::proto::runtime::v1::{
    Container, ContainerConfig, ContainerMetadata, ContainerState, CreateContainerRequest,
    ImageSpec, ImageStatusRequest, LinuxContainerConfig, LinuxContainerSecurityContext,
    LinuxPodSandboxConfig, LinuxSandboxSecurityContext, ListContainersRequest,
    ListPodSandboxRequest, NamespaceMode, NamespaceOption, PodSandbox, PodSandboxConfig,
    PodSandboxMetadata, RunPodSandboxRequest, StartContainerRequest, StopPodSandboxRequest,
    VersionRequest,
};

/// How long one CRI call may take on a loaded 2-core machine.
const CALL_TIMEOUT: Duration = Duration::from_secs(120);

/// How long the CRI plugin may take to serve after containerd's socket accepts, and
/// to learn of an imported image.
const START_TIMEOUT: Duration = Duration::from_secs(60);

const POLL: Duration = Duration::from_millis(20);

/// The largest answer read, as eventgate's own CRI client: a list of thousands of
/// containers with the kubelet's labels and annotations is megabytes.
const MAX_MESSAGE: usize = 16 * 1024 * 1024;

/// A pod as the kubelet ran it: its sandbox id and the config every CreateContainer
/// of the pod repeats.
#[derive(Clone, Debug)]
pub(crate) struct Pod {
    pub id: String,
    pub config: PodSandboxConfig,
}

/// One relist: what the CRI holds.
#[derive(Clone, Debug)]
pub(crate) struct Relisted {
    pub sandboxes: Vec<PodSandbox>,
    pub containers: Vec<Container>,
}

impl Relisted {
    /// Containers in state EXITED.
    pub(crate) fn exited(&self) -> usize {
        self.containers
            .iter()
            .filter(|c| c.state == ContainerState::ContainerExited as i32)
            .count()
    }
}

#[derive(Clone)]
pub(crate) struct Kubelet {
    runtime: RuntimeServiceClient<Channel>,
    images: ImageServiceClient<Channel>,
    /// Where the pods' log directories go (`/var/log/pods` on a node).
    logs: PathBuf,
}

impl Kubelet {
    /// Connects to containerd's socket and waits until its CRI plugin serves (it
    /// refuses calls while it initialises, after the socket accepts).
    pub(crate) async fn connect(socket: &Path, logs: PathBuf) -> Result<Kubelet, BenchError> {
        let channel =
            crate::client::connect_channel(&socket.display().to_string(), CALL_TIMEOUT).await?;
        let kubelet = Kubelet {
            runtime: RuntimeServiceClient::new(channel.clone())
                .max_decoding_message_size(MAX_MESSAGE),
            images: ImageServiceClient::new(channel).max_decoding_message_size(MAX_MESSAGE),
            logs,
        };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let mut client = kubelet.runtime.clone();
            let request = VersionRequest {
                version: "v1".into(),
            };
            match bounded("Version", client.version(request)).await {
                Ok(_) => return Ok(kubelet),
                Err(error) if Instant::now() > deadline => return Err(error),
                Err(_) => tokio::time::sleep(POLL).await,
            }
        }
    }

    /// Waits until the CRI plugin knows `image` by name: it learns of an image
    /// imported into `k8s.io` from containerd's events, after the import returned.
    pub(crate) async fn wait_image(&self, image: &str) -> Result<(), BenchError> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let mut client = self.images.clone();
            let request = ImageStatusRequest {
                image: Some(image_spec(image)),
                verbose: false,
            };
            let known = bounded("ImageStatus", client.image_status(request))
                .await?
                .image
                .is_some();
            if known {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(BenchError::Timeout {
                    what: format!(
                        "the CRI plugin did not know image {image} within {START_TIMEOUT:?}"
                    ),
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// RunPodSandbox of a hostNetwork pod as the kubelet builds it: metadata, no
    /// hostname, a log directory `NAMESPACE_NAME_UID` (created, as the kubelet does),
    /// the `io.kubernetes.pod.*` labels, the config source and first-seen annotations,
    /// network NODE, PID CONTAINER, IPC POD. The sandbox is ready when this returns.
    pub(crate) async fn run_pod(
        &self,
        name: &str,
        namespace: &str,
        uid: &str,
    ) -> Result<Pod, BenchError> {
        let log_directory = self.logs.join(format!("{namespace}_{name}_{uid}"));
        create_dir(&log_directory)?;
        let config = PodSandboxConfig {
            metadata: Some(PodSandboxMetadata {
                name: name.into(),
                uid: uid.into(),
                namespace: namespace.into(),
                attempt: 0,
            }),
            hostname: String::new(),
            log_directory: log_directory.display().to_string(),
            dns_config: None,
            labels: strings(&[
                ("io.kubernetes.pod.name", name),
                ("io.kubernetes.pod.namespace", namespace),
                ("io.kubernetes.pod.uid", uid),
            ]),
            annotations: strings(&[
                ("kubernetes.io/config.source", "api"),
                (
                    "kubernetes.io/config.seen",
                    &chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true),
                ),
            ]),
            linux: Some(LinuxPodSandboxConfig {
                cgroup_parent: String::new(),
                security_context: Some(LinuxSandboxSecurityContext {
                    namespace_options: Some(host_network()),
                    ..Default::default()
                }),
                sysctls: HashMap::new(),
            }),
        };
        let request = RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: String::new(),
        };
        let mut client = self.runtime.clone();
        let id = bounded("RunPodSandbox", client.run_pod_sandbox(request))
            .await?
            .pod_sandbox_id;
        Ok(Pod { id, config })
    }

    /// CreateContainer of attempt 0 of container `name` in `pod`, as the kubelet
    /// builds it: command `/bin/busybox sh -c SCRIPT`, the
    /// `io.kubernetes.container.name` and `io.kubernetes.pod.*` labels, the hash,
    /// restart count, termination message and grace period annotations, log path
    /// `NAME/0.log` (its directory created), the pod's namespace modes.
    pub(crate) async fn create(
        &self,
        pod: &Pod,
        name: &str,
        script: &str,
    ) -> Result<String, BenchError> {
        let meta = pod.config.metadata.clone().unwrap_or_default();
        create_dir(&Path::new(&pod.config.log_directory).join(name))?;
        let command: Vec<String> = ["/bin/busybox", "sh", "-c", script]
            .map(str::to_owned)
            .to_vec();
        let config = ContainerConfig {
            metadata: Some(ContainerMetadata {
                name: name.into(),
                attempt: 0,
            }),
            image: Some(image_spec(super::super::node::IMAGE)),
            command,
            labels: strings(&[
                ("io.kubernetes.container.name", name),
                ("io.kubernetes.pod.name", &meta.name),
                ("io.kubernetes.pod.namespace", &meta.namespace),
                ("io.kubernetes.pod.uid", &meta.uid),
            ]),
            annotations: strings(&[
                ("io.kubernetes.container.hash", &hash(name, script)),
                ("io.kubernetes.container.restartCount", "0"),
                (
                    "io.kubernetes.container.terminationMessagePath",
                    "/dev/termination-log",
                ),
                ("io.kubernetes.container.terminationMessagePolicy", "File"),
                ("io.kubernetes.pod.terminationGracePeriod", "30"),
            ]),
            log_path: format!("{name}/0.log"),
            linux: Some(LinuxContainerConfig {
                resources: None,
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
        let mut client = self.runtime.clone();
        Ok(bounded("CreateContainer", client.create_container(request))
            .await?
            .container_id)
    }

    pub(crate) async fn start(&self, id: &str) -> Result<(), BenchError> {
        let mut client = self.runtime.clone();
        let request = StartContainerRequest {
            container_id: id.into(),
        };
        bounded("StartContainer", client.start_container(request))
            .await
            .map(drop)
    }

    /// The kubelet's relist: every pod sandbox, then every container.
    pub(crate) async fn relist(&self) -> Result<Relisted, BenchError> {
        let mut client = self.runtime.clone();
        let sandboxes = bounded(
            "ListPodSandbox",
            client.list_pod_sandbox(ListPodSandboxRequest::default()),
        )
        .await?
        .items;
        let containers = bounded(
            "ListContainers",
            client.list_containers(ListContainersRequest::default()),
        )
        .await?
        .containers;
        Ok(Relisted {
            sandboxes,
            containers,
        })
    }

    /// Polls ListContainers until every one of `ids` has exited.
    pub(crate) async fn wait_exited(
        &self,
        ids: &[String],
        within: Duration,
    ) -> Result<(), BenchError> {
        let deadline = Instant::now() + within;
        loop {
            let mut client = self.runtime.clone();
            let listed = bounded(
                "ListContainers",
                client.list_containers(ListContainersRequest::default()),
            )
            .await?
            .containers;
            let exited: std::collections::HashSet<&str> = listed
                .iter()
                .filter(|c| c.state == ContainerState::ContainerExited as i32)
                .map(|c| c.id.as_str())
                .collect();
            let waiting = ids
                .iter()
                .filter(|id| !exited.contains(id.as_str()))
                .count();
            if waiting == 0 {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(BenchError::Timeout {
                    what: format!("{waiting} started containers had not exited within {within:?}"),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// StopPodSandbox: every container of the pod killed, the sandbox stopped and
    /// its shm unmounted (the pod is not removed: its containerd goes as a whole).
    pub(crate) async fn stop_pod(&self, id: &str) -> Result<(), BenchError> {
        let mut client = self.runtime.clone();
        bounded(
            "StopPodSandbox",
            client.stop_pod_sandbox(StopPodSandboxRequest {
                pod_sandbox_id: id.into(),
            }),
        )
        .await
        .map(drop)
    }
}

/// `call` within [`CALL_TIMEOUT`], its answer's message.
async fn bounded<T>(
    what: &'static str,
    call: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Result<T, BenchError> {
    match tokio::time::timeout(CALL_TIMEOUT, call).await {
        Ok(Ok(response)) => Ok(response.into_inner()),
        Ok(Err(source)) => Err(BenchError::Rpc { what, source }),
        Err(_) => Err(BenchError::Timeout {
            what: format!("the CRI's {what} did not answer within {CALL_TIMEOUT:?}"),
        }),
    }
}

fn create_dir(dir: &Path) -> Result<(), BenchError> {
    std::fs::create_dir_all(dir).map_err(|source| BenchError::Io {
        context: format!("cannot create {}", dir.display()),
        source,
    })
}

fn image_spec(image: &str) -> ImageSpec {
    ImageSpec {
        image: image.into(),
        ..Default::default()
    }
}

/// A hostNetwork pod's namespaces, for its sandbox and each container: the node's
/// network, the pod's IPC, a PID namespace per container.
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
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// A stand-in for the kubelet's hash of the container spec.
fn hash(name: &str, script: &str) -> String {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (name, script).hash(&mut hasher);
    format!("{:08x}", hasher.finish() as u32)
}
