//! `eventgate replay` into a tansu broker: the selected events, with their ids. The
//! rest: tests/plain/replay.rs.

use crate::support;

use std::collections::HashMap;

use eventgate::event::Event;
use eventgate::proto::containerd::types::Envelope;
use support::stores::*;
use support::*;

/// The backfill: a time range and a filter replayed into a real broker through the
/// configured kafka forwarder; the messages are exactly the selected events, in
/// order, with their original ids, seqs and nodes in the headers and envelopes as
/// stored.
#[tokio::test(flavor = "multi_thread")]
async fn kafka_is_backfilled_with_the_selected_events_and_their_ids() {
    use prost::Message as _;
    use rdkafka::message::{Headers, Message};
    let tansu = support::tansu::Tansu::start();
    let dir = tempfile::tempdir().unwrap();
    let db = sample_store(&dir.path().join("src"), 50);
    let config = dir.path().join("kafka.toml");
    std::fs::write(
        &config,
        format!(
            "data_dir = {:?}\n[[forwarder]]\nname = \"kafka\"\nkind = \"kafka\"\nbrokers = \"{}\"\n\
             topic = \"backfill\"\ncreate_topic = true\npartitions = 1\nreplication_factor = 1\n",
            path_str(&dir.path().join("data")),
            tansu.brokers()
        ),
    )
    .unwrap();
    let selection = [
        "--since",
        "2024-05-01T11:00:00Z",
        "--until",
        "2024-05-01T16:00:00+00:00",
        r#"topic=="/tasks/exit""#,
        "namespace==k8s.io",
    ];
    let expected = query_json(&db, &selection);
    assert!(expected.len() >= 5);
    let args: Vec<String> = [
        &["replay", "--db", path_str(&db), "--to-forwarder", "kafka"][..],
        &["--config", path_str(&config), "--batch", "4"],
        &selection,
    ]
    .concat()
    .iter()
    .map(|s| s.to_string())
    .collect();
    let out = tokio::task::spawn_blocking(move || eventgate().args(&args).output().unwrap())
        .await
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));

    let brokers = tansu.brokers();
    let count = expected.len();
    let messages =
        tokio::task::spawn_blocking(move || support::tansu::consume(&brokers, "backfill", count))
            .await
            .unwrap();
    assert_eq!(messages.len(), expected.len(), "exactly the selection");
    let originals: HashMap<String, Event> = stored(&db)
        .into_iter()
        .map(|s| (s.event.identity.id.to_string(), s.event))
        .collect();
    for (message, want) in messages.iter().zip(&expected) {
        let header = |name: &str| {
            message
                .headers()
                .and_then(|h| h.iter().find(|h| h.key == name))
                .and_then(|h| h.value)
                .map(|v| String::from_utf8_lossy(v).into_owned())
        };
        let id = header("event_id").unwrap();
        assert_eq!(id, want["id"].as_str().unwrap(), "in store order");
        assert_eq!(header("seq").unwrap(), want["seq"].to_string());
        assert_eq!(
            header("node").as_deref(),
            Some(NODE),
            "the node it was captured on"
        );
        let envelope = Envelope::decode(message.payload().unwrap()).unwrap();
        assert_eq!(envelope, originals[&id].envelope);
    }
}
