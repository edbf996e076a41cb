//! Per-sink parts of the forwarder benchmark: the forwarder's options, the raw
//! baseline, and counting what a sink holds.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::BenchError;
use super::forwarder::Sink;
use crate::event::Event;
use crate::forward::{Context, Kinds, Options, file, kafka};
use crate::pipeline::settings::{BatchSettings, QueueSettings, RetrySettings};
use crate::pipeline::{Parts, Pipeline};
use crate::store::{self, EventRow};

/// The forwarder's kind-specific options for round `round`.
pub fn options(sink: &Sink, round: usize) -> Options {
    let mut options = Options::new();
    match sink {
        Sink::None => {}
        Sink::File => {
            options.insert("path".into(), "events.jsonl".into());
            // One file for the whole run, so counting lines is exact.
            options.insert("max_size".into(), 0.into());
        }
        Sink::Sqlite => {
            options.insert("path".into(), "audit.db".into());
        }
        Sink::Kafka { brokers } => {
            options.insert("brokers".into(), brokers.as_str().into());
            options.insert("topic".into(), topic(round).into());
            options.insert("create_topic".into(), true.into());
        }
    }
    options
}

fn topic(round: usize) -> String {
    format!("bench-{}-{round}", std::process::id())
}

/// The config the gateway runs with: the one forwarder under test.
pub fn config(sink: &Sink, batch: usize, round: usize, fsync: &str) -> String {
    let mut spool = toml::Table::new();
    spool.insert("fsync".into(), fsync.into());
    let mut root = toml::Table::new();
    root.insert("spool".into(), spool.into());
    if let Sink::None = sink {
        root.insert("forwarder".into(), toml::Value::Array(Vec::new()));
        return toml::to_string(&root).unwrap_or_default();
    }
    let mut table = options(sink, round);
    table.insert("name".into(), "bench".into());
    table.insert("kind".into(), sink.label().into());
    let mut batch_table = toml::Table::new();
    batch_table.insert("events".into(), (batch as i64).into());
    table.insert("batch".into(), batch_table.into());
    root.insert(
        "forwarder".into(),
        toml::Value::Array(vec![toml::Value::Table(table)]),
    );
    toml::to_string(&root).unwrap_or_default()
}

/// The same forwarder driven in-process through the pipeline (no gRPC): what the
/// forwarder and pipeline cost on their own.
pub async fn pipeline(
    sink: &Sink,
    dir: &Path,
    events: &[Arc<Event>],
    batch: usize,
    round: usize,
) -> Result<Duration, BenchError> {
    let options = options(sink, round);
    let kinds = Kinds::default();
    let kind = kinds.get(sink.label()).map_err(build_error)?;
    let context = Context {
        name: "bench".into(),
        data_dir: dir.to_path_buf(),
    };
    let forwarder = kind.build(&context, &options).await.map_err(build_error)?;
    let pipeline = Pipeline::from_forwarders([Parts {
        name: "bench".into(),
        filter: crate::filter::Filter::always(),
        forwarder,
        queue: QueueSettings {
            events: events.len() + 1,
            ..QueueSettings::default()
        },
        batch: BatchSettings {
            events: batch,
            ..BatchSettings::default()
        },
        retry: RetrySettings::default(),
        checkpoint: Default::default(),
        dead_letters: None,
    }]);
    let router = pipeline.router();
    let start = Instant::now();
    for event in events {
        router.route(event);
    }
    let last = events.last().map_or(0, |e| e.seq);
    if let Some(handle) = pipeline.forwarder("bench") {
        handle.wait_acked(last).await;
    }
    let elapsed = start.elapsed();
    pipeline.shutdown(Duration::from_secs(10)).await;
    Ok(elapsed)
}

fn build_error(error: crate::forward::BuildError) -> BenchError {
    BenchError::Timeout {
        what: format!("cannot build the forwarder: {error}"),
    }
}

/// A raw baseline's figures.
#[derive(Clone, Copy, Debug)]
pub struct Raw {
    /// The clock: writing to the sink (and, for the file, rendering each line).
    pub elapsed: Duration,
    /// Preparing what is written, before the clock started: SQLite rows (their JSON
    /// included) and Kafka records. The gateway's forwarders do this inside theirs.
    pub prepared: Duration,
}

/// Writes `events` straight to the sink, `batch` at a time.
pub async fn raw(
    sink: &Sink,
    dir: &Path,
    events: &[Arc<Event>],
    batch: usize,
    round: usize,
) -> Result<Raw, BenchError> {
    let dir = dir.to_path_buf();
    let events = events.to_vec();
    match sink {
        Sink::None => Ok(Raw {
            elapsed: Duration::ZERO,
            prepared: Duration::ZERO,
        }),
        Sink::Sqlite => blocking(move || raw_sqlite(&dir, &events, batch)).await,
        Sink::Kafka { brokers } => raw_kafka(brokers, &dir, &events, round + 2000).await,
        Sink::File => blocking(move || raw_file(&dir, &events, batch)).await,
    }
}

/// Plain buffered writes of the same lines, synced once per batch like the
/// forwarder's default `fsync = "batch"`. Each line is rendered inside the clock with
/// the forwarder's own renderer, from events that have not been rendered before (as
/// the gateway's are when they arrive), so both sides pay for the JSON.
fn raw_file(dir: &Path, events: &[Arc<Event>], batch: usize) -> Result<Raw, BenchError> {
    use std::io::Write;
    let path = dir.join("events.jsonl");
    let io = |source| BenchError::Io {
        context: format!("writing {}", path.display()),
        source,
    };
    let out = std::fs::File::create(&path).map_err(io)?;
    let mut out = std::io::BufWriter::with_capacity(1 << 20, out);
    let mut line = Vec::with_capacity(512);
    let start = Instant::now();
    for chunk in events.chunks(batch.max(1)) {
        for event in chunk {
            line.clear();
            file::render_into(&mut line, event, file::Format::Jsonl);
            out.write_all(&line).map_err(io)?;
        }
        out.flush().map_err(io)?;
        out.get_ref().sync_data().map_err(io)?;
    }
    Ok(Raw {
        elapsed: start.elapsed(),
        prepared: Duration::ZERO,
    })
}

/// Lines in a file so far (0 while it does not exist).
fn count_lines(path: &Path, offset: &mut u64, lines: &mut u64) -> Result<u64, BenchError> {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut file) = std::fs::File::open(path) else {
        return Ok(0);
    };
    let io = |source| BenchError::Io {
        context: format!("reading {}", path.display()),
        source,
    };
    file.seek(SeekFrom::Start(*offset)).map_err(io)?;
    let mut buf = Vec::new();
    file.read_to_end(&mut buf).map_err(io)?;
    *offset += buf.len() as u64;
    *lines += buf.iter().filter(|&&b| b == b'\n').count() as u64;
    Ok(*lines)
}

/// Plain librdkafka: the same records (encoded before the clock starts) produced
/// with a FutureProducer configured like the forwarder's, to a topic of their own,
/// every delivery report awaited. The producer is warmed before the clock (topic
/// metadata fetched, one record produced and acknowledged, which also gets the
/// idempotent producer its id), as the forwarder's is by the time events arrive.
async fn raw_kafka(
    brokers: &str,
    dir: &Path,
    events: &[Arc<Event>],
    round: usize,
) -> Result<Raw, BenchError> {
    use rdkafka::producer::FutureProducer;
    let sink = Sink::Kafka {
        brokers: brokers.to_owned(),
    };
    let options = options(&sink, round);
    // Building the forwarder once creates the topic, as the forwarder would.
    let context = Context {
        name: "raw".into(),
        data_dir: dir.to_path_buf(),
    };
    let forwarder = Kinds::default()
        .get("kafka")
        .map_err(build_error)?
        .build(&context, &options)
        .await
        .map_err(build_error)?;
    let _ = forwarder.close().await;
    let encoder = kafka::RecordEncoder::from_options(&options).map_err(build_error)?;
    let preparing = Instant::now();
    let records: Vec<_> = events.iter().map(|e| encoder.encode(e)).collect();
    let prepared = preparing.elapsed();
    let producer: FutureProducer = kafka::client_config("raw", &options)
        .map_err(build_error)?
        .create()
        .map_err(kafka_error)?;
    warm(&producer, &records).await?;
    let start = Instant::now();
    let mut pending = std::collections::VecDeque::new();
    for record in &records {
        let mut next = record.future_record();
        loop {
            match producer.send_result(next) {
                Ok(delivery) => {
                    pending.push_back(delivery);
                    break;
                }
                Err((
                    rdkafka::error::KafkaError::MessageProduction(
                        rdkafka::types::RDKafkaErrorCode::QueueFull,
                    ),
                    back,
                )) => {
                    next = back;
                    match pending.pop_front() {
                        Some(oldest) => delivered(oldest.await)?,
                        None => tokio::time::sleep(Duration::from_millis(1)).await,
                    }
                }
                Err((error, _)) => return Err(kafka_error(error)),
            }
        }
    }
    for delivery in pending {
        delivered(delivery.await)?;
    }
    let elapsed = start.elapsed();
    tokio::task::spawn_blocking(move || drop(producer))
        .await
        .ok();
    Ok(Raw { elapsed, prepared })
}

/// Fetches the topic's metadata and produces one record (a copy of the first,
/// outside the clock and not counted), waiting for its acknowledgement.
async fn warm(
    producer: &rdkafka::producer::FutureProducer,
    records: &[kafka::Record],
) -> Result<(), BenchError> {
    use rdkafka::producer::Producer;
    let Some(first) = records.first() else {
        return Ok(());
    };
    let client = producer.clone();
    let topic = first.topic.clone();
    tokio::task::spawn_blocking(move || {
        client
            .client()
            .fetch_metadata(Some(&topic), Duration::from_secs(10))
            .map(drop)
    })
    .await
    .map_err(|e| BenchError::Timeout {
        what: format!("fetching Kafka metadata failed: {e}"),
    })?
    .map_err(kafka_error)?;
    let delivery = producer
        .send_result(first.future_record())
        .map_err(|(error, _)| kafka_error(error))?;
    delivered(delivery.await)
}

fn delivered(
    report: Result<
        rdkafka::producer::future_producer::OwnedDeliveryResult,
        futures::channel::oneshot::Canceled,
    >,
) -> Result<(), BenchError> {
    match report {
        Ok(Ok(_)) => Ok(()),
        Ok(Err((error, _))) => Err(kafka_error(error)),
        Err(_) => Err(BenchError::Timeout {
            what: "a Kafka delivery report was lost".into(),
        }),
    }
}

fn kafka_error(error: rdkafka::error::KafkaError) -> BenchError {
    BenchError::Timeout {
        what: format!("Kafka: {error}"),
    }
}

/// Consumes what `topic` holds so far from the start of every partition; returns
/// how many messages arrived in this call.
fn kafka_consume(
    consumer: &rdkafka::consumer::BaseConsumer,
    topic: &str,
    assigned: &mut bool,
) -> Result<u64, BenchError> {
    use rdkafka::consumer::Consumer;
    if !*assigned {
        let metadata = consumer
            .fetch_metadata(Some(topic), Duration::from_secs(5))
            .map_err(kafka_error)?;
        let mut list = rdkafka::TopicPartitionList::new();
        for t in metadata.topics().iter().filter(|t| t.name() == topic) {
            for partition in t.partitions() {
                list.add_partition_offset(topic, partition.id(), rdkafka::Offset::Beginning)
                    .map_err(kafka_error)?;
            }
        }
        consumer.assign(&list).map_err(kafka_error)?;
        *assigned = true;
    }
    let mut got = 0;
    while let Some(message) = consumer.poll(Duration::from_millis(1)) {
        if message.is_ok() {
            got += 1;
        }
    }
    Ok(got)
}

async fn blocking(
    f: impl FnOnce() -> Result<Raw, BenchError> + Send + 'static,
) -> Result<Raw, BenchError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| BenchError::Timeout {
            what: format!("the raw baseline failed: {e}"),
        })?
}

fn store_error(error: impl std::fmt::Display) -> BenchError {
    BenchError::Timeout {
        what: format!("SQLite: {error}"),
    }
}

/// Plain rusqlite: the same rows (built, JSON included, before the clock starts)
/// into the same schema, one transaction and one prepared statement per batch.
fn raw_sqlite(dir: &Path, events: &[Arc<Event>], batch: usize) -> Result<Raw, BenchError> {
    let path = dir.join("audit.db");
    let mut conn =
        store::open_writer(&path, &store::WriterOptions::default()).map_err(store_error)?;
    let preparing = Instant::now();
    let rows: Vec<EventRow<'_>> = events.iter().map(|e| EventRow::from_event(e)).collect();
    let prepared = preparing.elapsed();
    let start = Instant::now();
    for chunk in rows.chunks(batch.max(1)) {
        store::raw_insert_rows(&mut conn, chunk).map_err(store_error)?;
    }
    Ok(Raw {
        elapsed: start.elapsed(),
        prepared,
    })
}

/// Counts what the gateway's sink holds so far.
pub struct Counter {
    sink: Sink,
    data_dir: PathBuf,
    sqlite: Option<rusqlite::Connection>,
    kafka: Option<rdkafka::consumer::BaseConsumer>,
    round: usize,
    file_offset: u64,
    file_lines: u64,
    kafka_assigned: bool,
    kafka_count: u64,
}

impl Counter {
    pub fn new(sink: &Sink, data_dir: &Path, round: usize) -> Self {
        Self {
            kafka: None,
            round,
            file_offset: 0,
            file_lines: 0,
            kafka_assigned: false,
            kafka_count: 0,
            sink: sink.clone(),
            data_dir: data_dir.to_path_buf(),
            sqlite: None,
        }
    }

    pub fn count(&mut self) -> Result<u64, BenchError> {
        match self.sink {
            Sink::None => Ok(u64::MAX),
            Sink::Sqlite => {
                let path = self.data_dir.join("audit.db");
                if self.sqlite.is_none() && path.exists() {
                    self.sqlite = store::open_reader(&path, Duration::from_secs(5)).ok();
                }
                let Some(conn) = &self.sqlite else {
                    return Ok(0);
                };
                conn.query_row("SELECT count(*) FROM events", [], |row| {
                    row.get::<_, i64>(0)
                })
                .map(|n| n as u64)
                .map_err(store_error)
            }
            Sink::File => count_lines(
                &self.data_dir.join("events.jsonl"),
                &mut self.file_offset,
                &mut self.file_lines,
            ),
            Sink::Kafka { ref brokers } => {
                if self.kafka.is_none() {
                    let consumer: rdkafka::consumer::BaseConsumer = rdkafka::ClientConfig::new()
                        .set("bootstrap.servers", brokers)
                        .set("group.id", "eventgate-bench")
                        .set("enable.auto.commit", "false")
                        // The other sinks are looked at every 5 ms; a fetch that may
                        // wait 500 ms (the default) for data would add up to that
                        // much to the clock once the consumer has caught up.
                        .set("fetch.wait.max.ms", "5")
                        .create()
                        .map_err(kafka_error)?;
                    self.kafka = Some(consumer);
                }
                if let Some(consumer) = &self.kafka {
                    self.kafka_count +=
                        kafka_consume(consumer, &topic(self.round), &mut self.kafka_assigned)?;
                }
                Ok(self.kafka_count)
            }
        }
    }
}
