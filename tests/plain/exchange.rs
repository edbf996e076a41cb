//! The exchange as a client sees it over the unix socket: status codes and messages,
//! pass-through, ordering, slow subscribers, sockets and shutdown.

use crate::support;

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use eventgate::proto::containerd::services::events::v1::events_client::EventsClient;
use eventgate::proto::containerd::services::events::v1::{
    ForwardRequest, PublishRequest, SubscribeRequest,
};
use eventgate::proto::containerd::types::Envelope;
use prost_types::{Any, Timestamp};
use support::*;
use tonic::transport::Channel;
use tonic::{Code, Request, Streaming};

fn publish_req(ns: Option<&str>, topic: &str, event: Option<Any>) -> Request<PublishRequest> {
    let mut req = Request::new(PublishRequest {
        topic: topic.into(),
        event,
    });
    if let Some(ns) = ns {
        req.metadata_mut()
            .insert("containerd-namespace", ns.parse().expect("header"));
    }
    req
}

async fn subscribe(client: &mut EventsClient<Channel>, filters: &[&str]) -> Streaming<Envelope> {
    let filters = filters.iter().map(|f| f.to_string()).collect();
    tokio::time::timeout(
        Duration::from_secs(5),
        client.subscribe(SubscribeRequest { filters }),
    )
    .await
    .expect("response headers arrive before any event")
    .expect("subscribe")
    .into_inner()
}

async fn next(stream: &mut Streaming<Envelope>) -> Envelope {
    tokio::time::timeout(DEADLINE, stream.message())
        .await
        .expect("an event within the deadline")
        .expect("stream ok")
        .expect("stream not ended")
}

#[tokio::test]
async fn subscribe_is_live_before_the_first_event_and_publish_reaches_it() {
    let gw = Gateway::start(&[]);
    let mut client = gw.client().await;
    // `subscribe` returning at all proves the headers came at once (containerd would
    // block here until an event arrives).
    let mut stream = subscribe(&mut client, &[]).await;
    client
        .publish(publish_req(Some("default"), "/tasks/oom", task_oom("c1")))
        .await
        .expect("publish");
    let env = next(&mut stream).await;
    assert_eq!(env.namespace, "default");
    assert_eq!(env.topic, "/tasks/oom");
    assert_eq!(
        env.event,
        task_oom("c1"),
        "the Any passes through untouched"
    );
    let ts = env.timestamp.expect("server sets the timestamp");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64;
    assert!(
        (now - ts.seconds).abs() < 60,
        "timestamp is the server's clock"
    );
}

#[tokio::test]
async fn bad_input_gets_containerds_codes_and_the_gateway_keeps_serving() {
    let gw = Gateway::start(&[]);
    let mut client = gw.client().await;
    let mut healthy = subscribe(&mut client, &[]).await;

    let cases: Vec<(Request<PublishRequest>, Code, &str)> = vec![
        (
            publish_req(None, "/a", task_oom("x")),
            Code::FailedPrecondition,
            "failed publishing event: namespace is required: failed precondition",
        ),
        (
            publish_req(Some(""), "/a", task_oom("x")),
            Code::FailedPrecondition,
            "namespace is required",
        ),
        (
            publish_req(Some("-bad"), "/a", task_oom("x")),
            Code::InvalidArgument,
            r#"namespace validation: identifier "-bad" must match"#,
        ),
        (
            publish_req(Some("default"), "no-slash", task_oom("x")),
            Code::InvalidArgument,
            r#"envelope topic "no-slash": must start with '/': invalid argument"#,
        ),
        (
            publish_req(Some("default"), "/", task_oom("x")),
            Code::InvalidArgument,
            "must have at least one component",
        ),
        (
            publish_req(Some("default"), "/tasks/?", task_oom("x")),
            Code::InvalidArgument,
            r#"failed validation on component "?""#,
        ),
    ];
    for (req, code, text) in cases {
        let status = client.publish(req).await.expect_err("rejected");
        assert_eq!(status.code(), code, "{}", status.message());
        assert!(
            status.message().contains(text),
            "{:?} lacks {text:?}",
            status.message()
        );
    }

    let status = client
        .forward(ForwardRequest { envelope: None })
        .await
        .expect_err("no envelope");
    assert_eq!(status.code(), Code::InvalidArgument);
    let no_ts = Envelope {
        timestamp: None,
        namespace: "default".into(),
        topic: "/x".into(),
        event: task_oom("x"),
    };
    let status = client
        .forward(ForwardRequest {
            envelope: Some(no_ts),
        })
        .await
        .expect_err("no timestamp");
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(
        status
            .message()
            .contains("timestamp must be set on forwarded event")
    );

    let status = client
        .subscribe(SubscribeRequest {
            filters: vec!["topic==/tasks/exit".into()],
        })
        .await
        .expect_err("bad filter");
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(
        status
            .message()
            .contains("filters: parse error: [topic== >|/|< tasks/exit]"),
        "{}",
        status.message()
    );

    // A request that is not protobuf at all.
    let mut raw = tonic::client::Grpc::new(
        eventgate::client::connect_channel(&gw.address(), Duration::from_secs(5))
            .await
            .expect("channel"),
    );
    raw.ready().await.expect("ready");
    let status = raw
        .unary::<_, (), _>(
            Request::new(vec![0xffu8, 0xff, 0xff]),
            "/containerd.services.events.v1.Events/Publish"
                .parse()
                .expect("path"),
            RawCodec,
        )
        .await
        .expect_err("garbage request");
    assert_eq!(status.code(), Code::Internal, "{status:?}");

    // Garbage *inside* the Any is not the exchange's business: it passes through, as in
    // containerd, but event.* filters cannot see into it.
    let garbage = Some(Any {
        type_url: "containerd.events.TaskOOM".into(),
        value: vec![0xff, 0xff, 0xff],
    });
    let mut by_field = subscribe(
        &mut client,
        &[r#"event.container_id~=".""#, r#"topic=="/done""#],
    )
    .await;
    client
        .publish(publish_req(Some("default"), "/garbage", garbage.clone()))
        .await
        .expect("accepted");
    client
        .publish(publish_req(Some("default"), "/done", task_oom("end")))
        .await
        .expect("accepted");
    let env = next(&mut healthy).await;
    assert_eq!((env.topic.as_str(), env.event), ("/garbage", garbage));
    assert_eq!(next(&mut healthy).await.topic, "/done");
    assert_eq!(
        next(&mut by_field).await.topic,
        "/done",
        "the undecodable event never matches an event.* selector"
    );
}

#[tokio::test]
async fn forward_keeps_namespace_and_timestamp_and_filters_select() {
    let gw = Gateway::start(&[]);
    let mut client = gw.client().await;
    let mut all = subscribe(&mut client, &[]).await;
    let mut other_ns = subscribe(&mut client, &["namespace==other"]).await;
    let mut tasks = subscribe(&mut client, &[r#"topic=="/tasks/*""#]).await;
    let env = Envelope {
        timestamp: Some(Timestamp {
            seconds: 1_600_000_000,
            nanos: 42,
        }),
        namespace: "other".into(),
        topic: "/containers/delete".into(),
        event: task_oom("c9"),
    };
    client
        .forward(ForwardRequest {
            envelope: Some(env.clone()),
        })
        .await
        .expect("forward");
    client
        .publish(publish_req(Some("default"), "/tasks/oom", task_oom("c1")))
        .await
        .expect("publish");
    assert_eq!(next(&mut all).await, env, "distributed exactly as received");
    assert_eq!(next(&mut all).await.topic, "/tasks/oom");
    assert_eq!(next(&mut other_ns).await, env);
    assert_eq!(next(&mut tasks).await.topic, "/tasks/oom");
}

#[tokio::test]
async fn concurrent_publishers_one_order_for_every_subscriber() {
    let gw = Gateway::start(&[]);
    let mut client = gw.client().await;
    let mut a = subscribe(&mut client, &[]).await;
    let mut b = subscribe(&mut client, &[]).await;
    let mut tasks = Vec::new();
    for p in 0..4 {
        let mut c = gw.client().await;
        tasks.push(tokio::spawn(async move {
            for i in 0..100 {
                c.publish(publish_req(
                    Some("default"),
                    "/t",
                    task_oom(&format!("p{p}-{i}")),
                ))
                .await
                .expect("publish");
            }
        }));
    }
    for t in tasks {
        t.await.expect("publisher");
    }
    let (mut seen_a, mut seen_b) = (Vec::new(), Vec::new());
    for _ in 0..400 {
        seen_a.push(next(&mut a).await.event);
        seen_b.push(next(&mut b).await.event);
    }
    assert_eq!(seen_a, seen_b, "both subscribers see the same order");
    for p in 0..4 {
        let mine: Vec<_> = seen_a
            .iter()
            .filter(|e| {
                e.as_ref()
                    .is_some_and(|a| String::from_utf8_lossy(&a.value).contains(&format!("p{p}-")))
            })
            .collect();
        assert_eq!(mine.len(), 100);
        let expected: Vec<_> = (0..100).map(|i| task_oom(&format!("p{p}-{i}"))).collect();
        assert!(
            mine.iter().zip(&expected).all(|(x, y)| *x == y),
            "per-publisher order kept"
        );
    }
}

#[tokio::test]
async fn a_stalled_subscriber_is_cut_off_and_does_not_slow_a_healthy_one() {
    let gw = Gateway::start(&["--subscriber-queue", "64"]);
    let mut client = gw.client().await;
    let mut stalled_client = gw.client().await;
    let mut stalled = subscribe(&mut stalled_client, &[]).await;
    let mut healthy = subscribe(&mut client, &[]).await;

    // ~2 KB events: 6 MB in all, well past the 2 MiB of HTTP/2 flow-control credit a
    // client grants per stream, so the stalled stream really backs up into its queue.
    const N: usize = 3000;
    fn padded(i: usize) -> String {
        format!("e{i}-{}", "x".repeat(2000))
    }
    let publisher = {
        let mut c = gw.client().await;
        tokio::spawn(async move {
            for i in 0..N {
                c.publish(publish_req(Some("default"), "/t", task_oom(&padded(i))))
                    .await
                    .expect("publishing never blocks on a slow subscriber");
            }
        })
    };
    for i in 0..N {
        let env = next(&mut healthy).await;
        assert_eq!(
            env.event,
            task_oom(&padded(i)),
            "healthy subscriber gets every event in order"
        );
    }
    publisher.await.expect("publisher");

    // Now read the stalled one: what was queued, then a clear RESOURCE_EXHAUSTED.
    let mut got = 0;
    let status = loop {
        match tokio::time::timeout(DEADLINE, stalled.message())
            .await
            .expect("no hang")
        {
            Ok(Some(_)) => got += 1,
            Ok(None) => panic!("ended without a status after {got} events"),
            Err(status) => break status,
        }
    };
    assert!(
        got < N,
        "the stalled subscriber was cut off early ({got} events)"
    );
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert!(
        status.message().contains("fell more than 64 events behind"),
        "{}",
        status.message()
    );
}

#[tokio::test]
async fn sigterm_ends_subscriptions_and_removes_the_socket() {
    let mut gw = Gateway::start(&[]);
    let mode = std::fs::metadata(&gw.socket)
        .expect("socket")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o660);
    let mut client = gw.client().await;
    let mut stream = subscribe(&mut client, &[]).await;
    let status = gw.terminate();
    assert!(status.success(), "clean exit: {status}");
    let end = tokio::time::timeout(DEADLINE, stream.message())
        .await
        .expect("stream ends");
    assert_eq!(
        end.expect_err("ends with a status").code(),
        Code::Unavailable
    );
    assert!(!gw.socket.exists(), "socket removed on shutdown");
}

#[test]
fn a_live_socket_is_never_stolen_and_a_stale_one_is_replaced() {
    let mut first = Gateway::start(&[]);
    // Another data directory (the first one's is locked), the same socket path.
    let other = tempfile::tempdir().expect("tempdir");
    let out = eventgate()
        .arg("serve")
        .arg("--data-dir")
        .arg(other.path())
        .arg("--socket")
        .arg(&first.socket)
        .output()
        .expect("second serve");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("is in use by a running process"),
        "{stderr}"
    );
    assert!(first.socket.exists(), "the live socket is untouched");

    first.kill9();
    assert!(first.socket.exists(), "SIGKILL leaves a stale socket file");
    let dir = std::mem::replace(&mut first.dir, tempfile::tempdir().expect("tempdir"));
    let second = Gateway::start_in(dir, &[]);
    assert!(std::os::unix::net::UnixStream::connect(&second.socket).is_ok());
}

#[tokio::test]
async fn tcp_listener_is_loopback_only() {
    let mut gw = Gateway::start(&["--listen", "127.0.0.1:0"]);
    let addr = gw.tcp_addr().to_string();
    let mut tcp = eventgate::client::connect(&addr, Duration::from_secs(5))
        .await
        .expect("tcp");
    let mut stream = subscribe(&mut tcp, &[]).await;
    let mut unix = gw.client().await;
    unix.publish(publish_req(Some("default"), "/x", task_oom("c")))
        .await
        .expect("publish");
    assert_eq!(next(&mut stream).await.topic, "/x");

    let out = eventgate()
        .args(["serve", "--listen", "0.0.0.0:7338", "--data-dir"])
        .arg(gw.dir.path().join("other"))
        .output()
        .expect("serve");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("not a loopback address"), "{stderr}");
}

/// Sends raw bytes as a request body, to test undecodable requests.
#[derive(Clone, Copy)]
struct RawCodec;

impl tonic::codec::Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = ();
    type Encoder = RawCodec;
    type Decoder = RawCodec;
    fn encoder(&mut self) -> Self::Encoder {
        RawCodec
    }
    fn decoder(&mut self) -> Self::Decoder {
        RawCodec
    }
}

impl tonic::codec::Encoder for RawCodec {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn encode(
        &mut self,
        item: Vec<u8>,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        use bytes::BufMut;
        dst.put_slice(&item);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawCodec {
    type Item = ();
    type Error = tonic::Status;
    fn decode(&mut self, _: &mut tonic::codec::DecodeBuf<'_>) -> Result<Option<()>, tonic::Status> {
        Ok(Some(()))
    }
}
