//! Load on a real gateway: 8 publishers and 16 subscribers at once, one subscriber
//! that never reads (a raw HTTP/2 stream whose body is never polled), and
//! subscribers that disconnect mid-stream. Every healthy subscriber must get every
//! event, in order per publisher; the never-reading one is cut off with
//! RESOURCE_EXHAUSTED after a bounded queue; the gateway's peak RSS stays under
//! `RSS_BOUND`.

use crate::support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use eventgate::proto::containerd::services::events::v1::SubscribeRequest;
use eventgate::proto::containerd::services::events::v1::events_client::EventsClient;
use prost_types::Any;
use support::*;
use tonic::transport::Channel;

const PUBLISHERS: usize = 8;
const EVENTS_PER_PUBLISHER: usize = 2000;
const SUBSCRIBERS: usize = 16;
const QUITTERS: usize = 4;
/// Events a subscriber may fall behind; the never-reading one must pass it.
const QUEUE: usize = 8192;
/// Peak resident memory allowed for the gateway process (VmHWM).
const RSS_BOUND_KIB: u64 = 128 * 1024;

fn event(publisher: usize, i: usize) -> Option<Any> {
    Some(
        eventgate::proto::Registry::global()
            .encode_json(
                "containerd.events.TaskOOM",
                &format!(
                    r#"{{"container_id":"p{publisher}-i{i:06}-{}"}}"#,
                    "x".repeat(160)
                ),
            )
            .expect("encode"),
    )
}

/// (publisher, index) from an event made by [`event`].
fn origin(any: &Any) -> (usize, usize) {
    let text = String::from_utf8_lossy(&any.value);
    let start = text.find('p').expect("container id");
    let mut parts = text[start + 1..].split('-');
    let publisher = parts
        .next()
        .and_then(|p| p.parse().ok())
        .expect("publisher");
    let index = parts
        .next()
        .and_then(|i| i.strip_prefix('i'))
        .and_then(|i| i.parse().ok())
        .expect("index");
    (publisher, index)
}

fn proc_status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// Reads `limit` events (all when `None`) and returns their origins.
async fn read_events(
    mut client: EventsClient<Channel>,
    limit: Option<usize>,
) -> Vec<(usize, usize)> {
    let mut stream = client
        .subscribe(SubscribeRequest { filters: vec![] })
        .await
        .expect("subscribe")
        .into_inner();
    let want = limit.unwrap_or(PUBLISHERS * EVENTS_PER_PUBLISHER);
    let mut seen = Vec::with_capacity(want);
    while seen.len() < want {
        let envelope = tokio::time::timeout(Duration::from_secs(30), stream.message())
            .await
            .expect("events keep coming")
            .expect("a healthy subscriber is never cut off")
            .expect("stream open");
        seen.push(origin(envelope.event.as_ref().expect("payload")));
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_publishers_and_subscribers_a_stuck_one_and_quitters() {
    let queue = QUEUE.to_string();
    let mut gw = Gateway::start(&["--subscriber-queue", &queue]);
    let pid = gw.child.id();
    let started = Instant::now();

    // The subscriber that never reads: a raw HTTP/2 stream, headers received, body
    // never polled, so no flow-control credit is ever returned.
    let raw = tokio::net::UnixStream::connect(&gw.socket)
        .await
        .expect("connect");
    let (send, connection) = h2::client::handshake(raw).await.expect("handshake");
    tokio::spawn(connection);
    let mut send = send.ready().await.expect("ready");
    let request =
        http::Request::post("http://localhost/containerd.services.events.v1.Events/Subscribe")
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .expect("request");
    let (response, mut request_body) = send.send_request(request, false).expect("send");
    request_body
        .send_data(bytes::Bytes::from_static(&[0, 0, 0, 0, 0]), true)
        .expect("empty SubscribeRequest");
    let stuck = tokio::time::timeout(DEADLINE, response)
        .await
        .expect("headers at once")
        .expect("response");
    assert_eq!(stuck.status(), 200);

    // Healthy subscribers, four streams per connection, and quitters that leave
    // after 500 events (dropping their connection mid-stream).
    let mut healthy = Vec::new();
    for n in 0..SUBSCRIBERS {
        let client = if n % 4 == 0 {
            gw.client().await
        } else {
            healthy_client_of(&healthy)
        };
        healthy.push((client.clone(), tokio::spawn(read_events(client, None))));
    }
    let quitters: Vec<_> = (0..QUITTERS)
        .map(|_| {
            let address = gw.address();
            tokio::spawn(async move {
                let client = eventgate::client::connect(&address, Duration::from_secs(5))
                    .await
                    .expect("connect");
                read_events(client, Some(500)).await.len()
            })
        })
        .collect();
    let end = Instant::now() + DEADLINE;
    while scrape(&mut gw).get("eventgate_subscribers", &[])
        != Some((1 + SUBSCRIBERS + QUITTERS) as f64)
    {
        assert!(Instant::now() < end, "subscribers did not all register");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let publishers: Vec<_> = (0..PUBLISHERS)
        .map(|p| {
            let address = gw.address();
            tokio::spawn(async move {
                let mut client = eventgate::client::connect(&address, Duration::from_secs(5))
                    .await
                    .expect("connect");
                for i in 0..EVENTS_PER_PUBLISHER {
                    let mut req = tonic::Request::new(
                        eventgate::proto::containerd::services::events::v1::PublishRequest {
                            topic: "/load/oom".into(),
                            event: event(p, i),
                        },
                    );
                    req.metadata_mut()
                        .insert("containerd-namespace", "load".parse().expect("header"));
                    client.publish(req).await.expect("publish");
                }
            })
        })
        .collect();
    for publisher in publishers {
        publisher.await.expect("publisher");
    }
    for quitter in quitters {
        assert_eq!(quitter.await.expect("quitter"), 500);
    }
    for (n, (_, task)) in healthy.into_iter().enumerate() {
        let seen = task.await.expect("subscriber");
        let mut next: HashMap<usize, usize> = HashMap::new();
        for (publisher, index) in seen {
            let expected = next.entry(publisher).or_default();
            assert_eq!(
                index, *expected,
                "subscriber {n}: publisher {publisher}'s events in order, none missing"
            );
            *expected += 1;
        }
        assert!(
            (0..PUBLISHERS).all(|p| next.get(&p) == Some(&EVENTS_PER_PUBLISHER)),
            "subscriber {n} got every event: {next:?}"
        );
    }
    let elapsed = started.elapsed();

    let scraped = scrape(&mut gw);
    assert_eq!(
        scraped.get("eventgate_subscribers_cut_off_total", &[]),
        Some(1.0),
        "only the never-reading subscriber was cut off"
    );
    let peak = proc_status_kib(pid, "VmHWM:");
    let now = proc_status_kib(pid, "VmRSS:");
    eprintln!(
        "load: {} events x {SUBSCRIBERS} subscribers in {elapsed:?}; gateway RSS peak {} MiB, now {} MiB",
        PUBLISHERS * EVENTS_PER_PUBLISHER,
        peak / 1024,
        now / 1024
    );
    assert!(
        peak < RSS_BOUND_KIB,
        "gateway peak RSS {peak} KiB exceeds {RSS_BOUND_KIB} KiB"
    );

    // Now read the stuck stream: what was queued for it, then RESOURCE_EXHAUSTED.
    let mut body = stuck.into_body();
    let mut bytes = 0usize;
    while let Some(chunk) = tokio::time::timeout(DEADLINE, body.data())
        .await
        .expect("the queued events drain")
    {
        let chunk = chunk.expect("data");
        bytes += chunk.len();
        let _ = body.flow_control().release_capacity(chunk.len());
    }
    let trailers = tokio::time::timeout(DEADLINE, body.trailers())
        .await
        .expect("trailers")
        .expect("trailers ok")
        .expect("a status");
    assert_eq!(
        trailers.get("grpc-status").and_then(|v| v.to_str().ok()),
        Some("8"),
        "RESOURCE_EXHAUSTED: {trailers:?}"
    );
    // Its queue was bounded: at most QUEUE events plus what HTTP/2 had in flight.
    let per_event = 300;
    assert!(
        bytes < (QUEUE + 1000) * per_event,
        "the stuck subscriber got {bytes} bytes, more than its bounded queue"
    );
    assert!(elapsed < Duration::from_secs(60), "took {elapsed:?}");
}

/// A subscriber's connection and the task reading its stream.
type Reader = (
    EventsClient<Channel>,
    tokio::task::JoinHandle<Vec<(usize, usize)>>,
);

fn healthy_client_of(healthy: &[Reader]) -> EventsClient<Channel> {
    healthy.last().expect("a connection").0.clone()
}
