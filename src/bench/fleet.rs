//! Central ingest: a gateway's Kafka `[[source]]` taking in what node gateways
//! produced, next to a plain librdkafka consumer reading the same messages from the
//! same broker in the same run.
//!
//! The messages are what a node gateway's `kafka` forwarder writes (protobuf
//! values, its headers), produced once into a topic of a local tansu broker. The
//! raw consumer joins a fresh group and reads them all, touching each value; the
//! gateway joins another fresh group and takes every one in: decoded, appended to
//! its spool (durable before offsets are stored) and handed to its forwarders.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::consumer::{Consumer as _, StreamConsumer};
use rdkafka::message::Message as _;
use rdkafka::producer::FutureProducer;

use super::BenchError;
use super::load::{Item, as_events, as_pod_events, lifecycle};
use crate::config::Config;
use crate::event::Event;
use crate::forward::kafka::{Record, RecordEncoder, TopicTemplate, ValueFormat};
use crate::gateway::Gateway;

/// The topic the node gateways' messages are produced into.
pub(crate) const TOPIC: &str = "fleet";
/// Its partitions: what consumers in one group share.
pub(crate) const PARTITIONS: i32 = 4;
const DEADLINE: Duration = Duration::from_secs(600);

/// What the central gateway runs besides its source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Setup {
    /// The defaults: durable spool, the file and sqlite forwarders.
    Defaults,
    /// No forwarder: the source and the spool alone.
    SpoolOnly,
}

impl Setup {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Setup::Defaults => "defaults (spool, file, sqlite)",
            Setup::SpoolOnly => "spool only, no forwarder",
        }
    }
}

/// One round's figures.
#[derive(Clone, Debug)]
pub(crate) struct Measured {
    /// The gateway: start to the last event appended to its exchange.
    pub ingest: Duration,
    /// The gateway: its first event appended to its last (the group's join left
    /// out: tansu holds a static member's join for seconds, docs/fleet.md).
    pub reading: Duration,
    /// With the defaults: start to the last row in the audit store.
    pub stored: Option<Duration>,
}

/// Produces `events` forwarder-shaped messages into a new topic on `brokers`.
pub(crate) async fn produce(brokers: &str, events: usize) -> Result<(), BenchError> {
    let records = records(&node_events(&lifecycle(events), false))?;
    produce_records(brokers, &records).await
}

/// The events of `items` as node `web-1` captured them (with their pods' workload
/// columns when `pods`), as its gateway's `kafka` forwarder hands them over.
pub(crate) fn node_events(items: &[Item], pods: bool) -> Vec<Event> {
    let node: Arc<str> = Arc::from("web-1");
    let events = match pods {
        true => as_pod_events(items),
        false => as_events(items),
    };
    events
        .iter()
        .map(|event| {
            Event::with_received_at(
                event.seq,
                event.identity.id,
                event.identity.received_at,
                crate::event::Source::Upstream(Arc::from("containerd")),
                event.envelope.clone(),
            )
            .with_workload(event.identity.workload.clone())
            .with_node(Some(Arc::clone(&node)))
        })
        .collect()
}

/// The `kafka` forwarder's records of `events` (protobuf values, its headers).
pub(crate) fn records(events: &[Event]) -> Result<Vec<Record>, BenchError> {
    let encoder = RecordEncoder::new(
        TopicTemplate::parse(TOPIC).map_err(|e| BenchError::Failed {
            what: e.to_string(),
        })?,
        ValueFormat::Protobuf,
    );
    Ok(events.iter().map(|event| encoder.encode(event)).collect())
}

/// Produces `records` into a new topic of [`PARTITIONS`] on `brokers`, every
/// delivery awaited.
pub(crate) async fn produce_records(brokers: &str, records: &[Record]) -> Result<(), BenchError> {
    let failed = |what: String| BenchError::Failed { what };
    let admin: rdkafka::admin::AdminClient<_> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .map_err(|e| failed(format!("kafka admin client: {e}")))?;
    let topic = rdkafka::admin::NewTopic::new(
        TOPIC,
        PARTITIONS,
        rdkafka::admin::TopicReplication::Fixed(1),
    );
    admin
        .create_topics([&topic], &rdkafka::admin::AdminOptions::new())
        .await
        .map_err(|e| failed(format!("creating the topic: {e}")))?;
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("linger.ms", "5")
        .create()
        .map_err(|e| failed(format!("kafka producer: {e}")))?;
    let mut deliveries = Vec::with_capacity(records.len());
    for record in records {
        loop {
            match producer.send_result(record.future_record()) {
                Ok(delivery) => {
                    deliveries.push(delivery);
                    break;
                }
                Err((
                    rdkafka::error::KafkaError::MessageProduction(
                        rdkafka::types::RDKafkaErrorCode::QueueFull,
                    ),
                    _,
                )) => tokio::time::sleep(Duration::from_millis(5)).await,
                Err((e, _)) => return Err(failed(format!("producing: {e}"))),
            }
        }
    }
    for delivery in deliveries {
        match delivery.await {
            Ok(Ok(_)) => {}
            Ok(Err((e, _))) => return Err(failed(format!("delivery: {e}"))),
            Err(_) => return Err(failed("a delivery was cancelled".into())),
        }
    }
    Ok(())
}

/// A plain consumer in a fresh group reads every message, touching each value;
/// `fetch_wait_ms` is its `fetch.wait.max.ms` (librdkafka's default when `None`).
/// Answers subscribe to the last message, and the first message to the last.
pub(crate) async fn raw(
    brokers: &str,
    group: &str,
    events: usize,
    fetch_wait_ms: Option<&str>,
) -> Result<(Duration, Duration), BenchError> {
    let failed = |what: String| BenchError::Failed { what };
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", brokers)
        .set("group.id", group)
        .set("auto.offset.reset", "earliest");
    if let Some(wait) = fetch_wait_ms {
        config.set("fetch.wait.max.ms", wait);
    }
    let consumer: StreamConsumer = config
        .create()
        .map_err(|e| failed(format!("kafka consumer: {e}")))?;
    let start = Instant::now();
    consumer
        .subscribe(&[TOPIC])
        .map_err(|e| failed(format!("subscribing: {e}")))?;
    let mut read = 0;
    let mut bytes = 0usize;
    let mut first = None;
    while read < events {
        let message = tokio::time::timeout(DEADLINE, consumer.recv())
            .await
            .map_err(|_| BenchError::Timeout {
                what: format!("the raw consumer read {read} of {events} messages"),
            })?
            .map_err(|e| failed(format!("consuming: {e}")))?;
        first.get_or_insert_with(Instant::now);
        bytes += message.payload().map_or(0, <[u8]>::len);
        read += 1;
    }
    std::hint::black_box(bytes);
    Ok((
        start.elapsed(),
        first.map_or(Duration::ZERO, |f| f.elapsed()),
    ))
}

/// A gateway in `dir` with one Kafka source in a fresh group takes every message in.
pub(crate) async fn ingest(
    brokers: &str,
    group: &str,
    dir: &Path,
    setup: Setup,
    events: usize,
) -> Result<Measured, BenchError> {
    let failed = |what: String| BenchError::Failed { what };
    let forwarders = match setup {
        Setup::Defaults => "",
        Setup::SpoolOnly => "forwarder = []\n",
    };
    let text = format!(
        "{forwarders}data_dir = {dir:?}\n[admin]\nlisten = \"\"\n[exchange]\nsocket = {socket:?}\n\n[[source]]\nkind = \"kafka\"\nbrokers = {brokers:?}\ntopics = [{TOPIC:?}]\ngroup = {group:?}\n",
        dir = dir.display().to_string(),
        socket = dir.join("eventgate.sock").display().to_string(),
    );
    let config = Config::parse(&text, "(bench)").map_err(|e| failed(e.to_string()))?;
    let start = Instant::now();
    let gateway = Gateway::start(&config)
        .await
        .map_err(|e| failed(crate::errors::chain(&e)))?;
    let first = gateway.exchange().next_seq();
    let target = first + events as u64;
    wait(start, "the source's first event", || {
        gateway.exchange().next_seq() > first
    })
    .await?;
    let reading_from = Instant::now();
    wait(start, "the source's events", || {
        gateway.exchange().next_seq() >= target
    })
    .await?;
    let ingest = start.elapsed();
    let reading = reading_from.elapsed();
    let stored = match setup {
        Setup::SpoolOnly => None,
        Setup::Defaults => {
            let path = dir.join("audit.db");
            wait(start, "the audit store's rows", || {
                rusqlite::Connection::open_with_flags(
                    &path,
                    rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
                )
                .and_then(|c| {
                    c.query_row("SELECT count(*) FROM events", [], |r| r.get::<_, i64>(0))
                })
                .is_ok_and(|n| n as usize >= events)
            })
            .await?;
            Some(start.elapsed())
        }
    };
    gateway.stop().await;
    Ok(Measured {
        ingest,
        reading,
        stored,
    })
}

async fn wait(start: Instant, what: &str, done: impl Fn() -> bool) -> Result<(), BenchError> {
    while !done() {
        if start.elapsed() > DEADLINE {
            return Err(BenchError::Timeout {
                what: format!("{what} did not all arrive within {DEADLINE:?}"),
            });
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}
