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
    let mut sources = Sources::start(&[spec], &exchange).expect("start");
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
