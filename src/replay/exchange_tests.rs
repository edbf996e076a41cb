//! `--to-address` with several Forwards in flight, against an in-process Events
//! server that holds each call until a given number are in flight together (or a
//! short time passed), and records the order calls reach it.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::Stream;
use tokio::sync::Notify;
use tokio_stream::wrappers::UnixListenerStream;
use tokio_util::sync::CancellationToken;
use tonic::transport::Server;
use tonic::{Request, Response, Status};

use super::ExchangeTarget;
use crate::event::{Event, Source};
use crate::forward::{Batch, Forwarder};
use crate::proto::containerd::services::events::v1::events_server::{Events, EventsServer};
use crate::proto::containerd::services::events::v1::{
    ForwardRequest, PublishRequest, SubscribeRequest,
};
use crate::proto::containerd::types::Envelope;
use crate::testing;

/// How long a call waits for company before it is answered alone.
const ALONE: Duration = Duration::from_millis(300);

#[derive(Default)]
struct Seen {
    in_flight: usize,
    most: usize,
    /// The container of each call, in the order the calls arrived.
    arrived: Vec<String>,
    /// The position in the batch of each call (its timestamp's seconds), likewise.
    positions: Vec<i64>,
    /// Containers whose next call is refused once, with UNAVAILABLE.
    refuse: HashSet<String>,
}

struct Holding {
    /// Calls are answered once this many are in flight together.
    together: usize,
    seen: Mutex<Seen>,
    changed: Notify,
}

fn container(envelope: &Envelope) -> String {
    let event = testing::event(0)
        .source(Source::Forward)
        .envelope(envelope.clone())
        .build();
    let message = event.decoded().expect("a known payload");
    match message.get_field_by_name("container_id").as_deref() {
        Some(prost_reflect::Value::String(id)) => id.clone(),
        _ => String::new(),
    }
}

type EnvelopeStream = std::pin::Pin<Box<dyn Stream<Item = Result<Envelope, Status>> + Send>>;

#[tonic::async_trait]
impl Events for Arc<Holding> {
    async fn publish(&self, _: Request<PublishRequest>) -> Result<Response<()>, Status> {
        Err(Status::unimplemented("test server"))
    }

    async fn forward(&self, request: Request<ForwardRequest>) -> Result<Response<()>, Status> {
        let envelope = request.into_inner().envelope.unwrap_or_default();
        let who = container(&envelope);
        {
            let mut seen = self.seen.lock().unwrap();
            if seen.refuse.remove(&who) {
                return Err(Status::unavailable("refused once by the test"));
            }
            seen.in_flight += 1;
            seen.most = seen.most.max(seen.in_flight);
            seen.arrived.push(who);
            let position = envelope.timestamp.map_or(-1, |t| t.seconds);
            seen.positions.push(position);
        }
        self.changed.notify_waiters();
        let enough = async {
            loop {
                let notified = self.changed.notified();
                if self.seen.lock().unwrap().in_flight >= self.together {
                    break;
                }
                notified.await;
            }
        };
        // A call that never gets company (the window or the order forbids it) is
        // answered after ALONE.
        let _ = tokio::time::timeout(ALONE, enough).await;
        self.seen.lock().unwrap().in_flight -= 1;
        Ok(Response::new(()))
    }

    type SubscribeStream = EnvelopeStream;

    async fn subscribe(
        &self,
        _: Request<SubscribeRequest>,
    ) -> Result<Response<Self::SubscribeStream>, Status> {
        Err(Status::unimplemented("test server"))
    }
}

struct Harness {
    server: Arc<Holding>,
    target: ExchangeTarget,
    stop: CancellationToken,
    _dir: tempfile::TempDir,
}

async fn harness(in_flight: usize, together: usize) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.sock");
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    let server = Arc::new(Holding {
        together,
        seen: Mutex::default(),
        changed: Notify::new(),
    });
    let stop = CancellationToken::new();
    let router = Server::builder().add_service(EventsServer::new(server.clone()));
    let shutdown = stop.clone().cancelled_owned();
    tokio::spawn(async move {
        let _ = router
            .serve_with_incoming_shutdown(UnixListenerStream::new(listener), shutdown)
            .await;
    });
    let address = path.to_str().unwrap().to_owned();
    let client = crate::client::connect(&address, Duration::from_secs(5))
        .await
        .unwrap();
    Harness {
        server,
        target: ExchangeTarget::new(address, client, in_flight),
        stop,
        _dir: dir,
    }
}

/// A batch of task exits for these containers, in this order; each event's
/// timestamp is its position in the batch, in seconds.
fn batch(containers: &[&str]) -> Batch {
    let events: Vec<Arc<Event>> = containers
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let json = format!(r#"{{"container_id":"{c}"}}"#);
            let topic = "/tasks/exit";
            match c.is_empty() {
                // TaskOOM without a container: no object, a barrier.
                true => testing::event(i as u64)
                    .at(i as i64)
                    .topic("/tasks/oom")
                    .json("containerd.events.TaskOOM", "{}")
                    .build(),
                false => testing::event(i as u64)
                    .at(i as i64)
                    .topic(topic)
                    .json("containerd.events.TaskExit", &json)
                    .build(),
            }
        })
        .map(Arc::new)
        .collect();
    Batch::new(events, 0)
}

impl Harness {
    fn seen(&self) -> (usize, Vec<String>) {
        let seen = self.server.seen.lock().unwrap();
        (seen.most, seen.arrived.clone())
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

fn of(arrived: &[String], container: &str) -> usize {
    arrived.iter().filter(|c| *c == container).count()
}

#[tokio::test]
async fn different_containers_are_in_flight_together_up_to_the_window() {
    let h = harness(4, 4).await;
    let names = ["a", "b", "c", "d", "e", "f", "g", "h"];
    h.target.send(&batch(&names)).await.unwrap();
    let (most, mut arrived) = h.seen();
    assert_eq!(most, 4);
    arrived.sort();
    assert_eq!(arrived, names);
}

#[tokio::test]
async fn one_containers_events_go_one_after_the_other_in_order() {
    let h = harness(4, 2).await;
    let containers = ["a", "a", "a", "b", "a", "b", "b"];
    h.target.send(&batch(&containers)).await.unwrap();
    let (most, arrived) = h.seen();
    // Never more than the two containers at once, though the window has room.
    assert_eq!(most, 2);
    let positions = h.server.seen.lock().unwrap().positions.clone();
    let of_container = |c: &str| -> Vec<i64> {
        let both = arrived.iter().zip(&positions);
        both.filter(|(x, _)| *x == c).map(|(_, p)| *p).collect()
    };
    assert_eq!(of_container("a"), [0, 1, 2, 4], "a's events in their order");
    assert_eq!(of_container("b"), [3, 5, 6], "b's events in their order");
    // The first b went while a's events were still queued.
    let first_b = arrived.iter().position(|c| c == "b").unwrap();
    assert!(first_b < 3, "{arrived:?}");
}

#[tokio::test]
async fn an_event_of_no_known_container_goes_alone() {
    let h = harness(4, 2).await;
    h.target.send(&batch(&["a", "", "b"])).await.unwrap();
    let (most, arrived) = h.seen();
    assert_eq!(most, 1);
    assert_eq!(arrived, ["a", "", "b"]);
}

#[tokio::test]
async fn one_in_flight_keeps_the_batch_order_exactly() {
    let h = harness(1, 2).await;
    let containers = ["c", "a", "b", "a"];
    h.target.send(&batch(&containers)).await.unwrap();
    let (most, arrived) = h.seen();
    assert_eq!(most, 1);
    assert_eq!(arrived, containers);
}

#[tokio::test]
async fn a_retried_batch_sends_only_what_was_not_taken() {
    let h = harness(4, 3).await;
    h.server.seen.lock().unwrap().refuse.insert("b".into());
    let containers = ["a", "b", "c", "d", "b"];
    let batch = batch(&containers);
    let error = h.target.send(&batch).await.unwrap_err();
    assert!(error.to_string().contains("Unavailable"), "{error}");
    // a went through before b; the second b never started, because the first did
    // not arrive.
    assert_eq!(h.target.taken(&batch), 1);
    let (_, first) = h.seen();
    assert_eq!(of(&first, "b"), 0);

    h.target.send(&batch).await.unwrap();
    assert_eq!(h.target.taken(&batch), containers.len());
    let (_, all) = h.seen();
    for c in ["a", "c", "d"] {
        assert_eq!(of(&all, c), 1, "{c} once: {all:?}");
    }
    assert_eq!(of(&all, "b"), 2);
}
