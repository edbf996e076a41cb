//! Upstream behaviour against in-process Events servers on temporary sockets: one that
//! answers at once (as eventgate does) and one that, like containerd, sends no response
//! headers until its first event. Tests against a real containerd live in
//! tests/containerd/upstream.rs.

mod durable;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::{Stream, StreamExt};
use prost::Message;
use tokio_stream::wrappers::UnixListenerStream;
use tokio_util::sync::CancellationToken;
use tonic::transport::Server;
use tonic::{Request, Response, Status};

use super::settings::ReconnectSettings;
use super::*;
use crate::event::{Event, Source};
use crate::exchange::{EventsService, ExchangeParts, ExchangeSettings, Incoming, Subscription};
use crate::filter::Filter;
use crate::proto::containerd::events::TaskExit;
use crate::proto::containerd::services::events::v1::events_server::{Events, EventsServer};
use crate::proto::containerd::services::events::v1::{
    ForwardRequest, PublishRequest, SubscribeRequest,
};
use crate::proto::containerd::types::Envelope;
use crate::proto::eventgate::events::v1::{UpstreamConnected, UpstreamDisconnected};
use crate::testing;

pub(super) const DEADLINE: Duration = Duration::from_secs(10);

/// An Events server on a unix socket, stopped by `stop`.
pub(super) struct Server_ {
    cancel: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Server_ {
    pub(super) fn start(router: tonic::transport::server::Router, path: &Path) -> Self {
        let _ = std::fs::remove_file(path);
        let listener = tokio::net::UnixListener::bind(path).unwrap();
        let cancel = CancellationToken::new();
        let stop = cancel.clone().cancelled_owned();
        let task = tokio::spawn(async move {
            let _ = router
                .serve_with_incoming_shutdown(UnixListenerStream::new(listener), stop)
                .await;
        });
        Self { cancel, task }
    }

    pub(super) async fn stop(self) {
        self.cancel.cancel();
        let _ = self.task.await;
    }
}

pub(super) fn spec(path: &Path) -> UpstreamSpec {
    let mut spec = UpstreamSpec::new(path.to_str().unwrap());
    spec.name = "node".into();
    spec.reconnect = ReconnectSettings {
        initial: Duration::from_millis(10),
        max: Duration::from_millis(100),
        stable: Duration::from_secs(10),
    };
    spec.connect_timeout = Duration::from_secs(2);
    spec
}

fn task_exit(container: &str, status: u32) -> prost_types::Any {
    prost_types::Any {
        type_url: "containerd.events.TaskExit".into(),
        value: TaskExit {
            container_id: container.into(),
            id: container.into(),
            pid: 42,
            exit_status: status,
            exited_at: None,
        }
        .encode_to_vec(),
    }
}

/// The next event a subscription delivers, within the deadline.
pub(super) async fn next(sub: &mut Subscription) -> Arc<Event> {
    tokio::time::timeout(DEADLINE, sub.next())
        .await
        .expect("an event within the deadline")
        .expect("subscription open")
        .expect("no error")
}

fn decode<M: Message + Default>(event: &Event) -> M {
    M::decode(event.envelope.event.as_ref().unwrap().value.as_slice()).unwrap()
}

pub(super) fn socket(dir: &tempfile::TempDir, name: &str) -> PathBuf {
    dir.path().join(name)
}

/// The downstream gateway's exchange, with a subscriber watching everything.
fn downstream() -> (Exchange, Subscription) {
    let exchange = Exchange::new(ExchangeSettings::default(), ExchangeParts::default());
    let sub = exchange
        .subscribe(Filter::parse_all::<&str>(&[]).unwrap())
        .unwrap();
    (exchange, sub)
}

/// An eventgate exchange serving as the upstream on `path`.
pub(super) fn serve_exchange(path: &Path) -> (Exchange, Server_) {
    let upstream = Exchange::new(ExchangeSettings::default(), ExchangeParts::default());
    let service = EventsService::new(upstream.clone()).into_server();
    (
        upstream,
        Server_::start(Server::builder().add_service(service), path),
    )
}

/// Starts the upstreams and waits until the connected marker arrived and the state
/// says so.
async fn subscribed(
    specs: &[UpstreamSpec],
    exchange: &Exchange,
    sub: &mut Subscription,
) -> Upstreams {
    let upstreams = Upstreams::start(specs, exchange, &state_dir(), None);
    assert_eq!(
        next(sub).await.envelope.topic,
        "/eventgate/upstream/connected"
    );
    connected(&upstreams).await;
    upstreams
}

pub(super) async fn connected(upstreams: &Upstreams) -> UpstreamStatus {
    upstreams
        .wait_for("node", DEADLINE, |s| {
            matches!(s, UpstreamState::Connected { .. })
        })
        .await
        .expect("upstream connected within the deadline")
}

#[tokio::test]
async fn upstream_events_enter_the_exchange_as_sent_after_a_connected_marker() {
    let dir = tempfile::tempdir().unwrap();
    let path = socket(&dir, "up.sock");
    let (upstream, server) = serve_exchange(&path);
    let (exchange, mut sub) = downstream();
    let before = SystemTime::now();
    let mut upstreams = Upstreams::start(&[spec(&path)], &exchange, &state_dir(), None);

    let marker = next(&mut sub).await;
    assert_eq!(marker.envelope.namespace, "eventgate");
    assert_eq!(marker.envelope.topic, "/eventgate/upstream/connected");
    assert_eq!(marker.identity.source, Source::Internal);
    let up: UpstreamConnected = decode(&marker);
    assert_eq!((up.upstream.as_str(), up.attempts), ("node", 1));
    assert_eq!(up.address, path.to_str().unwrap());
    // The first connection closes the gap that began when the gateway started.
    let gap_start = SystemTime::try_from(up.gap_started_at.unwrap()).unwrap();
    assert!(gap_start >= before && gap_start <= SystemTime::now());
    connected(&upstreams).await;
    assert_eq!(upstreams.readiness(), Ok(()));

    let sent = testing::accept(
        &upstream,
        Incoming::publish(
            Some("default"),
            "/tasks/exit".into(),
            Some(task_exit("c1", 3)),
        ),
    )
    .await
    .unwrap();
    let got = next(&mut sub).await;
    // The envelope exactly as the upstream distributed it; our own seq and id.
    assert_eq!(got.envelope, sent.envelope);
    assert_eq!(got.identity.source, Source::Upstream("node".into()));
    assert_eq!(got.seq, marker.seq + 1);
    assert_ne!(got.identity.id, sent.identity.id);

    upstreams.stop(DEADLINE).await;
    let down = next(&mut sub).await;
    assert_eq!(down.envelope.topic, "/eventgate/upstream/disconnected");
    let down: UpstreamDisconnected = decode(&down);
    assert_eq!(down.reason, "eventgate is stopping");
    assert_eq!(down.events_received, 1);
    assert_eq!(upstreams.statuses()[0].state, UpstreamState::Stopped);
    server.stop().await;
}

#[tokio::test]
async fn a_broken_subscription_is_recorded_and_resumed() {
    let dir = tempfile::tempdir().unwrap();
    let path = socket(&dir, "up.sock");
    let (upstream, server) = serve_exchange(&path);
    let (exchange, mut sub) = downstream();
    let mut upstreams = subscribed(&[spec(&path)], &exchange, &mut sub).await;

    // The upstream goes away: its subscription ends with UNAVAILABLE, then the
    // socket is gone while it is down.
    upstream.close();
    server.stop().await;
    let _ = std::fs::remove_file(&path);
    let down = next(&mut sub).await;
    assert_eq!(down.envelope.topic, "/eventgate/upstream/disconnected");
    let down_payload: UpstreamDisconnected = decode(&down);
    assert!(
        down_payload.reason.contains("Unavailable"),
        "{}",
        down_payload.reason
    );
    let not_ready = upstreams.readiness().unwrap_err();
    assert!(
        not_ready[0].starts_with("upstream node (") && not_ready[0].contains("not connected"),
        "{not_ready:?}"
    );

    // Back: a new daemon on the same socket.
    let (upstream, server) = serve_exchange(&path);
    let up = next(&mut sub).await;
    assert_eq!(up.envelope.topic, "/eventgate/upstream/connected");
    let up_payload: UpstreamConnected = decode(&up);
    // The gap is exactly the one the disconnected marker opened.
    assert_eq!(up_payload.gap_started_at, down_payload.disconnected_at);
    assert!(up_payload.attempts >= 1);
    connected(&upstreams).await;
    testing::accept(
        &upstream,
        Incoming::publish(
            Some("default"),
            "/tasks/exit".into(),
            Some(task_exit("c2", 0)),
        ),
    )
    .await
    .unwrap();
    let got = next(&mut sub).await;
    assert_eq!(decode::<TaskExit>(&got).container_id, "c2");
    upstreams.stop(DEADLINE).await;
    server.stop().await;
}

#[tokio::test]
async fn waits_for_an_upstream_that_is_not_there_yet() {
    let dir = tempfile::tempdir().unwrap();
    let path = socket(&dir, "later.sock");
    let (exchange, mut sub) = downstream();
    let mut upstreams = Upstreams::start(&[spec(&path)], &exchange, &state_dir(), None);
    let status = upstreams
        .wait_for(
            "node",
            DEADLINE,
            |s| matches!(s, UpstreamState::Connecting { attempts, .. } if *attempts >= 3),
        )
        .await
        .expect("several failed attempts");
    let text = status.to_string();
    assert!(
        text.contains("later.sock") && text.contains("last error"),
        "{text}"
    );
    assert!(upstreams.readiness().is_err());

    let (_upstream, server) = serve_exchange(&path);
    let marker = next(&mut sub).await;
    assert_eq!(marker.envelope.topic, "/eventgate/upstream/connected");
    assert!(decode::<UpstreamConnected>(&marker).attempts > 3);
    connected(&upstreams).await;
    upstreams.stop(DEADLINE).await;
    server.stop().await;
}

/// Behaves like containerd's Subscribe: the response (and its headers) only starts
/// with the first event, and it passes the filters it was given back to the test.
#[derive(Clone)]
struct Silent {
    exchange: Exchange,
    filters: tokio::sync::mpsc::UnboundedSender<Vec<String>>,
}

type EnvelopeStream = std::pin::Pin<Box<dyn Stream<Item = Result<Envelope, Status>> + Send>>;

#[tonic::async_trait]
impl Events for Silent {
    async fn publish(&self, _: Request<PublishRequest>) -> Result<Response<()>, Status> {
        Err(Status::unimplemented("test server"))
    }

    async fn forward(&self, _: Request<ForwardRequest>) -> Result<Response<()>, Status> {
        Err(Status::unimplemented("test server"))
    }

    type SubscribeStream = EnvelopeStream;

    async fn subscribe(
        &self,
        request: Request<SubscribeRequest>,
    ) -> Result<Response<Self::SubscribeStream>, Status> {
        let filters = request.into_inner().filters;
        let _ = self.filters.send(filters.clone());
        let mut sub = self
            .exchange
            .subscribe(Filter::parse_all(&filters).unwrap())
            .unwrap();
        let first = sub.next().await;
        let stream = futures::stream::iter(first)
            .chain(sub)
            .map(|item| match item {
                Ok(event) => Ok(event.envelope.clone()),
                Err(end) => Err(Status::new(end.code(), end.to_string())),
            });
        Ok(Response::new(Box::pin(stream)))
    }
}

#[tokio::test]
async fn an_upstream_that_sends_no_headers_counts_as_connected_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = socket(&dir, "silent.sock");
    let upstream = Exchange::new(ExchangeSettings::default(), ExchangeParts::default());
    let (filters_tx, mut filters_rx) = tokio::sync::mpsc::unbounded_channel();
    let service = Silent {
        exchange: upstream.clone(),
        filters: filters_tx,
    };
    let server = Server_::start(
        Server::builder().add_service(EventsServer::new(service)),
        &path,
    );
    let (exchange, mut sub) = downstream();
    let mut with_filters = spec(&path);
    with_filters.filters = vec!["topic==\"/tasks/exit\"".into()];
    let mut upstreams = Upstreams::start(&[with_filters], &exchange, &state_dir(), None);

    // Connected and recorded while the upstream has not answered anything.
    let marker = next(&mut sub).await;
    assert_eq!(marker.envelope.topic, "/eventgate/upstream/connected");
    connected(&upstreams).await;
    let sent_filters = tokio::time::timeout(DEADLINE, filters_rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(sent_filters, ["topic==\"/tasks/exit\""]);

    // The upstream applies the filters: only the exit crosses.
    for (topic, container) in [("/tasks/start", "c0"), ("/tasks/exit", "c1")] {
        testing::accept(
            &upstream,
            Incoming::publish(Some("default"), topic.into(), Some(task_exit(container, 1))),
        )
        .await
        .unwrap();
    }
    let got = next(&mut sub).await;
    assert_eq!(got.envelope.topic, "/tasks/exit");
    assert_eq!(decode::<TaskExit>(&got).container_id, "c1");
    upstreams.stop(DEADLINE).await;
    assert_eq!(
        next(&mut sub).await.envelope.topic,
        "/eventgate/upstream/disconnected"
    );
    server.stop().await;
}

#[tokio::test]
async fn an_upstream_envelope_eventgate_cannot_accept_is_skipped_not_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let path = socket(&dir, "up.sock");
    let (upstream, server) = serve_exchange(&path);
    let (exchange, mut sub) = downstream();
    let mut upstreams = subscribed(&[spec(&path)], &exchange, &mut sub).await;

    // An envelope without a timestamp (containerd 2.x can forward such) and a good one.
    let bad = testing::envelope()
        .payload(Some(task_exit("bad", 1)))
        .build();
    testing::accept(&upstream, Incoming::checked(Source::Forward, bad))
        .await
        .unwrap();
    let good = testing::envelope()
        .now()
        .payload(Some(task_exit("good", 0)))
        .build();
    testing::accept(&upstream, Incoming::checked(Source::Forward, good))
        .await
        .unwrap();
    let got = next(&mut sub).await;
    assert_eq!(decode::<TaskExit>(&got).container_id, "good");
    assert!(upstreams.statuses()[0].is_connected());
    upstreams.stop(DEADLINE).await;
    server.stop().await;
}

#[tokio::test]
async fn several_upstreams_feed_one_exchange_and_readiness_names_the_missing_one() {
    let dir = tempfile::tempdir().unwrap();
    let (exchange, mut sub) = downstream();
    let mut servers = Vec::new();
    let mut specs = Vec::new();
    let mut daemons = Vec::new();
    for name in ["a", "b"] {
        let path = socket(&dir, &format!("{name}.sock"));
        let daemon = Exchange::new(ExchangeSettings::default(), ExchangeParts::default());
        servers.push(Server_::start(
            Server::builder().add_service(EventsService::new(daemon.clone()).into_server()),
            &path,
        ));
        let mut spec = spec(&path);
        spec.name = name.into();
        specs.push(spec);
        daemons.push(daemon);
    }
    let mut upstreams = Upstreams::start(&specs, &exchange, &state_dir(), None);
    for name in ["a", "b"] {
        upstreams
            .wait_for(name, DEADLINE, |s| {
                matches!(s, UpstreamState::Connected { .. })
            })
            .await
            .expect("connected");
    }
    assert_eq!(upstreams.readiness(), Ok(()));
    for _ in 0..2 {
        assert_eq!(
            next(&mut sub).await.envelope.topic,
            "/eventgate/upstream/connected"
        );
    }
    for (daemon, container) in daemons.iter().zip(["from-a", "from-b"]) {
        testing::accept(
            daemon,
            Incoming::publish(
                Some("default"),
                "/tasks/exit".into(),
                Some(task_exit(container, 0)),
            ),
        )
        .await
        .unwrap();
        let got = next(&mut sub).await;
        let expected = &container[5..];
        assert_eq!(got.identity.source, Source::Upstream(expected.into()));
        assert_eq!(decode::<TaskExit>(&got).container_id, container);
    }

    daemons[1].close();
    servers.pop().unwrap().stop().await;
    upstreams
        .wait_for("b", DEADLINE, |s| {
            matches!(s, UpstreamState::Connecting { .. })
        })
        .await
        .expect("b notices");
    let problems = upstreams.readiness().unwrap_err();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].starts_with("upstream b ("), "{problems:?}");
    upstreams.stop(DEADLINE).await;
    servers.pop().unwrap().stop().await;
}

/// A data directory for the upstreams' state snapshots. These upstreams are other
/// exchanges, which have no state to list, so no reconcile completes and nothing is
/// written there.
fn state_dir() -> std::path::PathBuf {
    std::env::temp_dir().join("eventgate-upstream-unit-tests")
}
