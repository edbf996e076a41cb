//! Making sure a topic exists before producing to it: librdkafka would otherwise hold
//! messages for an unknown topic until they time out, with no word on why.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::Producer as _;
use rdkafka::types::RDKafkaRespErr;
use thiserror::Error;

use super::context::Producer;

#[derive(Debug, Error)]
pub(super) enum TopicError {
    #[error("kafka metadata request failed")]
    Metadata(#[source] KafkaError),
    #[error("kafka reports topic {topic:?} unusable: {code}")]
    Unusable {
        topic: String,
        code: RDKafkaErrorCode,
    },
    #[error("creating kafka topic {topic:?} failed")]
    Create {
        topic: String,
        #[source]
        source: KafkaError,
    },
    #[error("the metadata lookup task failed")]
    Task(#[source] tokio::task::JoinError),
}

/// Topics known to exist, and what to do about ones that do not.
pub(super) struct Topics {
    forwarder: Arc<str>,
    known: Mutex<HashSet<String>>,
    create: bool,
    partitions: i32,
    replication_factor: i32,
    /// For the short-lived admin client that creates topics. Without idempotence:
    /// an idempotent handle would ask the broker for a producer id it never uses.
    admin_config: ClientConfig,
    timeout: Duration,
}

impl Topics {
    pub(super) fn new(
        forwarder: Arc<str>,
        producer_config: &ClientConfig,
        create: bool,
        partitions: i32,
        replication_factor: i32,
        timeout: Duration,
    ) -> Self {
        let mut admin_config = producer_config.clone();
        admin_config.set("enable.idempotence", "false");
        Self {
            forwarder,
            known: Mutex::new(HashSet::new()),
            create,
            partitions,
            replication_factor,
            admin_config,
            timeout,
        }
    }

    /// Whether `topic` exists (or was just created). `Ok(false)`: it does not, and
    /// this forwarder may not create it.
    pub(super) async fn ensure(
        &self,
        producer: &Arc<Producer>,
        topic: &str,
    ) -> Result<bool, TopicError> {
        if self.lock().contains(topic) {
            return Ok(true);
        }
        let exists = self.exists(producer, topic).await?;
        if !exists {
            if !self.create {
                return Ok(false);
            }
            self.create_topic(topic).await?;
        }
        self.lock().insert(topic.to_owned());
        Ok(true)
    }

    /// Drops `topic` from the known set, so the next use looks it up again (it may
    /// have been deleted).
    pub(super) fn forget(&self, topic: &str) {
        self.lock().remove(topic);
    }

    /// Checks that the brokers answer at all.
    pub(super) async fn reachable(&self, producer: &Arc<Producer>) -> Result<(), TopicError> {
        let producer = Arc::clone(producer);
        let timeout = self.timeout;
        tokio::task::spawn_blocking(move || producer.client().fetch_metadata(None, timeout))
            .await
            .map_err(TopicError::Task)?
            .map_err(TopicError::Metadata)?;
        Ok(())
    }

    async fn exists(&self, producer: &Arc<Producer>, topic: &str) -> Result<bool, TopicError> {
        let producer = Arc::clone(producer);
        let timeout = self.timeout;
        let name = topic.to_owned();
        let metadata = tokio::task::spawn_blocking(move || {
            producer.client().fetch_metadata(Some(&name), timeout)
        })
        .await
        .map_err(TopicError::Task)?
        .map_err(TopicError::Metadata)?;
        let Some(found) = metadata.topics().iter().find(|t| t.name() == topic) else {
            return Ok(false);
        };
        match found.error() {
            None => Ok(!found.partitions().is_empty()),
            Some(RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART) => Ok(false),
            // Still being created or electing a leader: it exists, librdkafka waits.
            Some(RDKafkaRespErr::RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE) => Ok(true),
            Some(code) => Err(TopicError::Unusable {
                topic: topic.to_owned(),
                code: code.into(),
            }),
        }
    }

    async fn create_topic(&self, topic: &str) -> Result<(), TopicError> {
        let create_error = |source| TopicError::Create {
            topic: topic.to_owned(),
            source,
        };
        let config = self.admin_config.clone();
        let admin = tokio::task::spawn_blocking(move || {
            config.create::<AdminClient<DefaultClientContext>>()
        })
        .await
        .map_err(TopicError::Task)?
        .map_err(create_error)?;
        let new = NewTopic::new(
            topic,
            self.partitions,
            TopicReplication::Fixed(self.replication_factor),
        );
        let options = AdminOptions::new()
            .request_timeout(Some(self.timeout))
            .operation_timeout(Some(self.timeout));
        let result = admin.create_topics([&new], &options).await;
        // Destroying a librdkafka handle waits for its threads.
        drop(tokio::task::spawn_blocking(move || drop(admin)));
        let outcome = result
            .map_err(create_error)?
            .into_iter()
            .next()
            .unwrap_or(Ok(topic.to_owned()));
        match outcome {
            Ok(_) => {
                metrics::counter!("eventgate_kafka_topics_created_total", "forwarder" => self.forwarder.to_string())
                    .increment(1);
                tracing::info!(
                    forwarder = %self.forwarder,
                    topic,
                    partitions = self.partitions,
                    replication_factor = self.replication_factor,
                    "created kafka topic"
                );
                Ok(())
            }
            // Another producer (or a concurrent start) got there first.
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => Ok(()),
            Err((_, code)) => Err(create_error(KafkaError::AdminOp(code))),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.known.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
