//! The `kafka` forwarder's value formats and keys as a consumer in another language
//! sees them: the real `eventgate serve` produces to a tansu broker, kafka-python
//! (`tests/support/consume.py`) reads the topics back. Bad values refused:
//! tests/plain/kafka_formats.rs.

use crate::support;

use std::collections::BTreeMap;

use base64::Engine as _;
use eventgate::proto::Registry;
use eventgate::proto::containerd::services::events::v1::PublishRequest;
use eventgate::proto::containerd::types::Envelope;
use prost::Message as _;
use serde_json::Value;
use support::config::Config;
use support::pyconsumer::{PyMessage, consume};
use support::tansu::Tansu;
use support::*;
use tonic::Request;

/// The forwarders' own `node` option: only the fallback for events of unknown node,
/// which a running gateway never produces (it gives each event its own node).
const FALLBACK_NODE: &str = "test-node";
/// The gateway's `node` (`serve --node`), which every event it captures carries.
const NODE: &str = "web-1";

/// One `[[forwarder]]` of kind `kafka` per (name, topic, extra keys).
fn write_config(dir: &std::path::Path, brokers: &str, forwarders: &[(&str, &str, &str)]) -> String {
    forwarders
        .iter()
        .fold(Config::new(), |config, (name, topic, extra)| {
            config.kafka(
                name,
                brokers,
                topic,
                3,
                &format!("node = \"{FALLBACK_NODE}\"\n{extra}"),
            )
        })
        .write(dir)
}

fn publish_req(ns: &str, topic: &str, event: prost_types::Any) -> Request<PublishRequest> {
    let mut req = Request::new(PublishRequest {
        topic: topic.into(),
        event: Some(event),
    });
    req.metadata_mut()
        .insert("containerd-namespace", ns.parse().expect("namespace"));
    req
}

fn task_exit(container: &str, pid: u32) -> prost_types::Any {
    Registry::global()
        .encode_json(
            "containerd.events.TaskExit",
            &format!(r#"{{"container_id":"{container}","pid":{pid},"exit_status":3}}"#),
        )
        .expect("encode")
}

/// A payload no registry knows: it must still reach consumers whole.
fn custom_payload() -> prost_types::Any {
    prost_types::Any {
        type_url: "example.com/acme.Custom".into(),
        value: vec![8, 1, 18, 2, b'h', b'i'],
    }
}

/// Each message by its `event_id` header, which every format carries.
fn by_event_id(messages: Vec<PyMessage>) -> BTreeMap<String, PyMessage> {
    messages
        .into_iter()
        .map(|m| (m.header("event_id").expect("an event_id header"), m))
        .collect()
}

/// One TaskExit and one undecodable event through four forwarders, one per value
/// format: kafka-python reads each topic, and every format says the same about the
/// same event (matched by `event_id`), readable without eventgate's protos except
/// the protobuf format, which is the accepted Envelope. Every format names the node
/// the gateway captured the event on (`serve --node`): the `node` header, the JSON
/// value's `node`, the CloudEvents `source` authority and `node` extension; the
/// forwarder's own `node` option is not used for them.
#[tokio::test(flavor = "multi_thread")]
async fn tansu_every_value_format_reads_back_with_kafka_python() {
    let tansu = Tansu::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(
        dir.path(),
        &tansu.brokers(),
        &[
            ("proto", "fmt-protobuf", ""),
            ("json", "fmt-json", "value_format = \"json\""),
            (
                "binary",
                "fmt-binary",
                "value_format = \"cloudevents_binary\"",
            ),
            (
                "structured",
                "fmt-structured",
                "value_format = \"cloudevents_structured\"",
            ),
        ],
    );
    let mut gateway = Gateway::start_in(dir, &["--config", &config, "--node", NODE]);
    let mut client = gateway.client().await;
    client
        .publish(publish_req("default", "/tasks/exit", task_exit("web", 42)))
        .await
        .expect("publish the TaskExit");
    client
        .publish(publish_req("team-a", "/custom/thing", custom_payload()))
        .await
        .expect("publish the undecodable event");

    let brokers = tansu.brokers();
    let [proto, json, binary, structured] = tokio::task::spawn_blocking(move || {
        ["fmt-protobuf", "fmt-json", "fmt-binary", "fmt-structured"]
            .map(|topic| by_event_id(consume(&brokers, topic, 2)))
    })
    .await
    .expect("consumer task");
    for topic in [&proto, &json, &binary, &structured] {
        assert_eq!(topic.len(), 2, "two events, one message each");
    }
    assert!(
        [&json, &binary, &structured]
            .iter()
            .all(|t| t.keys().eq(proto.keys())),
        "the same events in every format"
    );

    for (id, p) in &proto {
        let envelope = Envelope::decode(p.value.as_deref().expect("a value")).expect("an Envelope");
        assert_eq!(p.header("namespace").as_ref(), Some(&envelope.namespace));
        assert_eq!(p.header("topic").as_ref(), Some(&envelope.topic));
        for topic in [&proto, &json, &binary, &structured] {
            assert_eq!(
                topic[id].header("node").as_deref(),
                Some(NODE),
                "node header"
            );
        }
        let j = json[id].json();
        assert_eq!(j["id"], id.as_str());
        assert_eq!(j["node"], NODE);
        assert_eq!(j["namespace"], envelope.namespace.as_str());
        assert_eq!(j["topic"], envelope.topic.as_str());
        let time = j["timestamp"].as_str().expect("a timestamp");
        let seq = p.header("seq").expect("seq");
        let source = format!("eventgate://{NODE}/publish");
        let decodable = envelope.topic == "/tasks/exit";

        // Binary: the attributes as ce_ headers, the data alone as the value.
        let b = &binary[id];
        let expected_type = if decodable {
            "containerd.events.TaskExit"
        } else {
            "acme.Custom"
        };
        let subject = if decodable { "default/web" } else { "team-a" };
        for (header, expected) in [
            ("ce_specversion", "1.0"),
            ("ce_id", id.as_str()),
            ("ce_source", source.as_str()),
            ("ce_type", expected_type),
            ("ce_subject", subject),
            ("ce_time", time),
            ("ce_namespace", envelope.namespace.as_str()),
            ("ce_topic", envelope.topic.as_str()),
            ("ce_seq", seq.as_str()),
            ("ce_origin", "live"),
            ("ce_node", NODE),
        ] {
            assert_eq!(b.header(header).as_deref(), Some(expected), "{header}");
        }
        assert_eq!(
            b.header("event_id").as_ref(),
            Some(id),
            "dedupe header kept"
        );

        // Structured: one JSON object with the same attributes.
        let s = &structured[id];
        assert_eq!(
            s.header("content-type").as_deref(),
            Some("application/cloudevents+json; charset=UTF-8")
        );
        let object = s.json();
        for (attribute, expected) in [
            ("specversion", "1.0"),
            ("id", id.as_str()),
            ("source", source.as_str()),
            ("type", expected_type),
            ("subject", subject),
            ("time", time),
            ("namespace", envelope.namespace.as_str()),
            ("topic", envelope.topic.as_str()),
            ("seq", seq.as_str()),
            ("origin", "live"),
            ("node", NODE),
        ] {
            assert_eq!(object[attribute], expected, "{attribute}");
        }

        if decodable {
            let payload = Registry::global()
                .decode(envelope.event.as_ref().expect("a payload"))
                .expect("a TaskExit");
            let pid = payload.get_field_by_name("pid").and_then(|v| v.as_u32());
            assert_eq!(pid, Some(42));
            assert_eq!(j["event"]["container_id"], "web");
            assert_eq!(j["event"]["pid"], 42);
            assert_eq!(
                b.header("content-type").as_deref(),
                Some("application/json")
            );
            let data: Value =
                serde_json::from_slice(b.value.as_deref().expect("data")).expect("JSON data");
            assert_eq!(data, j["event"], "the json format's payload JSON");
            assert_eq!(object["datacontenttype"], "application/json");
            assert_eq!(object["data"], j["event"]);
            assert_eq!(object.get("data_base64"), None);
        } else {
            let raw = custom_payload().value;
            assert_eq!(envelope.event.as_ref().map(|a| &a.value), Some(&raw));
            assert_eq!(j["event"], Value::Null);
            assert_eq!(
                b.header("content-type").as_deref(),
                Some("application/protobuf")
            );
            assert_eq!(
                b.value.as_ref(),
                Some(&raw),
                "the payload bytes as they came"
            );
            assert_eq!(object["datacontenttype"], "application/protobuf");
            let data = base64::engine::general_purpose::STANDARD
                .decode(object["data_base64"].as_str().expect("data_base64"))
                .expect("base64");
            assert_eq!(data, raw);
            assert_eq!(object.get("data"), None);
        }
    }
    let status = gateway.terminate();
    assert!(
        status.success(),
        "clean shutdown: {}",
        gateway.stderr_text()
    );
}

/// The default key keeps each container's events on one partition, in publish
/// order; `key = "none"` sends messages without a key.
#[tokio::test(flavor = "multi_thread")]
async fn tansu_keys_keep_a_containers_order_or_are_left_out() {
    let tansu = Tansu::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(
        dir.path(),
        &tansu.brokers(),
        &[
            ("object", "keyed-object", ""),
            ("unkeyed", "keyed-none", "key = \"none\""),
        ],
    );
    let mut gateway = Gateway::start_in(dir, &["--config", &config]);
    let mut client = gateway.client().await;
    let containers = ["c0", "c1", "c2", "c3"];
    let rounds = 8u32;
    for pid in 0..rounds {
        for c in containers {
            client
                .publish(publish_req("default", "/tasks/exit", task_exit(c, pid)))
                .await
                .expect("publish");
        }
    }
    let total = containers.len() * rounds as usize;
    let brokers = tansu.brokers();
    let (keyed, unkeyed) = tokio::task::spawn_blocking(move || {
        (
            consume(&brokers, "keyed-object", total),
            consume(&brokers, "keyed-none", total),
        )
    })
    .await
    .expect("consumer task");
    assert_eq!((keyed.len(), unkeyed.len()), (total, total));

    // Messages come in (partition, offset) order: per key, the order Kafka keeps.
    let mut pids: BTreeMap<String, (Vec<i32>, Vec<u64>)> = BTreeMap::new();
    for m in &keyed {
        let envelope = Envelope::decode(m.value.as_deref().expect("a value")).expect("envelope");
        let payload = Registry::global()
            .decode(envelope.event.as_ref().expect("a payload"))
            .expect("decodes");
        let pid = payload
            .get_field_by_name("pid")
            .and_then(|v| v.as_u32())
            .expect("pid");
        let entry = pids.entry(m.key_text().expect("a key")).or_default();
        entry.0.push(m.partition);
        entry.1.push(u64::from(pid));
    }
    let in_order: Vec<u64> = (0..u64::from(rounds)).collect();
    for c in containers {
        let (partitions, order) = &pids[&format!("default/{c}")];
        assert!(
            partitions.iter().all(|p| *p == partitions[0]),
            "{c} on one partition: {partitions:?}"
        );
        assert_eq!(order, &in_order, "{c}'s events in publish order");
    }
    assert_eq!(pids.len(), containers.len(), "one key per container");
    assert!(
        unkeyed.iter().all(|m| m.key.is_none()),
        "key = \"none\": null keys"
    );
    let status = gateway.terminate();
    assert!(
        status.success(),
        "clean shutdown: {}",
        gateway.stderr_text()
    );
}
