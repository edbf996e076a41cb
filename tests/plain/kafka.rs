//! The `kafka` forwarder against librdkafka's in-process mock cluster, for faults
//! (broker down, rejected produce requests, fatal producer errors). Against a real tansu
//! broker: tests/kafka/kafka.rs.

use crate::support;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use eventgate::config::{BatchSettings, QueueSettings, RetrySettings};
use eventgate::event::{Event, EventId, Source};
use eventgate::filter::Filter;
use eventgate::forward::{Batch, Context, ForwardError, Forwarder, Kind, Options};
use eventgate::internal::forward::kafka::KafkaKind;
use eventgate::internal::pipeline::{Parts, Pipeline};
use eventgate::proto::containerd::types::Envelope;
use futures::future::BoxFuture;
use prost::Message as _;
use rdkafka::message::{Message, OwnedMessage};
use rdkafka::mocking::MockCluster;
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
use support::messages::{header, per_key, task_exit};
use support::tansu::consume;
use support::*;

// ---------------------------------------------------------------- helpers

// ---------------------------------------------------------------- tansu

// ---------------------------------------------------------------- mock cluster

/// Options for the mock cluster. Short reconnect backoff: librdkafka's default (up to
/// 10s) would make the tests wait for it after a broker comes back.
fn mock_options(bootstrap: &str, extra: &str) -> Options {
    let mut options: Options = toml::from_str(&format!(
        "brokers = \"{bootstrap}\"\ntopic = \"events\"\nmessage_timeout = \"1500ms\"\n{extra}"
    ))
    .expect("options");
    let properties = options
        .entry("properties")
        .or_insert_with(|| toml::Value::Table(Options::new()))
        .as_table_mut()
        .expect("properties table");
    properties.insert("reconnect.backoff.max.ms".into(), 200.into());
    options
}

async fn build(options: &Options) -> Arc<dyn Forwarder> {
    let dir = std::env::temp_dir();
    let context = Context {
        name: "mock".into(),
        data_dir: dir,
    };
    match KafkaKind.build(&context, options).await {
        Ok(forwarder) => forwarder,
        Err(error) => panic!("build: {:#}", anyhow::Error::from(error)),
    }
}

/// `n` events for three containers, interleaved; seq starts at `first`.
fn events(first: u64, n: u64) -> Vec<Arc<Event>> {
    (first..first + n)
        .map(|seq| {
            Arc::new(Event::new(
                seq,
                EventId::generate(),
                Source::Publish,
                Envelope {
                    timestamp: None,
                    namespace: "default".into(),
                    topic: "/tasks/exit".into(),
                    event: Some(task_exit(&format!("c{}", seq % 3), seq as u32)),
                },
            ))
        })
        .collect()
}

fn batch(events: &[Arc<Event>]) -> Batch {
    Batch::new(events.to_vec(), 0)
}

/// Checks that every event arrived and that, per key, first arrivals are in seq
/// order (a retried batch may add duplicates, which consumers drop by event_id).
fn assert_all_arrived_in_order(messages: &[OwnedMessage], sent: &[Arc<Event>]) {
    let mut seen = HashSet::new();
    let mut first_arrivals = Vec::new();
    for m in messages {
        let id = header(m, "event_id").expect("event_id");
        if seen.insert(id) {
            first_arrivals.push(m.clone());
        }
    }
    let expected: HashSet<String> = sent.iter().map(|e| e.identity.id.to_string()).collect();
    assert_eq!(seen, expected, "every event arrived");
    for (key, seqs) in per_key(&first_arrivals, |m| {
        header(m, "seq").expect("seq").parse().expect("number")
    }) {
        assert!(
            seqs.windows(2).all(|w| w[0] < w[1]),
            "{key} out of order: {seqs:?}"
        );
    }
}

async fn consume_async(brokers: String, count: usize) -> Vec<OwnedMessage> {
    tokio::task::spawn_blocking(move || consume(&brokers, "events", count))
        .await
        .expect("consumer task")
}

/// The only broker goes down: `send` fails with a retryable error (never `Ok`);
/// once it is back the same batch goes through and every event is in Kafka, in
/// order per key.
#[tokio::test(flavor = "multi_thread")]
async fn mock_broker_down_is_retryable_and_nothing_is_lost() {
    let cluster = MockCluster::new(1).expect("mock cluster");
    cluster.create_topic("events", 3, 1).expect("topic");
    let brokers = cluster.bootstrap_servers();
    let forwarder = build(&mock_options(&brokers, "")).await;

    let first = events(1, 9);
    forwarder.send(&batch(&first)).await.expect("first batch");

    cluster.broker_down(1).expect("broker down");
    let second = events(10, 9);
    let error = forwarder
        .send(&batch(&second))
        .await
        .expect_err("no delivery while the broker is down");
    assert!(error.is_retryable(), "retryable: {error}");

    cluster.broker_up(1).expect("broker up");
    let end = Instant::now() + DEADLINE;
    loop {
        match forwarder.send(&batch(&second)).await {
            Ok(()) => break,
            Err(e) if e.is_retryable() && Instant::now() < end => continue,
            Err(e) => panic!("second batch after the broker came back: {e}"),
        }
    }
    let all: Vec<_> = first.iter().chain(&second).cloned().collect();
    let messages = consume_async(brokers, all.len()).await;
    assert_all_arrived_in_order(&messages, &all);
    forwarder.close().await.expect("close");
}

/// Through librdkafka to a broker and back: an event's publisher is the `publisher`
/// header (the JSON object of the file's lines); an event without one has none.
#[tokio::test(flavor = "multi_thread")]
async fn mock_messages_carry_the_publisher_header() {
    use eventgate::publisher::Publisher;
    let cluster = MockCluster::new(1).expect("mock cluster");
    cluster.create_topic("events", 1, 1).expect("topic");
    let brokers = cluster.bootstrap_servers();
    let forwarder = build(&mock_options(&brokers, "")).await;
    let publishers = [
        Some(Publisher::Process {
            uid: 1000,
            gid: 100,
            pid: Some(4242),
        }),
        Some(Publisher::Certificate {
            subject: "CN=node-7,O=Acme\\, Inc.".into(),
        }),
        None,
    ];
    let sent: Vec<Arc<Event>> = events(1, 3)
        .into_iter()
        .zip(publishers)
        .map(|(event, publisher)| {
            let event = Arc::try_unwrap(event).expect("not shared");
            Arc::new(event.with_publisher(publisher))
        })
        .collect();
    forwarder.send(&batch(&sent)).await.expect("delivered");
    let messages = consume_async(brokers, sent.len()).await;
    let by_id: std::collections::HashMap<String, Option<serde_json::Value>> = messages
        .iter()
        .map(|m| {
            let publisher = header(m, "publisher").map(|h| serde_json::from_str(&h).expect("JSON"));
            (header(m, "event_id").expect("event_id"), publisher)
        })
        .collect();
    assert_eq!(
        by_id[&sent[0].identity.id.to_string()],
        Some(serde_json::json!({ "uid": 1000, "gid": 100, "pid": 4242 }))
    );
    assert_eq!(
        by_id[&sent[1].identity.id.to_string()],
        Some(serde_json::json!({ "subject": "CN=node-7,O=Acme\\, Inc." }))
    );
    assert_eq!(by_id[&sent[2].identity.id.to_string()], None);
    forwarder.close().await.expect("close");
}

/// Through librdkafka to a broker and back, in each value format: a reconciled
/// event carries the `origin` header `reconciled` and its `origin_clock`; a live one
/// `origin` `live` and no clock. The JSON value says the same; the protobuf value is
/// the envelope as accepted.
#[tokio::test(flavor = "multi_thread")]
async fn mock_messages_carry_the_origin_headers_in_every_value_format() {
    use eventgate::event::{Clock, Origin};
    for format in ["protobuf", "json"] {
        let cluster = MockCluster::new(1).expect("mock cluster");
        cluster.create_topic("events", 1, 1).expect("topic");
        let brokers = cluster.bootstrap_servers();
        let options = mock_options(&brokers, &format!("value_format = \"{format}\""));
        let forwarder = build(&options).await;
        let origins = [
            Origin::reconciled(Clock::Daemon),
            Origin::reconciled(Clock::Reconcile),
            Origin::Live,
        ];
        let sent: Vec<Arc<Event>> = events(1, 3)
            .into_iter()
            .zip(origins)
            .map(|(event, origin)| {
                let event = Arc::try_unwrap(event).expect("not shared");
                Arc::new(event.with_origin(origin))
            })
            .collect();
        forwarder.send(&batch(&sent)).await.expect("delivered");
        let messages = consume_async(brokers, sent.len()).await;
        assert_eq!(messages.len(), sent.len());
        for m in &messages {
            let id = header(m, "event_id").expect("event_id");
            let event = sent
                .iter()
                .find(|e| e.identity.id.to_string() == id)
                .expect("a sent event");
            let expected_clock = event.identity.origin.clock().map(|c| c.label().to_owned());
            assert_eq!(
                header(m, "origin").as_deref(),
                Some(event.identity.origin.label()),
                "{format}"
            );
            assert_eq!(header(m, "origin_clock"), expected_clock, "{format}");
            let payload = m.payload().expect("a value");
            match format {
                "json" => {
                    let value: serde_json::Value = serde_json::from_slice(payload).expect("JSON");
                    assert_eq!(value["origin"], event.identity.origin.label());
                    assert_eq!(
                        value.get("origin_clock").and_then(|v| v.as_str()),
                        expected_clock.as_deref()
                    );
                }
                _ => assert_eq!(
                    Envelope::decode(payload).expect("an envelope"),
                    event.envelope
                ),
            }
        }
        forwarder.close().await.expect("close");
    }
}

/// A forwarder that counts failed attempts, to see the pipeline's retries happen.
struct Counting {
    inner: Arc<dyn Forwarder>,
    failures: Arc<AtomicUsize>,
}

impl Forwarder for Counting {
    fn send<'a>(&'a self, batch: &'a Batch) -> BoxFuture<'a, Result<(), ForwardError>> {
        Box::pin(async move {
            let result = self.inner.send(batch).await;
            if result.is_err() {
                self.failures.fetch_add(1, Ordering::SeqCst);
            }
            result
        })
    }

    fn close(&self) -> BoxFuture<'_, Result<(), ForwardError>> {
        self.inner.close()
    }
}

/// Through the pipeline: produce requests fail at the broker (leadership errors,
/// then the broker goes away) while events keep coming; the pipeline retries, and
/// once the faults clear every event is acknowledged and in Kafka, ordered per key.
#[tokio::test(flavor = "multi_thread")]
async fn mock_faults_through_the_pipeline_deliver_everything_after_they_clear() {
    let cluster = MockCluster::new(1).expect("mock cluster");
    cluster.create_topic("events", 3, 1).expect("topic");
    let brokers = cluster.bootstrap_servers();
    let failures = Arc::new(AtomicUsize::new(0));
    let forwarder = Arc::new(Counting {
        // Not idempotent: with librdkafka's mock cluster and the idempotent producer,
        // 4 of 48 runs under load (4 at once) found one to three acknowledged
        // messages absent from the mock's log (0 of 48 without idempotence). Whether
        // the mock or the producer loses them is not settled yet; what this test is
        // about, the pipeline's retries, does not depend on it. The idempotent
        // default is tested against tansu (tests/kafka/durability.rs).
        inner: build(&mock_options(&brokers, "idempotence = false")).await,
        failures: Arc::clone(&failures),
    });
    let pipeline = Pipeline::from_forwarders([Parts {
        name: "mock".into(),
        filter: Filter::parse_all::<&str>(&[]).expect("filter"),
        forwarder,
        queue: QueueSettings::default(),
        batch: BatchSettings {
            events: 10,
            ..BatchSettings::default()
        },
        retry: RetrySettings {
            timeout: Duration::from_secs(10),
            initial: Duration::from_millis(20),
            max: Duration::from_millis(200),
            ..RetrySettings::default()
        },
        checkpoint: Default::default(),
        dead_letters: None,
    }]);
    let router = pipeline.router();

    cluster.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION; 5],
    );
    cluster.broker_down(1).expect("broker down");
    let sent = events(1, 60);
    for event in &sent[..30] {
        router.route(event);
    }
    let counted = Arc::clone(&failures);
    tokio::task::spawn_blocking(move || {
        wait_for("a failed delivery attempt", DEADLINE, || {
            (counted.load(Ordering::SeqCst) > 0).then_some(())
        })
    })
    .await
    .expect("wait task");
    let handle = pipeline.forwarder("mock").expect("handle");
    assert_eq!(
        handle.acked(),
        0,
        "nothing acknowledged while the broker is down"
    );

    cluster.broker_up(1).expect("broker up");
    for event in &sent[30..] {
        router.route(event);
    }
    tokio::time::timeout(DEADLINE * 2, handle.wait_acked(60))
        .await
        .expect("every event acknowledged after the faults cleared");
    let reports = pipeline.shutdown(DEADLINE).await;
    assert_eq!(reports[0].delivered, 60, "{reports:?}");
    assert_eq!(reports[0].failed, 0, "{reports:?}");

    let messages = consume_async(brokers, sent.len()).await;
    assert_all_arrived_in_order(&messages, &sent);
}

/// An authorization failure is permanent (retrying the batch cannot help), and the
/// forwarder delivers again once the broker authorizes it.
#[tokio::test(flavor = "multi_thread")]
async fn mock_authorization_failure_is_permanent() {
    let cluster = MockCluster::new(1).expect("mock cluster");
    cluster.create_topic("events", 1, 1).expect("topic");
    let brokers = cluster.bootstrap_servers();
    // librdkafka holds a topic's authorization error until its next metadata refresh.
    let forwarder = build(&mock_options(
        &brokers,
        "properties = { \"topic.metadata.refresh.interval.ms\" = 100 }",
    ))
    .await;
    forwarder
        .send(&batch(&events(1, 1)))
        .await
        .expect("warm-up");

    cluster.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED],
    );
    let error = forwarder
        .send(&batch(&events(2, 1)))
        .await
        .expect_err("rejected");
    assert!(!error.is_retryable(), "permanent: {error}");
    let next = events(3, 3);
    let end = Instant::now() + DEADLINE;
    while let Err(error) = forwarder.send(&batch(&next)).await {
        assert!(Instant::now() < end, "still failing: {error}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A missing topic without `create_topic` stops the start, naming the topic and the
/// fix, and the check does not auto-create it on the way. (The mock cluster has no
/// CreateTopics; creation is covered against tansu.)
#[tokio::test(flavor = "multi_thread")]
async fn mock_missing_topic_stops_the_start() {
    let cluster = MockCluster::new(1).expect("mock cluster");
    let brokers = cluster.bootstrap_servers();
    let context = Context {
        name: "mock".into(),
        data_dir: std::env::temp_dir(),
    };
    for _ in 0..2 {
        let error = match KafkaKind.build(&context, &mock_options(&brokers, "")).await {
            Ok(_) => panic!("a missing topic must stop the start"),
            Err(error) => error.to_string(),
        };
        assert!(
            error.contains("\"events\"") && error.contains("create_topic = true"),
            "{error}"
        );
    }
}

/// A fatal producer error (here: a rejected message under
/// `enable.gapless.guarantee`, which an idempotent producer cannot recover from)
/// makes the batch retryable and replaces the producer; the retry goes through on
/// the new one, where the old producer would have failed every message from then on.
#[tokio::test(flavor = "multi_thread")]
async fn mock_fatal_producer_error_recreates_the_producer() {
    let cluster = MockCluster::new(1).expect("mock cluster");
    cluster.create_topic("events", 1, 1).expect("topic");
    let brokers = cluster.bootstrap_servers();
    let forwarder = build(&mock_options(
        &brokers,
        "properties = { \"enable.gapless.guarantee\" = true }",
    ))
    .await;
    forwarder
        .send(&batch(&events(1, 1)))
        .await
        .expect("warm-up");

    cluster.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_INVALID_RECORD],
    );
    let sent = events(2, 3);
    let error = forwarder
        .send(&batch(&sent))
        .await
        .expect_err("the producer fails fatally");
    assert!(error.is_retryable(), "retryable: {error}");
    assert!(error.to_string().contains("recreated"), "{error}");
    forwarder
        .send(&batch(&sent))
        .await
        .expect("the retry goes through a fresh producer");
    let messages = consume_async(brokers, 1 + sent.len()).await;
    let ids: HashSet<String> = messages
        .iter()
        .filter_map(|m| header(m, "event_id"))
        .collect();
    for event in &sent {
        assert!(
            ids.contains(&event.identity.id.to_string()),
            "event {} missing",
            event.seq
        );
    }
}

/// A batch larger than librdkafka's queue: `send` waits for room instead of failing
/// or growing the queue, and every message arrives in order per key.
#[tokio::test(flavor = "multi_thread")]
async fn mock_full_producer_queue_waits_for_room() {
    let cluster = MockCluster::new(1).expect("mock cluster");
    cluster.create_topic("events", 3, 1).expect("topic");
    let brokers = cluster.bootstrap_servers();
    let forwarder = build(&mock_options(
        &brokers,
        "properties = { \"queue.buffering.max.messages\" = 4, \"linger.ms\" = 1 }",
    ))
    .await;
    let sent = events(1, 100);
    forwarder
        .send(&batch(&sent))
        .await
        .expect("a batch 25 times the queue size is delivered");
    let messages = consume_async(brokers, sent.len()).await;
    assert_eq!(messages.len(), sent.len(), "each event once");
    assert_all_arrived_in_order(&messages, &sent);
}

/// Kafka is down from the start: the gateway still starts (the Kafka forwarder only
/// warns), the SQLite audit trail takes every event while Kafka takes none, and
/// once the broker is back Kafka gets everything too, in order per key.
#[tokio::test(flavor = "multi_thread")]
async fn mock_kafka_down_never_stalls_the_sqlite_audit_trail() {
    let cluster = MockCluster::new(1).expect("mock cluster");
    cluster.create_topic("events", 3, 1).expect("topic");
    let brokers = cluster.bootstrap_servers();
    cluster.broker_down(1).expect("broker down");

    let dir = tempfile::tempdir().expect("tempdir");
    let context = Context {
        name: "audit".into(),
        data_dir: dir.path().to_path_buf(),
    };
    let mut sqlite_options = Options::new();
    sqlite_options.insert("path".into(), "audit.db".into());
    let kinds = eventgate::forward::Kinds::default();
    let sqlite = kinds
        .get("sqlite")
        .expect("sqlite kind")
        .build(&context, &sqlite_options)
        .await
        .expect("sqlite forwarder");
    let kafka = build(&mock_options(&brokers, "")).await;
    let retry = RetrySettings {
        timeout: Duration::from_secs(10),
        initial: Duration::from_millis(20),
        max: Duration::from_millis(200),
        ..RetrySettings::default()
    };
    let parts = |name: &str, forwarder| Parts {
        name: name.into(),
        filter: Filter::always(),
        forwarder,
        queue: QueueSettings::default(),
        batch: BatchSettings {
            events: 10,
            ..BatchSettings::default()
        },
        retry: retry.clone(),
        checkpoint: Default::default(),
        dead_letters: None,
    };
    let pipeline = Pipeline::from_forwarders([parts("audit", sqlite), parts("kafka", kafka)]);
    let router = pipeline.router();
    let sent = events(1, 50);
    for event in &sent {
        router.route(event);
    }
    let audit = pipeline.forwarder("audit").expect("audit");
    tokio::time::timeout(DEADLINE, audit.wait_acked(50))
        .await
        .expect("the audit store took every event while Kafka was down");
    let db = rusqlite::Connection::open(dir.path().join("audit.db")).expect("open db");
    let rows: i64 = db
        .query_row("select count(*) from events", [], |row| row.get(0))
        .expect("count");
    assert_eq!(rows, 50);
    let kafka = pipeline.forwarder("kafka").expect("kafka");
    assert_eq!(kafka.acked(), 0, "nothing reached Kafka while it was down");

    cluster.broker_up(1).expect("broker up");
    tokio::time::timeout(DEADLINE * 2, kafka.wait_acked(50))
        .await
        .expect("Kafka caught up after the broker came back");
    let reports = pipeline.shutdown(DEADLINE).await;
    assert!(
        reports.iter().all(|r| r.failed == 0 && r.undelivered == 0),
        "{reports:?}"
    );
    let messages = consume_async(brokers, sent.len()).await;
    assert_all_arrived_in_order(&messages, &sent);
}
