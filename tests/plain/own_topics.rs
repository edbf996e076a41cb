//! eventgate's own namespace (`eventgate`) and topics (`/eventgate` and under it) are
//! its own: a client's Publish or Forward there is refused with INVALID_ARGUMENT,
//! counted, and never stored, so no publisher can forge a marker or a signed
//! checkpoint; and `replay --to-address` skips such stored events, saying so, where
//! `--to-forwarder` carries them. (Another gateway's, taken in by a Kafka source:
//! `src/source/tests.rs`.)

use crate::support;

use std::path::Path;

use eventgate::event::{Event, EventId, Source};
use eventgate::proto::Registry;
use eventgate::proto::containerd::services::events::v1::{
    ForwardRequest, PublishRequest, SubscribeRequest,
};
use eventgate::proto::containerd::types::Envelope;
use serde_json::Value;
use support::audit::{stored, wait_stored};
use support::config::Config;
use support::stores::{NODE, T0, run, sample_event, text, write_store};
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

/// A stored marker, checkpoint or correlated aggregate: eventgate's own.
fn own_event(seq: u64, namespace: &str, topic: &str, type_name: &str, json: &str) -> Event {
    let any = Registry::global()
        .encode_json(type_name, json)
        .expect("encode");
    Event::new(
        seq,
        EventId::generate(),
        Source::Internal,
        Envelope {
            timestamp: Some(prost_types::Timestamp {
                seconds: T0 + seq as i64 * 600,
                nanos: 0,
            }),
            namespace: namespace.into(),
            topic: topic.into(),
            event: Some(any),
        },
    )
    .with_node(Some(NODE.into()))
}

/// Containers c1, c3 and c6 among a marker, a checkpoint and a correlated aggregate.
fn store_with_own_events(dir: &Path) -> std::path::PathBuf {
    std::fs::create_dir_all(dir).expect("mkdir");
    let db = dir.join("audit.db");
    write_store(
        &db,
        &[
            sample_event(1, "default"),
            own_event(
                2,
                "eventgate",
                "/eventgate/upstream/connected",
                "eventgate.events.v1.UpstreamConnected",
                r#"{"upstream":"containerd","attempts":2}"#,
            ),
            sample_event(3, "k8s.io"),
            own_event(
                4,
                "eventgate",
                "/eventgate/audit/checkpoint",
                "eventgate.events.v1.AuditCheckpoint",
                r#"{"note":"eventgate audit checkpoint v1\n","node":"host-a"}"#,
            ),
            own_event(
                5,
                "default",
                "/eventgate/correlated",
                "eventgate.events.v1.Correlated",
                r#"{"count":3}"#,
            ),
            sample_event(6, "default"),
        ],
    );
    db
}

/// `replay --to-address` sends everything but eventgate's own events, which the
/// target would refuse, and says how many it skipped; `--to-forwarder` sends them
/// all, as a backfill must.
#[test]
fn a_replay_to_another_exchange_skips_eventgates_own_events_and_says_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path().join("src");
    let db = store_with_own_events(&src);
    let second = Gateway::start(&[]);
    let out = run(&[
        "replay",
        "--db",
        path_str(&db),
        "--to-address",
        &second.address(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let summary = text(&out.stdout);
    assert!(summary.contains("replayed 3 events"), "{summary}");
    assert!(
        summary.contains(
            "eventgate's own events (namespace eventgate, topics under /eventgate/) are not \
             forwarded: the target refuses them; 3 skipped"
        ),
        "{summary}"
    );
    assert!(summary.contains("6 selected in all"), "{summary}");
    let received = second.dir.path().join("data/audit.db");
    let rows = wait_stored(&received, "the last event replayed", |r| {
        r.container() == Some("c6")
    });
    let containers: Vec<Option<&str>> = rows.iter().map(|r| r.container()).collect();
    assert_eq!(containers, [Some("c1"), Some("c3"), Some("c6")]);
    let state_dir = src.join("replay");
    let state_file = std::fs::read_dir(&state_dir)
        .expect("the replay's state directory")
        .map(|e| e.expect("entry").path())
        .find(|p| p.extension().is_some_and(|x| x == "json"))
        .expect("a state file");
    let state: Value =
        serde_json::from_slice(&std::fs::read(&state_file).expect("read state")).expect("JSON");
    assert_eq!(
        (state["sent"].as_u64(), state["own_skipped"].as_u64()),
        (Some(3), Some(3))
    );
    assert!(stored(&received).iter().all(|r| r.namespace != "eventgate"));

    let config = Config::new()
        .toml(&format!(
            "data_dir = {:?}\n",
            path_str(&dir.path().join("out"))
        ))
        .file("archive", "replayed.jsonl", "")
        .write_to(&dir.path().join("replay.toml"));
    let out = run(&[
        "replay",
        "--db",
        path_str(&db),
        "--to-forwarder",
        "archive",
        "--config",
        path_str(&config),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let summary = text(&out.stdout);
    assert!(summary.contains("replayed 6 events"), "{summary}");
    assert!(!summary.contains("own events"), "{summary}");
    let lines = std::fs::read_to_string(dir.path().join("out/replayed.jsonl")).expect("read");
    let topics: Vec<String> = lines
        .lines()
        .map(|l| {
            let line: Value = serde_json::from_str(l).expect("JSON");
            line["topic"].as_str().expect("topic").to_owned()
        })
        .collect();
    assert_eq!(
        topics,
        [
            "/tasks/exit",
            "/eventgate/upstream/connected",
            "/tasks/start",
            "/eventgate/audit/checkpoint",
            "/eventgate/correlated",
            "/tasks/start"
        ]
    );
}
