//! What a `kafka` source's group has not read: per partition of the subscribed
//! topics, its watermarks and the group's committed offset, asked of the brokers
//! by a client of its own (the source's consumer restarts; this one stays), which
//! never subscribes and so never joins the group.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer as _, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use super::options::SourceOptions;
use crate::forward::BuildError;
use crate::source::starvation::{Backlog, PartitionLag};

/// Everything one sample may take, its requests together.
const SAMPLE_DEADLINE: Duration = Duration::from_secs(8);

/// Its librdkafka logs and errors, at debug level: the source's consumer reports
/// the same brokers' troubles where they matter.
struct QuietContext {
    source: Arc<str>,
    secrets: Vec<String>,
}

impl ClientContext for QuietContext {
    fn log(&self, _: rdkafka::config::RDKafkaLogLevel, facility: &str, message: &str) {
        let message = crate::redact::text(message, &self.secrets);
        tracing::debug!(source = %self.source, facility, "librdkafka (backlog check): {message}");
    }

    fn error(&self, error: KafkaError, reason: &str) {
        let reason = crate::redact::text(reason, &self.secrets);
        tracing::debug!(source = %self.source, %error, "backlog check: {reason}");
    }
}

impl ConsumerContext for QuietContext {}

pub(crate) struct KafkaBacklog {
    client: BaseConsumer<QuietContext>,
    topics: Vec<String>,
    /// Topics given as patterns (`^...`).
    patterns: Vec<regex::Regex>,
    secrets: Vec<String>,
}

impl KafkaBacklog {
    pub(crate) fn new(source: &Arc<str>, options: &SourceOptions) -> Result<Self, BuildError> {
        // The group's id, to read its committed offsets; no instance id: this
        // client is not a member.
        let mut config = options.client_config(source, None);
        config.set("client.id", format!("eventgate-source-{source}-backlog"));
        config.set("enable.auto.commit", "false");
        config.remove("debug");
        let context = QuietContext {
            source: Arc::clone(source),
            secrets: options.secrets(),
        };
        let client = config
            .create_with_context(context)
            .map_err(|e| BuildError::Options(options.describe(&e)))?;
        let (patterns, topics): (Vec<&String>, Vec<&String>) =
            options.topics.iter().partition(|t| t.starts_with('^'));
        Ok(Self {
            client,
            topics: topics.into_iter().cloned().collect(),
            // Validated with the configuration.
            patterns: patterns
                .into_iter()
                .filter_map(|p| regex::Regex::new(p).ok())
                .collect(),
            secrets: options.secrets(),
        })
    }

    /// Every partition of the subscribed topics (those a pattern matches among the
    /// cluster's, internal topics aside).
    fn partitions(&self, left: impl Fn() -> Duration) -> Result<Vec<(String, i32)>, KafkaError> {
        let mut partitions = Vec::new();
        let mut add = |metadata: rdkafka::metadata::Metadata, wanted: &dyn Fn(&str) -> bool| {
            for topic in metadata.topics() {
                if topic.error().is_some() || !wanted(topic.name()) {
                    continue;
                }
                for partition in topic.partitions() {
                    partitions.push((topic.name().to_owned(), partition.id()));
                }
            }
        };
        for topic in &self.topics {
            let metadata = self.client.fetch_metadata(Some(topic), left())?;
            add(metadata, &|name| name == topic);
        }
        if !self.patterns.is_empty() {
            let metadata = self.client.fetch_metadata(None, left())?;
            add(metadata, &|name| {
                !name.starts_with("__") && self.patterns.iter().any(|p| p.is_match(name))
            });
        }
        partitions.sort();
        partitions.dedup();
        Ok(partitions)
    }

    fn ask(&self) -> Result<Vec<PartitionLag>, KafkaError> {
        let deadline = Instant::now() + SAMPLE_DEADLINE;
        let left = || {
            deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1))
        };
        let partitions = self.partitions(left)?;
        if partitions.is_empty() {
            return Ok(Vec::new());
        }
        let mut list = TopicPartitionList::new();
        for (topic, partition) in &partitions {
            list.add_partition(topic, *partition);
        }
        let committed = self.client.committed_offsets(list, left())?;
        let mut lags = Vec::with_capacity(partitions.len());
        for (topic, partition) in partitions {
            let (low, high) = self.client.fetch_watermarks(&topic, partition, left())?;
            let committed =
                committed
                    .find_partition(&topic, partition)
                    .and_then(|p| match p.offset() {
                        Offset::Offset(offset) => Some(offset),
                        _ => None,
                    });
            lags.push(PartitionLag {
                topic,
                partition,
                committed,
                low,
                high,
            });
        }
        Ok(lags)
    }
}

impl Backlog for KafkaBacklog {
    fn sample(&self) -> Result<Vec<PartitionLag>, String> {
        let answer = self.ask();
        // Serves the client's queue (its logs and errors), which nothing else polls.
        while self.client.poll(Duration::ZERO).is_some() {}
        answer.map_err(|e| crate::redact::text(&e.to_string(), &self.secrets))
    }
}
