//! Attaching what containerd's record of a container says (pod, container name,
//! image, labels; see [`Workload`]) to every event about it, as the event is
//! captured: later the container is gone and its id means nothing.
//!
//! The record comes from the upstream's Containers API on the subscription's own
//! connection: one `Get` the first time a container is seen, remembered until its
//! `/containers/delete` (whose event still carries it). `/containers/update` carries
//! the new labels itself. A reconcile's lists fill the memory with every container
//! at once, and its reconstructed events take the record from those lists, or from
//! the snapshot for containers deleted meanwhile. An upstream that does not serve
//! the Containers API (another eventgate) is not enriched, said once.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use prost::Message as _;
use tonic::transport::Channel;
use tonic::{Code, Request};

use crate::event::Workload;
use crate::proto::containerd::events::ContainerUpdate;
use crate::proto::containerd::services::containers::v1::GetContainerRequest;
use crate::proto::containerd::services::containers::v1::containers_client::ContainersClient;
use crate::proto::containerd::types::Envelope;
use crate::reconcile::state::NodeState;

/// Containers remembered per upstream at most (oldest forgotten first); a node runs
/// a few hundred.
const CAPACITY: usize = 16 * 1024;
/// A `Get` holds the subscription's stream, so it may not take long.
const GET_TIMEOUT: Duration = Duration::from_secs(2);
const NAMESPACE_HEADER: &str = "containerd-namespace";

type Key = (String, String);

pub(super) struct Enricher {
    upstream: Arc<str>,
    enabled: bool,
    client: Option<ContainersClient<Channel>>,
    /// By (namespace, container id); `None`: the daemon had no such container.
    known: HashMap<Key, Option<Arc<Workload>>>,
    order: VecDeque<Key>,
}

/// The container an event is about: containerd's container, task and sandbox event
/// types all name it in field 1 (`id`, `container_id`, `sandbox_id`).
#[derive(Clone, PartialEq, prost::Message)]
struct About {
    #[prost(string, tag = "1")]
    id: String,
}

fn container_of(envelope: &Envelope) -> Option<String> {
    let any = envelope.event.as_ref()?;
    let ty = any.type_url.strip_prefix("containerd.events.")?;
    let about = ["Container", "Task", "Sandbox"]
        .iter()
        .any(|prefix| ty.starts_with(prefix));
    if !about || ty == "TaskIO" {
        return None;
    }
    let id = About::decode(any.value.as_slice()).ok()?.id;
    (!id.is_empty()).then_some(id)
}

impl Enricher {
    pub fn new(upstream: Arc<str>, enabled: bool) -> Self {
        Self {
            upstream,
            enabled,
            client: None,
            known: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    /// A new subscription: `Get`s go over its connection.
    pub fn connected(&mut self, channel: Channel) {
        if self.enabled {
            self.client = Some(ContainersClient::new(channel));
        }
    }

    /// What the record of a live event's container says, asking the daemon the first
    /// time a container is seen.
    pub async fn live(&mut self, envelope: &Envelope) -> Option<Arc<Workload>> {
        if !self.enabled {
            return None;
        }
        let id = container_of(envelope)?;
        let key = (envelope.namespace.clone(), id);
        let any = envelope.event.as_ref()?;
        match any.type_url.as_str() {
            "containerd.events.ContainerUpdate" => {
                let update = ContainerUpdate::decode(any.value.as_slice()).ok()?;
                let workload = Workload::from_record(&update.image, update.labels).map(Arc::new);
                self.remember(key, workload.clone());
                count(&self.upstream, "event");
                workload
            }
            // A new container (or a reused id): never what was remembered. One deleted
            // before it could be asked about still has the image its event names.
            "containerd.events.ContainerCreate" => match self.fetch(key.clone()).await {
                Some(workload) => Some(workload),
                None => {
                    let create = crate::proto::containerd::events::ContainerCreate::decode(
                        any.value.as_slice(),
                    )
                    .ok()?;
                    let workload = Workload::from_record(&create.image, Vec::new()).map(Arc::new);
                    self.remember(key, workload.clone());
                    workload
                }
            },
            "containerd.events.ContainerDelete" => {
                let known = self.known.remove(&key);
                match known {
                    Some(workload) => {
                        count(&self.upstream, "remembered");
                        workload
                    }
                    None => self.fetch_once(&key).await.ok().flatten(),
                }
            }
            _ => match self.known.get(&key) {
                Some(workload) => {
                    count(&self.upstream, "remembered");
                    workload.clone()
                }
                None => self.fetch(key).await,
            },
        }
    }

    /// What the record of a reconstructed event's container said: the daemon's list
    /// for one it still has, the snapshot for one it deleted meanwhile.
    pub fn reconciled(
        &mut self,
        envelope: &Envelope,
        daemon: &NodeState,
        recorded: &NodeState,
    ) -> Option<Arc<Workload>> {
        if !self.enabled {
            return None;
        }
        let id = container_of(envelope)?;
        let namespace = envelope.namespace.as_str();
        let record = |state: &NodeState| {
            let container = state.namespaces.get(namespace)?.containers.get(&id)?;
            Some(match (&container.labels, &container.workload) {
                (Some(labels), _) => Workload::from_record(&container.image, labels.clone()),
                (None, Some(captured)) => Some(captured.clone()),
                (None, None) => Workload::from_record(&container.image, Vec::new()),
            })
        };
        let key = (namespace.to_owned(), id.clone());
        let workload = match record(daemon).or_else(|| record(recorded)) {
            Some(found) => found.map(Arc::new),
            None => self.known.get(&key).cloned().flatten(),
        };
        count(&self.upstream, "listed");
        workload
    }

    /// Remembers every container a reconcile listed, so live events about them need
    /// no `Get`.
    pub fn listed(&mut self, daemon: &NodeState) {
        if !self.enabled {
            return;
        }
        for (namespace, state) in &daemon.namespaces {
            for (id, container) in &state.containers {
                let workload = Workload::from_record(
                    &container.image,
                    container.labels.clone().unwrap_or_default(),
                );
                self.remember((namespace.clone(), id.clone()), workload.map(Arc::new));
            }
        }
    }

    /// Asks the daemon, and remembers a definite answer (a record, or none).
    async fn fetch(&mut self, key: Key) -> Option<Arc<Workload>> {
        let answer = self.fetch_once(&key).await;
        if let Ok(workload) = &answer {
            self.remember(key, workload.clone());
        }
        answer.ok().flatten()
    }

    /// The container's record as the daemon has it: `Ok(None)` when it has no such
    /// container, `Err` when it could not say.
    async fn fetch_once(&mut self, key: &Key) -> Result<Option<Arc<Workload>>, ()> {
        let client = self.client.as_mut().ok_or(())?;
        let mut request = Request::new(GetContainerRequest { id: key.1.clone() });
        // Namespaces were checked by the exchange; one that is no header cannot be asked.
        let header = key.0.parse().map_err(|_| ())?;
        request.metadata_mut().insert(NAMESPACE_HEADER, header);
        request.set_timeout(GET_TIMEOUT);
        let answer = tokio::time::timeout(GET_TIMEOUT, client.get(request)).await;
        match answer {
            Ok(Ok(response)) => {
                count(&self.upstream, "fetched");
                Ok(response.into_inner().container.and_then(|container| {
                    Workload::from_record(&container.image, container.labels).map(Arc::new)
                }))
            }
            Ok(Err(status)) if status.code() == Code::NotFound => {
                count(&self.upstream, "absent");
                Ok(None)
            }
            Ok(Err(status)) if status.code() == Code::Unimplemented => {
                tracing::warn!(
                    upstream = %self.upstream,
                    "the upstream does not serve containerd's Containers API (another eventgate?); its events are not enriched with pods and images"
                );
                self.enabled = false;
                Err(())
            }
            Ok(Err(status)) => {
                count(&self.upstream, "error");
                tracing::warn!(upstream = %self.upstream, namespace = %key.0, container = %key.1, error = %status.message(), code = ?status.code(), "cannot read the container's record; its event is recorded without pod and image");
                Err(())
            }
            Err(_) => {
                count(&self.upstream, "error");
                tracing::warn!(upstream = %self.upstream, namespace = %key.0, container = %key.1, "the container's record did not come within {GET_TIMEOUT:?}; its event is recorded without pod and image");
                Err(())
            }
        }
    }

    fn remember(&mut self, key: Key, workload: Option<Arc<Workload>>) {
        if self.known.insert(key.clone(), workload).is_none() {
            self.order.push_back(key);
        }
        while self.known.len() > CAPACITY {
            match self.order.pop_front() {
                Some(oldest) => {
                    self.known.remove(&oldest);
                }
                None => break,
            }
        }
        // Deleted keys linger in `order`; drop them when they outnumber the live ones.
        if self.order.len() > 2 * CAPACITY {
            let known = &self.known;
            self.order.retain(|key| known.contains_key(key));
        }
    }
}

fn count(upstream: &str, result: &'static str) {
    metrics::counter!("eventgate_upstream_enrich_total", "upstream" => upstream.to_owned(), "result" => result)
        .increment(1);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::Registry;

    fn envelope(topic: &str, ty: &str, json: &str) -> Envelope {
        Envelope {
            timestamp: None,
            namespace: "k8s.io".into(),
            topic: topic.into(),
            event: Some(Registry::global().encode_json(ty, json).unwrap()),
        }
    }

    #[test]
    fn the_container_is_found_in_every_container_task_and_sandbox_event() {
        for (topic, ty, json) in [
            (
                "/containers/create",
                "containerd.events.ContainerCreate",
                r#"{"id":"c1"}"#,
            ),
            (
                "/containers/delete",
                "containerd.events.ContainerDelete",
                r#"{"id":"c1"}"#,
            ),
            (
                "/tasks/exit",
                "containerd.events.TaskExit",
                r#"{"containerId":"c1","id":"exec-9"}"#,
            ),
            (
                "/tasks/exec-added",
                "containerd.events.TaskExecAdded",
                r#"{"containerId":"c1","execId":"e"}"#,
            ),
            (
                "/tasks/oom",
                "containerd.events.TaskOOM",
                r#"{"containerId":"c1"}"#,
            ),
            (
                "/sandboxes/exit",
                "containerd.events.SandboxExit",
                r#"{"sandboxId":"c1"}"#,
            ),
        ] {
            assert_eq!(
                container_of(&envelope(topic, ty, json)).as_deref(),
                Some("c1"),
                "{ty}"
            );
        }
        for (topic, ty, json) in [
            (
                "/images/create",
                "containerd.services.images.v1.ImageCreate",
                r#"{"name":"c1"}"#,
            ),
            (
                "/namespaces/create",
                "containerd.events.NamespaceCreate",
                r#"{"name":"c1"}"#,
            ),
            (
                "/tasks/exit",
                "containerd.events.TaskExit",
                r#"{"id":"c1"}"#,
            ),
        ] {
            assert_eq!(container_of(&envelope(topic, ty, json)), None, "{ty}");
        }
    }

    #[tokio::test]
    async fn updates_carry_their_labels_and_deletes_forget() {
        let mut enricher = Enricher::new("k8s".into(), true);
        let update = envelope(
            "/containers/update",
            "containerd.events.ContainerUpdate",
            r#"{"id":"c1","image":"nginx","labels":{"io.kubernetes.pod.name":"web-7"}}"#,
        );
        let workload = enricher.live(&update).await.unwrap();
        assert_eq!(workload.pod_name.as_deref(), Some("web-7"));
        let exit = envelope(
            "/tasks/exit",
            "containerd.events.TaskExit",
            r#"{"containerId":"c1"}"#,
        );
        assert_eq!(enricher.live(&exit).await, Some(workload.clone()));
        let delete = envelope(
            "/containers/delete",
            "containerd.events.ContainerDelete",
            r#"{"id":"c1"}"#,
        );
        assert_eq!(enricher.live(&delete).await, Some(workload));
        // Forgotten, and with no daemon to ask, nothing.
        assert_eq!(enricher.live(&exit).await, None);
        assert!(
            Enricher::new("off".into(), false)
                .live(&update)
                .await
                .is_none()
        );
    }
}
