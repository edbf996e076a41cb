//! `[exchange.limits]` on a real gateway: each limit's status code, message and
//! counter, and what check-config says about bad values.

use crate::support;

use std::time::Duration;

use eventgate::proto::containerd::services::events::v1::events_client::EventsClient;
use eventgate::proto::containerd::services::events::v1::{
    ForwardRequest, PublishRequest, SubscribeRequest,
};
use eventgate::proto::containerd::types::Envelope;
use prost_types::{Any, Timestamp};
use support::*;
use tonic::transport::Channel;
use tonic::{Code, Request};

fn publish(bytes: usize) -> Request<PublishRequest> {
    let mut req = Request::new(PublishRequest {
        topic: "/custom/blob".into(),
        event: Some(Any {
            type_url: "example.Blob".into(),
            value: vec![7; bytes],
        }),
    });
    req.metadata_mut()
        .insert("containerd-namespace", "default".parse().expect("header"));
    req
}

fn rejections(gw: &mut Gateway, limit: &str) -> f64 {
    scrape(gw)
        .get("eventgate_limit_rejections_total", &[("limit", limit)])
        .unwrap_or(0.0)
}

fn start(dir: tempfile::TempDir, config: &str) -> Gateway {
    let path = dir.path().join("limits.toml");
    std::fs::write(&path, config).expect("write config");
    Gateway::start_in(dir, &["--config", path_str(&path)])
}

async fn subscribe(
    client: &mut EventsClient<Channel>,
    filters: Vec<String>,
) -> Result<tonic::Streaming<Envelope>, tonic::Status> {
    tokio::time::timeout(DEADLINE, client.subscribe(SubscribeRequest { filters }))
        .await
        .expect("no hang")
        .map(|r| r.into_inner())
}

#[tokio::test]
async fn event_size_subscribers_and_filters_are_limited_with_clear_statuses() {
    let mut gw = start(
        tempfile::tempdir().expect("tempdir"),
        "[exchange.limits]\nmax_event_bytes = \"1KiB\"\nmax_subscribers = 2\n\
         max_filters = 2\nmax_filter_bytes = 40\n",
    );
    let mut client = gw.client().await;

    // Just over: the envelope (topic, namespace, timestamp, payload) is measured.
    let status = client.publish(publish(1000)).await.expect_err("too large");
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(
        status
            .message()
            .contains("more than the 1024 bytes exchange.limits.max_event_bytes allows"),
        "{}",
        status.message()
    );
    assert!(
        status.message().starts_with("event is 10"),
        "{}",
        status.message()
    );
    // Far over: refused by tonic before the body is read, with the same explanation.
    let status = client
        .publish(publish(64 << 10))
        .await
        .expect_err("too large");
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(
        status.message().starts_with("request is 655")
            && status.message().contains("exchange.limits.max_event_bytes"),
        "{}",
        status.message()
    );
    let forward = ForwardRequest {
        envelope: Some(Envelope {
            timestamp: Some(Timestamp {
                seconds: 1_700_000_000,
                nanos: 0,
            }),
            namespace: "default".into(),
            topic: "/custom/blob".into(),
            event: Some(Any {
                type_url: "example.Blob".into(),
                value: vec![1; 2000],
            }),
        }),
    };
    let status = client.forward(forward).await.expect_err("too large");
    assert_eq!(status.code(), Code::InvalidArgument);
    client.publish(publish(900)).await.expect("under the limit");
    assert_eq!(rejections(&mut gw, "max_event_bytes"), 3.0);

    // Filters: count, then length. INVALID_ARGUMENT: the request itself is at fault.
    let three = vec![
        "topic".to_owned(),
        "namespace".to_owned(),
        "event".to_owned(),
    ];
    let status = subscribe(&mut client, three).await.expect_err("3 filters");
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(
        status
            .message()
            .contains("subscription has 3 filters, more than the 2 exchange.limits.max_filters"),
        "{}",
        status.message()
    );
    let long = vec![format!("topic==\"/{}\"", "a".repeat(40))];
    let status = subscribe(&mut client, long).await.expect_err("long filter");
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(
        status
            .message()
            .contains("filter 1 is 50 bytes, more than the 40 exchange.limits.max_filter_bytes"),
        "{}",
        status.message()
    );

    // Subscribers: two fit, the third is RESOURCE_EXHAUSTED, and a place freed is free.
    let first = subscribe(&mut client, vec![]).await.expect("first");
    let _second = subscribe(&mut client, vec![]).await.expect("second");
    let status = subscribe(&mut client, vec![]).await.expect_err("third");
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert!(
        status.message().contains(
            "2 subscribers are connected, as many as exchange.limits.max_subscribers allows"
        ),
        "{}",
        status.message()
    );
    drop(first);
    // Polled on the runtime (not a blocking wait): the client's connection task
    // must run to send the stream's reset.
    let end = std::time::Instant::now() + DEADLINE;
    while scrape(&mut gw).get("eventgate_subscribers", &[]) != Some(1.0) {
        assert!(
            std::time::Instant::now() < end,
            "the cancelled subscriber stayed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    subscribe(&mut client, vec![])
        .await
        .expect("a freed place is taken");

    let scraped = scrape(&mut gw);
    for (limit, count) in [
        ("max_filters", 1.0),
        ("max_filter_bytes", 1.0),
        ("max_subscribers", 1.0),
    ] {
        assert_eq!(
            scraped.get("eventgate_limit_rejections_total", &[("limit", limit)]),
            Some(count),
            "{limit}"
        );
    }
}

#[tokio::test]
async fn a_publish_that_waits_too_long_is_deadline_exceeded() {
    // A forwarder that never delivers (its broker is a closed port) with a one-event
    // queue that blocks publishers for longer than the request timeout. No linger:
    // a batch still filling would take the publishes the queue is meant to hold up.
    let config = "[exchange.limits]\nrequest_timeout = \"300ms\"\n\n\
        [[forwarder]]\nname = \"stuck\"\nkind = \"kafka\"\nbrokers = \"127.0.0.1:1\"\n\
        topic = \"events\"\nqueue = { events = 1, overflow = \"block\", block_timeout = \"60s\" }\n\
        batch = { linger = \"0s\" }\n";
    let mut gw = start(tempfile::tempdir().expect("tempdir"), config);
    let mut client = gw.client().await;
    let mut outcome = Vec::new();
    for i in 0..10 {
        let started = std::time::Instant::now();
        let result = client.publish(exit_request(&format!("c{i}"))).await;
        outcome.push((result, started.elapsed()));
        if outcome.last().is_some_and(|(r, _)| r.is_err()) {
            break;
        }
    }
    let (result, took) = outcome.pop().expect("a call");
    let status = result.expect_err("one publish waits for room until the deadline");
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert!(
        status
            .message()
            .contains("publish did not finish within 300ms (exchange.limits.request_timeout)"),
        "{}",
        status.message()
    );
    assert!(
        took < Duration::from_secs(10),
        "answered at the deadline: {took:?}"
    );
    assert_eq!(rejections(&mut gw, "request_timeout"), 1.0);
}

#[tokio::test]
async fn http2_streams_per_connection_are_limited() {
    let dir = tempfile::tempdir().expect("tempdir");
    let gw = start(dir, "[exchange.limits]\nmax_streams_per_connection = 3\n");
    let stream = tokio::net::UnixStream::connect(&gw.socket)
        .await
        .expect("connect");
    let (mut send, connection) = h2::client::handshake(stream).await.expect("handshake");
    tokio::spawn(connection);
    // The server's SETTINGS arrive with its first frames; a request brings them.
    let request =
        http::Request::post("http://localhost/containerd.services.events.v1.Events/Subscribe")
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .expect("request");
    send = send.ready().await.expect("ready");
    let (response, mut body) = send.send_request(request, false).expect("send");
    body.send_data(bytes::Bytes::from_static(&[0, 0, 0, 0, 0]), true)
        .expect("body");
    let response = tokio::time::timeout(DEADLINE, response)
        .await
        .expect("headers")
        .expect("response");
    assert_eq!(response.status(), 200);
    assert_eq!(send.current_max_send_streams(), 3);

    // Also check-config refuses nonsense, naming the key.
    let bad = tempfile::tempdir().expect("tempdir");
    let path = bad.path().join("bad.toml");
    std::fs::write(&path, "[exchange.limits]\nmax_subscribers = 0\n").expect("write");
    let out = eventgate()
        .arg("check-config")
        .arg(&path)
        .output()
        .expect("check-config");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("`exchange.limits.max_subscribers` must be at least 1"),
        "{stderr}"
    );
}
