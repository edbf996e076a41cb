//! Per-sink parts of the forwarder benchmark: the forwarder's options and the raw
//! baseline (counting what a sink holds is in [`super::sink_count`]).

use std::path::Path;
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
pub(super) fn options(sink: &Sink, round: usize) -> Options {
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

pub(super) fn topic(round: usize) -> String {
    format!("bench-{}-{round}", std::process::id())
}

/// The config the gateway runs with: the one forwarder under test.
pub(super) fn config(sink: &Sink, batch: usize, round: usize, fsync: &str) -> String {
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
pub(super) async fn pipeline(
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
pub(crate) struct Raw {
    /// The clock: writing to the sink (and, for the file, rendering each line).
    pub elapsed: Duration,
    /// Preparing what is written, before the clock started: SQLite rows (their JSON
    /// included) and Kafka records. The gateway's forwarders do this inside theirs.
    pub prepared: Duration,
}

/// Writes `events` straight to the sink, `batch` at a time.
pub(super) async fn raw(
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

pub(super) fn kafka_error(error: rdkafka::error::KafkaError) -> BenchError {
    BenchError::Timeout {
        what: format!("Kafka: {error}"),
    }
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

pub(super) fn store_error(error: impl std::fmt::Display) -> BenchError {
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
