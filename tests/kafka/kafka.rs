//! The `kafka` forwarder against a real Kafka-protocol broker: a tansu broker driven
//! through the real `eventgate serve` binary. Faults against librdkafka's in-process
//! mock cluster are in tests/plain/kafka.rs.

use crate::support;

use std::collections::HashSet;

use eventgate::proto::Registry;
use eventgate::proto::containerd::services::events::v1::PublishRequest;
use eventgate::proto::containerd::types::Envelope;
use prost::Message as _;
use rdkafka::message::Message;
use support::config::Config;
use support::messages::{header, key, per_key, task_exit};
use support::tansu::{Tansu, consume};
use support::*;
use tonic::Request;

// ---------------------------------------------------------------- helpers

fn write_config(dir: &std::path::Path, forwarder: &str) -> String {
    Config::new()
        .forwarder("kafka", "kafka", forwarder)
        .write(dir)
}

fn publish_req(ns: &str, topic: &str, event: prost_types::Any) -> Request<PublishRequest> {
    let mut req = Request::new(PublishRequest {
        topic: topic.into(),
        event: Some(event),
    });
    req.metadata_mut().insert(
        "containerd-namespace",
        ns.parse().expect("namespace header"),
    );
    req
}

// ---------------------------------------------------------------- tansu

/// Three containers' events, interleaved, through the real binary: every event is
/// one message, keyed by container, in publish order per key, with the headers and
/// an Envelope value a consumer relies on. Uses the default idempotent producer:
/// tansu answers InitProducerId, so the default configuration works against it.
#[tokio::test(flavor = "multi_thread")]
async fn tansu_gets_every_event_ordered_per_container() {
    let tansu = Tansu::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(
        dir.path(),
        &format!(
            "brokers = \"{}\"\ntopic = \"containerd-events\"\ncreate_topic = true\npartitions = 3\nreplication_factor = 1\n",
            tansu.brokers()
        ),
    );
    let mut gateway = Gateway::start_in(dir, &["--config", &config]);
    let mut client = gateway.client().await;
    let containers = ["c0", "c1", "c2"];
    let rounds = 10;
    for pid in 0..rounds {
        for c in containers {
            client
                .publish(publish_req("default", "/tasks/exit", task_exit(c, pid)))
                .await
                .expect("publish");
        }
    }
    let brokers = tansu.brokers();
    let messages = tokio::task::spawn_blocking(move || {
        consume(
            &brokers,
            "containerd-events",
            containers.len() * rounds as usize,
        )
    })
    .await
    .expect("consumer task");

    assert_eq!(messages.len(), 30, "exactly one message per event");
    let envelopes: Vec<Envelope> = messages
        .iter()
        .map(|m| Envelope::decode(m.payload().expect("a value")).expect("an Envelope"))
        .collect();
    let pids = per_key(&messages, |m| {
        let envelope = Envelope::decode(m.payload().unwrap_or_default()).expect("envelope");
        let event = Registry::global()
            .decode(envelope.event.as_ref().expect("payload"))
            .expect("decodes");
        event
            .get_field_by_name("pid")
            .and_then(|v| v.as_u32())
            .expect("pid") as u64
    });
    let in_order: Vec<u64> = (0..rounds as u64).collect();
    for c in containers {
        assert_eq!(
            pids[&format!("default/{c}")],
            in_order,
            "order of {c}'s events"
        );
    }
    let mut ids = HashSet::new();
    // This process published every event over the unix socket.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let publisher = serde_json::json!({ "uid": uid, "gid": gid, "pid": std::process::id() });
    for (m, envelope) in messages.iter().zip(&envelopes) {
        let header_json: serde_json::Value =
            serde_json::from_str(&header(m, "publisher").expect("a publisher header"))
                .expect("JSON");
        assert_eq!(header_json, publisher);
        assert_eq!(envelope.namespace, "default");
        assert_eq!(envelope.topic, "/tasks/exit");
        let type_url = &envelope.event.as_ref().expect("payload").type_url;
        assert!(
            type_url.ends_with("containerd.events.TaskExit"),
            "{type_url}"
        );
        assert_eq!(header(m, "topic").as_deref(), Some("/tasks/exit"));
        assert_eq!(header(m, "namespace").as_deref(), Some("default"));
        assert_eq!(header(m, "type_url").as_ref(), Some(type_url));
        assert!(header(m, "seq").expect("seq").parse::<u64>().is_ok());
        assert!(
            ids.insert(header(m, "event_id").expect("event_id")),
            "event ids are unique"
        );
    }
    let status = gateway.terminate();
    assert!(
        status.success(),
        "clean shutdown: {}",
        gateway.stderr_text()
    );
}

/// A topic template routes by namespace and topic (sanitized), topics are created
/// with the default partitions and the broker's replication factor, and JSON values
/// carry the decoded event with the gateway's id and seq. Also the non-idempotent
/// producer (`acks = 1`).
#[tokio::test(flavor = "multi_thread")]
async fn tansu_json_values_on_templated_topics() {
    let tansu = Tansu::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(
        dir.path(),
        &format!(
            "brokers = [\"{}\"]\ntopic = \"ev.{{namespace}}.{{topic}}\"\ncreate_topic = true\nvalue_format = \"json\"\nidempotence = false\nacks = 1\n",
            tansu.brokers()
        ),
    );
    let gateway = Gateway::start_in(dir, &["--config", &config]);
    let mut client = gateway.client().await;
    let image = Registry::global()
        .encode_json(
            "containerd.services.images.v1.ImageCreate",
            r#"{"name":"docker.io/library/busybox:latest"}"#,
        )
        .expect("encode");
    client
        .publish(publish_req("k8s.io", "/images/create", image))
        .await
        .expect("publish");
    client
        .publish(publish_req("team-a", "/tasks/exit", task_exit("web", 42)))
        .await
        .expect("publish");

    let brokers = tansu.brokers();
    let (images, tasks) = tokio::task::spawn_blocking(move || {
        (
            consume(&brokers, "ev.k8s.io.images", 1),
            consume(&brokers, "ev.team-a.tasks", 1),
        )
    })
    .await
    .expect("consumer task");
    assert_eq!((images.len(), tasks.len()), (1, 1));

    let image: serde_json::Value =
        serde_json::from_slice(images[0].payload().expect("value")).expect("json value");
    assert_eq!(key(&images[0]), "k8s.io/docker.io/library/busybox:latest");
    assert_eq!(image["namespace"], "k8s.io");
    assert_eq!(image["topic"], "/images/create");
    assert_eq!(image["event"]["name"], "docker.io/library/busybox:latest");
    assert_eq!(
        image["id"].as_str(),
        header(&images[0], "event_id").as_deref(),
        "the value's id is the event_id header"
    );
    assert_eq!(
        image["seq"].to_string(),
        header(&images[0], "seq").expect("seq")
    );

    let task: serde_json::Value =
        serde_json::from_slice(tasks[0].payload().expect("value")).expect("json value");
    assert_eq!(key(&tasks[0]), "team-a/web");
    assert_eq!(task["event"]["container_id"], "web");
    assert_eq!(task["event"]["pid"], 42);
    assert_eq!(task["type_url"], "containerd.events.TaskExit");
}

/// Without `create_topic`, a missing topic stops the start with a message that
/// names the topic and the fix.
#[test]
fn tansu_missing_topic_stops_the_start() {
    let tansu = Tansu::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(
        dir.path(),
        &format!("brokers = \"{}\"\ntopic = \"not-there\"\n", tansu.brokers()),
    );
    let mut child = eventgate()
        .args(["serve", "--config", &config, "--data-dir"])
        .arg(dir.path().join("data"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn eventgate");
    let stderr = Lines::new(child.stderr.take().expect("stderr"));
    let status = wait_exit(&mut child, DEADLINE);
    let mut stderr = stderr;
    let text = stderr.drain();
    assert!(!status.success(), "start must fail: {text}");
    assert!(text.contains("\"not-there\""), "names the topic: {text}");
    assert!(
        text.contains("create_topic = true"),
        "says how to fix: {text}"
    );
}

// ---------------------------------------------------------------- mock cluster

/// A broker replaced by an empty one at the same address (its topics and the
/// producer ids it gave out gone, as after losing its disk) is recovered from
/// without restarting eventgate: the topic is created again, the idempotent
/// producer whose id the broker forgot is recreated, and the events published
/// meanwhile are delivered.
#[tokio::test(flavor = "multi_thread")]
async fn an_emptied_broker_at_the_same_address_is_recovered_from_without_a_restart() {
    let mut tansu = Tansu::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let config = Config::new()
        .kafka(
            "kafka",
            &tansu.brokers(),
            "events",
            1,
            "message_timeout = \"3s\"",
        )
        .write(dir.path());
    let mut gateway = Gateway::start_in(dir, &["--config", &config]);
    let mut client = gateway.client().await;
    client
        .publish(exit_request("before"))
        .await
        .expect("publish");
    assert_eq!(consume(&tansu.brokers(), "events", 1).len(), 1);

    tansu.replace_empty();
    for id in ["after-1", "after-2", "after-3"] {
        client.publish(exit_request(id)).await.expect("publish");
    }
    // The new broker holds what was published after it came, in order, once each.
    let messages = consume(&tansu.brokers(), "events", 3);
    let ids: Vec<String> = messages
        .iter()
        .map(|m| {
            let envelope = Envelope::decode(m.payload().expect("a value")).expect("an Envelope");
            let any = envelope.event.expect("an event");
            let exit = eventgate::proto::containerd::events::TaskExit::decode(any.value.as_slice())
                .expect("a TaskExit");
            exit.container_id
        })
        .collect();
    assert_eq!(
        ids,
        ["after-1", "after-2", "after-3"],
        "{}",
        gateway.stderr_text()
    );
    assert!(gateway.terminate().success());
}
