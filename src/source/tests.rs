//! The supervisor of a source: a consumer that ends while the gateway runs is
//! started again, and says so. (The source's reading itself is tested end to end
//! against a real broker in tests/kafka/fleet.rs.)

use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::FutureProducer;

use super::*;
use crate::exchange::{ExchangeParts, ExchangeSettings};
use crate::forward::kafka::{RecordEncoder, TopicTemplate, ValueFormat};
use crate::testing::{self, T0};

#[tokio::test(flavor = "multi_thread")]
async fn a_consumer_that_ends_is_started_again() {
    let cluster = MockCluster::new(1).expect("mock cluster");
    cluster.create_topic("fleet", 1, 1).expect("topic");
    let brokers = cluster.bootstrap_servers();
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .create()
        .expect("producer");
    let event = testing::event(1).at(T0).node("web-1").build();
    let record = RecordEncoder::new(
        TopicTemplate::parse("fleet").unwrap(),
        ValueFormat::Protobuf,
    )
    .encode(&event);
    producer
        .send(record.future_record(), Duration::from_secs(5))
        .await
        .expect("produced");

    // An exchange that refuses everything: the consumer ends at its first message.
    let exchange = Exchange::new(ExchangeSettings::default(), ExchangeParts::default());
    exchange.close();
    let spec: SourceSpec = toml::from_str(&format!(
        "kind = \"kafka\"\nbrokers = \"{brokers}\"\ntopics = [\"fleet\"]\ngroup = \"g\"\n"
    ))
    .expect("spec");
    let mut sources = Sources::start(&[spec], &[], "central-1", &exchange).expect("start");
    let stats = Arc::clone(&sources.views()[0]);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while stats.counts().2 < 1 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not restarted: {:?}",
            stats.counts()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (taken_in, _, restarts, last_error) = stats.counts();
    assert_eq!(taken_in, 0, "nothing was appended");
    assert!(restarts >= 1, "started again once it ended");
    assert!(
        last_error
            .as_deref()
            .is_some_and(|e| e.contains("stopped; started again")),
        "{last_error:?}"
    );
    sources.stop(Duration::from_secs(10)).await;
}

/// Another gateway's markers and signed checkpoints (its namespace `eventgate`, its
/// topics under `/eventgate/`) are taken in as it made them, under its node: the
/// refusal of those names is for Publish and Forward, whose clients could forge
/// them, not for the gateways of a fleet.
#[tokio::test(flavor = "multi_thread")]
async fn another_gateways_own_events_are_taken_in_under_its_node() {
    use futures::StreamExt;

    use crate::event::Source;
    use crate::filter::Filter;

    let cluster = MockCluster::new(1).expect("mock cluster");
    cluster.create_topic("fleet", 1, 1).expect("topic");
    let brokers = cluster.bootstrap_servers();
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .create()
        .expect("producer");
    let encoder = RecordEncoder::new(
        TopicTemplate::parse("fleet").unwrap(),
        ValueFormat::Protobuf,
    );
    let own = |seq, namespace: &str, topic: &str| {
        testing::event(seq)
            .at(T0)
            .node("web-1")
            .source(Source::Internal)
            .namespace(namespace)
            .topic(topic)
            .build()
    };
    let sent = [
        own(1, "eventgate", "/eventgate/upstream/connected"),
        own(2, "eventgate", "/eventgate/audit/checkpoint"),
        own(3, "default", "/eventgate/correlated"),
    ];
    for event in &sent {
        let record = encoder.encode(event);
        producer
            .send(record.future_record(), Duration::from_secs(5))
            .await
            .expect("produced");
    }

    let exchange = Exchange::new(ExchangeSettings::default(), ExchangeParts::default());
    let mut subscription = exchange.subscribe(Filter::default()).expect("subscribe");
    let spec: SourceSpec = toml::from_str(&format!(
        "kind = \"kafka\"\nbrokers = \"{brokers}\"\ntopics = [\"fleet\"]\ngroup = \"central\"\n"
    ))
    .expect("spec");
    let mut sources = Sources::start(&[spec], &[], "central-1", &exchange).expect("start");
    for expected in &sent {
        let event = tokio::time::timeout(Duration::from_secs(30), subscription.next())
            .await
            .expect("taken in within the deadline")
            .expect("subscribed")
            .expect("delivered");
        assert_eq!(event.envelope, expected.envelope);
        assert_eq!(event.identity.id, expected.identity.id, "its id kept");
        assert_eq!(event.node(), Some("web-1"), "under its node");
    }
    // Counted once `append` returns, just after subscribers got the event.
    let stats = Arc::clone(&sources.views()[0]);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while stats.counts().0 < 3 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{:?}",
            stats.counts()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(stats.counts().1, 0, "nothing skipped");
    sources.stop(Duration::from_secs(10)).await;
}
