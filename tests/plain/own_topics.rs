//! eventgate's own namespace (`eventgate`) and topics (`/eventgate` and under it) are
//! its own: a client's Publish or Forward there is refused with INVALID_ARGUMENT,
//! counted, and never stored, so no publisher can forge a marker or a signed
//! checkpoint. (Another gateway's, taken in by a Kafka source:
//! `src/source/tests.rs`.)

use crate::support;

use eventgate::proto::Registry;
use eventgate::proto::containerd::services::events::v1::{
    ForwardRequest, PublishRequest, SubscribeRequest,
};
use eventgate::proto::containerd::types::Envelope;
use support::audit::wait_stored;
use support::stores::text;
use support::*;
use tonic::{Code, Request};

const NAMESPACE_REFUSED: &str = "namespace \"eventgate\" is reserved for eventgate's own events \
     (markers, signed checkpoints); publish under another namespace: invalid argument";

fn topic_refused(topic: &str) -> String {
    format!(
        "topic {topic:?} is reserved: topics under /eventgate/ are eventgate's own events; \
         publish under another topic: invalid argument"
    )
}

/// A checkpoint as a forger would write it: the shape, without a real signature.
fn checkpoint_any() -> prost_types::Any {
    Registry::global()
        .encode_json(
            "eventgate.events.v1.AuditCheckpoint",
            r#"{"note":"eventgate audit checkpoint v1\nnode node-1\n","node":"node-1"}"#,
        )
        .expect("encode")
}

fn publish_request(namespace: &str, topic: &str) -> Request<PublishRequest> {
    let mut request = Request::new(PublishRequest {
        topic: topic.into(),
        event: Some(checkpoint_any()),
    });
    request
        .metadata_mut()
        .insert("containerd-namespace", namespace.parse().expect("header"));
    request
}

fn forward_request(namespace: &str, topic: &str) -> ForwardRequest {
    ForwardRequest {
        envelope: Some(Envelope {
            timestamp: Some(prost_types::Timestamp::from(std::time::SystemTime::now())),
            namespace: namespace.into(),
            topic: topic.into(),
            event: Some(checkpoint_any()),
        }),
    }
}

/// Publish, Forward and `eventgate publish` into the gateway's namespace or topics
/// are refused with INVALID_ARGUMENT and a message saying why; the gateway goes on
/// serving, and none of them reaches a subscriber or the audit store, while every
/// one is counted under `reason="reserved"`.
#[tokio::test(flavor = "multi_thread")]
async fn clients_cannot_publish_or_forward_eventgates_own_events() {
    let mut gw = Gateway::start(&[]);
    let mut client = gw.client().await;
    let mut stream = client
        .subscribe(SubscribeRequest { filters: vec![] })
        .await
        .expect("subscribe")
        .into_inner();

    let published = [
        ("eventgate", "/tasks/exit", NAMESPACE_REFUSED.to_owned()),
        (
            "eventgate",
            "/eventgate/audit/checkpoint",
            NAMESPACE_REFUSED.to_owned(),
        ),
        (
            "default",
            "/eventgate/audit/checkpoint",
            topic_refused("/eventgate/audit/checkpoint"),
        ),
        ("default", "/eventgate", topic_refused("/eventgate")),
    ];
    for (namespace, topic, message) in &published {
        let status = client
            .publish(publish_request(namespace, topic))
            .await
            .expect_err("refused");
        assert_eq!(status.code(), Code::InvalidArgument, "{namespace} {topic}");
        assert_eq!(status.message(), message, "{namespace} {topic}");
    }
    let forwarded = [
        (
            "eventgate",
            "/eventgate/upstream/disconnected",
            NAMESPACE_REFUSED.to_owned(),
        ),
        (
            "default",
            "/eventgate/audit/checkpoint",
            topic_refused("/eventgate/audit/checkpoint"),
        ),
    ];
    for (namespace, topic, message) in &forwarded {
        let status = client
            .forward(forward_request(namespace, topic))
            .await
            .expect_err("refused");
        assert_eq!(status.code(), Code::InvalidArgument, "{namespace} {topic}");
        assert_eq!(status.message(), message, "{namespace} {topic}");
    }
    let cli = eventgate()
        .args(["publish", "--address", &gw.address(), "-n", "default"])
        .args(["-t", "/eventgate/upstream/connected"])
        .args(["--event-type", "eventgate.events.v1.UpstreamConnected"])
        .args(["--json", r#"{"upstream":"containerd"}"#])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run eventgate publish");
    let stderr = text(&cli.stderr);
    assert_eq!(cli.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "publish failed: InvalidArgument: {}",
            topic_refused("/eventgate/upstream/connected")
        )),
        "{stderr}"
    );

    // Everyone else is served as before; a name that only begins like the gateway's
    // is anyone's.
    client
        .publish(publish_request("default", "/eventgateway/after"))
        .await
        .expect("an ordinary event is taken");
    let first = tokio::time::timeout(DEADLINE, stream.message())
        .await
        .expect("an event within the deadline")
        .expect("stream ok")
        .expect("stream not ended");
    assert_eq!(
        first.topic, "/eventgateway/after",
        "no refused event reached a subscriber"
    );
    let db = gw.dir.path().join("data/audit.db");
    let rows = wait_stored(&db, "the ordinary event stored", |r| {
        r.topic == "/eventgateway/after"
    });
    let topics: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| (r.namespace.as_str(), r.topic.as_str()))
        .collect();
    assert_eq!(
        topics,
        [("default", "/eventgateway/after")],
        "only the ordinary event is stored"
    );

    let refusals = (published.len() + forwarded.len() + 1) as f64;
    let s = scrape(&mut gw);
    assert_eq!(
        s.get("eventgate_events_rejected_total", &[("reason", "reserved")]),
        Some(refusals)
    );
}
