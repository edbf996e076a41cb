//! Attaching what containerd's record of a container says (pod, container name,
//! image, labels; see [`Workload`]) to every event about it, as the event is
//! captured: later the container is gone and its id means nothing.
//!
//! The record comes from the upstream's Containers API on the subscription's own
//! connection, asked for the first time a container is seen, remembered until its
//! `/containers/delete` (whose event still carries it). `/containers/update` carries
//! the new labels itself. Asking takes a round trip to a daemon that may be busy,
//! so the stream reads on meanwhile: an event waiting for its container's record
//! holds the events behind it (order is kept), not the stream. Containers seen
//! while earlier questions are under way are asked about together, in one
//! Containers `List` filtered by their ids: under a burst of new containers the
//! daemon answers a few calls, not one per container. A reconcile's lists fill the
//! memory with every container at once, and its reconstructed events take the record
//! from those lists, or from the snapshot for containers deleted meanwhile. An upstream that does not serve
//! the Containers API (another eventgate) is not enriched, said once.
//!
//! Docker's containers (namespace `moby`) take Docker's terms instead, where dockerd
//! is configured or found (`docker`): containerd's record of them has no image and
//! only dockerd's bundle path as a label, while dockerd's inspect has the name `docker
//! ps` shows, the image reference the user ran and the container's labels (compose's
//! project and service among them). dockerd creates its container before it creates
//! containerd's, so the inspect at `/containers/create` finds it. dockerd deletes
//! containerd's container at every exit and keeps its own until `docker rm`, so these
//! terms are remembered past `/containers/delete`, until a reconcile's lists no longer
//! show the container.

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use prost::Message as _;
use tonic::transport::Channel;
use tonic::{Code, Request};

use super::settings::ManagerSetting;
use crate::docker::{self, DockerClient};
use crate::event::Workload;
use crate::proto::containerd::events::{ContainerCreate, ContainerUpdate};
use crate::proto::containerd::services::containers::v1::ListContainersRequest;
use crate::proto::containerd::services::containers::v1::containers_client::ContainersClient;
use crate::proto::containerd::types::Envelope;
use crate::reconcile::managed::DOCKER_NAMESPACE;
use crate::reconcile::state::NodeState;

/// Containers remembered per upstream at most (oldest forgotten first); a node runs
/// a few hundred.
const CAPACITY: usize = 16 * 1024;
/// Calls to the daemon under way at once at most.
const MAX_CALLS: usize = 4;
/// Containers asked about in one call at most.
const BATCH: usize = 64;
/// Containers waiting for an answer at most; the stream is held beyond.
const MAX_WAITING: usize = 1024;
/// A call holds the events behind its containers, so it may not take long.
const GET_TIMEOUT: Duration = Duration::from_secs(2);
/// dockerd answers an inspect only once a start under way is done (it holds the
/// container's lock meanwhile), so it gets the managers' deadline.
const DOCKER_TIMEOUT: Duration = super::managers::CALL_TIMEOUT;
/// Inspects in flight at once per call.
const DOCKER_CONCURRENCY: usize = 4;
const NAMESPACE_HEADER: &str = "containerd-namespace";

type Key = (String, String);

/// An event's container record: known, or waiting for the daemon's answer.
#[derive(Debug)]
pub(super) enum Lookup {
    Ready(Option<Arc<Workload>>),
    Waiting {
        key: Key,
        fetch: u64,
        /// A `/containers/create`'s image, for a container the daemon no longer has.
        image: Option<String>,
    },
}

impl Lookup {
    pub(super) fn is_ready(&self) -> bool {
        matches!(self, Lookup::Ready(_))
    }

    /// The record, once ready (`None` while waiting).
    pub(super) fn take(&mut self) -> Option<Arc<Workload>> {
        match self {
            Lookup::Ready(workload) => workload.take(),
            Lookup::Waiting { .. } => None,
        }
    }
}

/// The daemon's answer about one container.
pub(super) struct Fetched {
    key: Key,
    fetch: u64,
    workload: Option<Arc<Workload>>,
    /// The daemon answered (found, or no such container), rather than failing.
    answered: bool,
}

enum Failure {
    Unimplemented,
    Other,
}

type Answer = Result<Option<Arc<Workload>>, Failure>;

struct Pending {
    fetch: u64,
    /// A delete or update came meanwhile: the answer is not to be remembered.
    stale: bool,
}

pub(super) struct Enricher {
    upstream: Arc<str>,
    enabled: bool,
    /// Where Docker's terms come from for namespace `moby` (the upstream's `docker`).
    docker: ManagerSetting,
    client: Option<ContainersClient<Channel>>,
    /// By (namespace, container id); `None`: the daemon had no such container.
    known: HashMap<Key, Option<Arc<Workload>>>,
    order: VecDeque<Key>,
    calls: FuturesUnordered<BoxFuture<'static, Vec<(Key, u64, Answer)>>>,
    /// Containers to ask about in the next call.
    queued: VecDeque<(Key, u64)>,
    /// The latest question per container, queued or under way.
    pending: HashMap<Key, Pending>,
    next_fetch: u64,
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
    pub(super) fn new(upstream: Arc<str>, enabled: bool, docker: ManagerSetting) -> Self {
        Self {
            upstream,
            enabled,
            docker,
            client: None,
            known: HashMap::new(),
            order: VecDeque::new(),
            calls: FuturesUnordered::new(),
            queued: VecDeque::new(),
            pending: HashMap::new(),
            next_fetch: 0,
        }
    }

    /// A new subscription: questions go over its connection. Nothing waits for the
    /// last one's any more (its events were all recorded before it ended).
    pub(super) fn connected(&mut self, channel: Channel) {
        self.calls = FuturesUnordered::new();
        self.queued.clear();
        self.pending.clear();
        if self.enabled {
            self.client = Some(ContainersClient::new(channel));
        }
    }

    /// Whether another event may be read: a question it needs could be asked.
    pub(super) fn has_room(&self) -> bool {
        self.pending.len() < MAX_WAITING
    }

    pub(super) fn is_fetching(&self) -> bool {
        !self.calls.is_empty()
    }

    /// What the record of a live event's container says, or the answer it waits for
    /// (the first time a container is seen). Called in the stream's order.
    pub(super) fn begin(&mut self, envelope: &Envelope) -> Lookup {
        if !self.enabled {
            return Lookup::Ready(None);
        }
        let Some(id) = container_of(envelope) else {
            return Lookup::Ready(None);
        };
        let key = (envelope.namespace.clone(), id);
        let Some(any) = envelope.event.as_ref() else {
            return Lookup::Ready(None);
        };
        // Docker's terms outlive containerd's container, and containerd's updates of
        // it say nothing of them.
        let docker = self.docker(&key.0).is_some();
        match any.type_url.as_str() {
            "containerd.events.ContainerUpdate" if !docker => {
                let Ok(update) = ContainerUpdate::decode(any.value.as_slice()) else {
                    return Lookup::Ready(None);
                };
                let workload = Workload::from_record(&update.image, update.labels).map(Arc::new);
                self.outdate(&key);
                self.remember(key, workload.clone());
                count(&self.upstream, "event");
                Lookup::Ready(workload)
            }
            // A new container (or a reused id): never what was remembered.
            "containerd.events.ContainerCreate" => {
                let image = ContainerCreate::decode(any.value.as_slice())
                    .ok()
                    .map(|create| create.image);
                self.known.remove(&key);
                self.fetch(key, image)
            }
            "containerd.events.ContainerDelete" if !docker => {
                // Gone after this event, whatever a question under way answers.
                self.outdate(&key);
                if let Some(known) = self.known.remove(&key) {
                    count(&self.upstream, "remembered");
                    return Lookup::Ready(known);
                }
                match self.pending.get_mut(&key) {
                    Some(pending) => Lookup::Waiting {
                        fetch: pending.fetch,
                        key,
                        image: None,
                    },
                    None => {
                        let lookup = self.fetch(key.clone(), None);
                        self.outdate(&key);
                        lookup
                    }
                }
            }
            _ => {
                if let Some(known) = self.known.get(&key) {
                    count(&self.upstream, "remembered");
                    return Lookup::Ready(known.clone());
                }
                match self.pending.get(&key) {
                    Some(pending) => Lookup::Waiting {
                        fetch: pending.fetch,
                        key,
                        image: None,
                    },
                    None => self.fetch(key, None),
                }
            }
        }
    }

    /// The answers of the next call to finish, remembered unless outdated
    /// meanwhile; the next call starts with what queued up. Pending forever when
    /// no call is under way.
    pub(super) async fn fetched(&mut self) -> Vec<Fetched> {
        let Some(answers) = self.calls.next().await else {
            return std::future::pending().await;
        };
        let fetched = answers
            .into_iter()
            .map(|(key, fetch, answer)| self.answered(key, fetch, answer))
            .collect();
        self.pump();
        fetched
    }

    fn answered(&mut self, key: Key, fetch: u64, answer: Answer) -> Fetched {
        let current = self.pending.get(&key).filter(|p| p.fetch == fetch);
        let remember = current.is_some_and(|p| !p.stale);
        if current.is_some() {
            self.pending.remove(&key);
        }
        let (workload, answered) = match answer {
            Ok(workload) => (workload, true),
            Err(Failure::Unimplemented) => {
                if self.enabled {
                    tracing::warn!(
                        upstream = %self.upstream,
                        "the upstream does not serve containerd's Containers API (another eventgate?); its events are not enriched with pods and images"
                    );
                }
                self.enabled = false;
                (None, false)
            }
            Err(Failure::Other) => (None, false),
        };
        if remember && answered {
            self.remember(key.clone(), workload.clone());
        }
        Fetched {
            key,
            fetch,
            workload,
            answered: answered && remember,
        }
    }

    /// Completes `lookup` if it waited for `fetched`.
    pub(super) fn settle(&mut self, lookup: &mut Lookup, fetched: &Fetched) {
        let Lookup::Waiting { key, fetch, image } = lookup else {
            return;
        };
        if *key != fetched.key || *fetch != fetched.fetch {
            return;
        }
        let workload = match (&fetched.workload, image.take()) {
            (Some(workload), _) => Some(Arc::clone(workload)),
            // Created and deleted before it could be asked: the create named its image.
            (None, Some(image)) => {
                let workload = Workload::from_record(&image, Vec::new()).map(Arc::new);
                if fetched.answered {
                    self.remember(key.clone(), workload.clone());
                }
                workload
            }
            (None, None) => None,
        };
        *lookup = Lookup::Ready(workload);
    }

    /// Gives up waiting (eventgate is stopping): the event is recorded with what is
    /// known without the daemon's answer.
    pub(super) fn give_up(lookup: &mut Lookup) {
        if let Lookup::Waiting { image, .. } = lookup {
            let workload = image
                .take()
                .and_then(|image| Workload::from_record(&image, Vec::new()))
                .map(Arc::new);
            *lookup = Lookup::Ready(workload);
        }
    }

    /// What the record of a reconstructed event's container said: the daemon's list
    /// for one it still has, the snapshot for one it deleted meanwhile. For Docker's
    /// containers, Docker's terms first: from dockerd's list (folded into the
    /// daemon's side), the inspect remembered, or what the record captured.
    pub(super) fn reconciled(
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
        if namespace == DOCKER_NAMESPACE
            && let Some(terms) = self.docker_terms(namespace, &id, daemon, recorded)
        {
            count(&self.upstream, "listed");
            return Some(terms);
        }
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

    /// Docker's terms for a container of namespace `moby`, where known.
    fn docker_terms(
        &self,
        namespace: &str,
        id: &str,
        daemon: &NodeState,
        recorded: &NodeState,
    ) -> Option<Arc<Workload>> {
        let captured = |state: &NodeState| {
            let container = state.namespaces.get(namespace)?.containers.get(id)?;
            container.workload.clone().map(Arc::new)
        };
        let remembered = || {
            self.docker(namespace)?;
            self.known
                .get(&(namespace.to_owned(), id.to_owned()))
                .cloned()
                .flatten()
        };
        captured(daemon)
            .or_else(remembered)
            .or_else(|| captured(recorded))
    }

    /// Remembers every container a reconcile listed, so live events about them need
    /// no question. Docker's containers take Docker's terms from dockerd's list (the
    /// daemon's side has them once folded); the ones neither dockerd nor containerd
    /// shows any more are forgotten.
    pub(super) fn listed(&mut self, daemon: &NodeState) {
        if !self.enabled {
            return;
        }
        let docker = self.docker(DOCKER_NAMESPACE).is_some();
        if docker {
            let shown = daemon.namespaces.get(DOCKER_NAMESPACE);
            let pending = &self.pending;
            self.known.retain(|key, _| {
                key.0 != DOCKER_NAMESPACE
                    || pending.contains_key(key)
                    || shown.is_some_and(|ns| ns.containers.contains_key(&key.1))
            });
        }
        for (namespace, state) in &daemon.namespaces {
            if docker && namespace == DOCKER_NAMESPACE {
                for (id, container) in &state.containers {
                    let key = (namespace.clone(), id.clone());
                    if let Some(terms) = &container.workload
                        && !self.pending.contains_key(&key)
                    {
                        self.remember(key, Some(Arc::new(terms.clone())));
                    }
                }
                continue;
            }
            for (id, container) in &state.containers {
                let key = (namespace.clone(), id.clone());
                if self.pending.contains_key(&key) {
                    continue;
                }
                let workload = Workload::from_record(
                    &container.image,
                    container.labels.clone().unwrap_or_default(),
                );
                self.remember(key, workload.map(Arc::new));
            }
        }
    }

    /// dockerd, for a container of `namespace`: only `moby`'s are Docker's, and only
    /// where `docker` names a socket or `auto` finds dockerd's.
    fn docker(&self, namespace: &str) -> Option<DockerClient> {
        if namespace != DOCKER_NAMESPACE {
            return None;
        }
        let address = match &self.docker {
            ManagerSetting::Off => return None,
            ManagerSetting::Address(address) => address.as_str(),
            ManagerSetting::Auto => {
                Path::new(docker::DEFAULT_SOCKET).exists().then_some(())?;
                docker::DEFAULT_SOCKET
            }
        };
        DockerClient::new(address, DOCKER_TIMEOUT).ok()
    }

    /// A question under way about `key` answers for a container that changed since.
    fn outdate(&mut self, key: &Key) {
        if let Some(pending) = self.pending.get_mut(key) {
            pending.stale = true;
        }
    }

    /// Asks the daemon for the container's record: now, or with the next call.
    fn fetch(&mut self, key: Key, image: Option<String>) -> Lookup {
        // containerd refuses such ids for its containers: there is nothing to ask.
        let asker = self.client.is_some() || self.docker(&key.0).is_some();
        if !asker || crate::identifiers::validate(&key.1).is_err() {
            let workload = image
                .and_then(|image| Workload::from_record(&image, Vec::new()))
                .map(Arc::new);
            return Lookup::Ready(workload);
        }
        self.next_fetch += 1;
        let fetch = self.next_fetch;
        self.pending.insert(
            key.clone(),
            Pending {
                fetch,
                stale: false,
            },
        );
        self.queued.push_back((key.clone(), fetch));
        self.pump();
        Lookup::Waiting { key, fetch, image }
    }

    /// Starts calls for what is queued, while fewer than [`MAX_CALLS`] are under
    /// way: up to [`BATCH`] containers of one namespace per call.
    fn pump(&mut self) {
        while self.calls.len() < MAX_CALLS
            && let Some((first, _)) = self.queued.front()
        {
            let namespace = first.0.clone();
            let (docker, client) = (self.docker(&namespace), self.client.clone());
            if docker.is_none() && client.is_none() {
                return;
            }
            let mut batch = Vec::new();
            let mut rest = VecDeque::with_capacity(self.queued.len());
            for (key, fetch) in self.queued.drain(..) {
                if key.0 == namespace && batch.len() < BATCH {
                    batch.push((key.1, fetch));
                } else {
                    rest.push_back((key, fetch));
                }
            }
            self.queued = rest;
            let upstream = Arc::clone(&self.upstream);
            if let Some(docker) = docker {
                self.calls
                    .push(Box::pin(inspect(docker, namespace, batch, upstream)));
            } else if let Some(client) = client {
                self.calls
                    .push(Box::pin(list(client, namespace, batch, upstream)));
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

/// The records of `ids` in `namespace`, by one Containers `List` filtered by their
/// ids (`Ok(None)`: the daemon has no such container).
async fn list(
    client: ContainersClient<Channel>,
    namespace: String,
    ids: Vec<(String, u64)>,
    upstream: Arc<str>,
) -> Vec<(Key, u64, Answer)> {
    let answers = ask(client, &namespace, &ids, &upstream).await;
    ids.into_iter()
        .map(|(id, fetch)| {
            let answer = match &answers {
                Ok(found) => Ok(found.get(&id).cloned().flatten()),
                Err(Failure::Unimplemented) => Err(Failure::Unimplemented),
                Err(Failure::Other) => Err(Failure::Other),
            };
            ((namespace.clone(), id), fetch, answer)
        })
        .collect()
}

/// Docker's terms for `ids` of namespace `moby`, by dockerd's inspect of each
/// (`Ok(None)`: dockerd has no such container).
async fn inspect(
    docker: DockerClient,
    namespace: String,
    ids: Vec<(String, u64)>,
    upstream: Arc<str>,
) -> Vec<(Key, u64, Answer)> {
    let docker = &docker;
    let answers: Vec<_> = futures::stream::iter(ids)
        .map(|(id, fetch)| async move {
            let answer = docker.inspect(&id).await;
            (id, fetch, answer)
        })
        .buffer_unordered(DOCKER_CONCURRENCY)
        .collect()
        .await;
    let (mut fetched, mut absent, mut failed) = (0u64, 0u64, 0u64);
    let mut first_error = None;
    let answers = answers
        .into_iter()
        .map(|(id, fetch, answer)| {
            let answer = match answer {
                Ok(Some(inspected)) => {
                    fetched += 1;
                    Ok(Some(Arc::new(inspected.workload())))
                }
                Ok(None) => {
                    absent += 1;
                    Ok(None)
                }
                Err(error) => {
                    failed += 1;
                    first_error.get_or_insert_with(|| crate::errors::chain(&error));
                    Err(Failure::Other)
                }
            };
            ((namespace.clone(), id), fetch, answer)
        })
        .collect();
    let counter = |result: &'static str, n: u64| {
        metrics::counter!("eventgate_upstream_enrich_total", "upstream" => upstream.to_string(), "result" => result)
            .increment(n);
    };
    counter("fetched", fetched);
    counter("absent", absent);
    counter("error", failed);
    if let Some(error) = first_error {
        tracing::warn!(upstream = %upstream, namespace, containers = failed, %error, "cannot inspect the containers in dockerd; their events are recorded without Docker's name, image and labels");
    }
    answers
}

async fn ask(
    client: ContainersClient<Channel>,
    namespace: &str,
    ids: &[(String, u64)],
    upstream: &str,
) -> Result<HashMap<String, Option<Arc<Workload>>>, Failure> {
    let mut client = client.max_decoding_message_size(crate::reconcile::list::MAX_LIST_MESSAGE);
    // The ids are containerd identifiers (checked before they were queued): quoting
    // them needs no escapes.
    let filters = ids.iter().map(|(id, _)| format!("id=={id:?}")).collect();
    let mut request = Request::new(ListContainersRequest { filters });
    // Namespaces were checked by the exchange; one that is no header cannot be asked.
    let header = namespace.parse().map_err(|_| Failure::Other)?;
    request.metadata_mut().insert(NAMESPACE_HEADER, header);
    request.set_timeout(GET_TIMEOUT);
    match tokio::time::timeout(GET_TIMEOUT, client.list(request)).await {
        Ok(Ok(response)) => {
            let found: HashMap<String, Option<Arc<Workload>>> = response
                .into_inner()
                .containers
                .into_iter()
                .map(|c| {
                    let workload = Workload::from_record(&c.image, c.labels).map(Arc::new);
                    (c.id, workload)
                })
                .collect();
            metrics::counter!("eventgate_upstream_enrich_total", "upstream" => upstream.to_owned(), "result" => "fetched")
                .increment(found.len() as u64);
            metrics::counter!("eventgate_upstream_enrich_total", "upstream" => upstream.to_owned(), "result" => "absent")
                .increment((ids.len().saturating_sub(found.len())) as u64);
            Ok(found)
        }
        Ok(Err(status)) if status.code() == Code::Unimplemented => Err(Failure::Unimplemented),
        Ok(Err(status)) => {
            count(upstream, "error");
            tracing::warn!(upstream, namespace, containers = ids.len(), error = %status.message(), code = ?status.code(), "cannot read the containers' records; their events are recorded without pod and image");
            Err(Failure::Other)
        }
        Err(_) => {
            count(upstream, "error");
            tracing::warn!(
                upstream,
                namespace,
                containers = ids.len(),
                "the containers' records did not come within {GET_TIMEOUT:?}; their events are recorded without pod and image"
            );
            Err(Failure::Other)
        }
    }
}

fn count(upstream: &str, result: &'static str) {
    metrics::counter!("eventgate_upstream_enrich_total", "upstream" => upstream.to_owned(), "result" => result)
        .increment(1);
}

#[cfg(test)]
#[path = "enrich_tests.rs"]
mod tests;
