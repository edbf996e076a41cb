//! Counting what a benchmarked gateway's sink holds: lines in its file, rows in its
//! audit store, messages in its Kafka topic.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::BenchError;
use super::forwarder::Sink;
use super::sinks::{kafka_error, store_error, topic};
use crate::store;

/// Counts what the gateway's sink holds so far.
pub(super) struct Counter {
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
    pub(super) fn new(sink: &Sink, data_dir: &Path, round: usize) -> Self {
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

    pub(super) fn count(&mut self) -> Result<u64, BenchError> {
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
