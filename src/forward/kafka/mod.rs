//! The `kafka` forwarder: produces each event as one Kafka message with librdkafka
//! (idempotent, `acks=all` by default).
//!
//! A batch counts as delivered only when librdkafka has a successful delivery report
//! for every one of its messages. Any failure fails the whole batch and the pipeline
//! sends it again, so Kafka may hold a message more than once (at-least-once); the
//! `event_id` header lets consumers drop duplicates.
//!
//! Backpressure: messages are enqueued with `send_result`; when librdkafka's queue is
//! full, `send` waits for this batch's oldest message to be settled (or briefly, if
//! the queue is full of older messages) before trying again, bounded by
//! `message_timeout`. The pipeline's own queue, not librdkafka's, absorbs a slow
//! broker.
//!
//! Topics: a fixed topic is checked (and created when `create_topic = true`) when
//! the forwarder starts, and a missing one stops the start. A template topic is
//! checked the first time each name is used: created when allowed; otherwise the
//! events for it are given up (a permanent error naming the topic) while the rest of
//! the batch is still delivered.

mod cloudevents;
mod config;
mod context;
pub(crate) mod metric_table;
mod outcome;
mod properties;
mod record;
mod security;
mod topics;

use std::collections::{BTreeSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::future::BoxFuture;
use rdkafka::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{DeliveryFuture, Producer as _, PurgeConfig};
use tokio::time::Instant;

pub(crate) use config::KafkaOptions;
// What a Kafka source shares with the forwarder: brokers, TLS, SASL, passthrough
// properties, read and checked the same way.
pub(crate) use config::{Brokers, describe, probe, secrets};
pub(crate) use properties::Properties;
pub(crate) use record::{Record, RecordEncoder};
#[cfg(any(test, feature = "bench"))]
pub(crate) use record::{TopicTemplate, ValueFormat};
pub(crate) use security::{OWNED as SECURITY_OWNED, Sasl, Security, Tls};

use super::{Batch, BuildError, Context, ForwardError, Forwarder, Kind, Options};
use context::{BrokersDown, LogContext, Producer, Trouble};
use outcome::Outcome;
use topics::{TopicError, Topics};

/// How long a metadata lookup or topic creation may take.
const METADATA_TIMEOUT: Duration = Duration::from_secs(10);

/// While librdkafka's queue is full of messages this batch did not send, how often
/// to look for room.
const QUEUE_FULL_PAUSE: Duration = Duration::from_millis(5);

pub struct KafkaKind;

impl Kind for KafkaKind {
    fn check(&self, options: &Options) -> Result<(), BuildError> {
        KafkaOptions::parse(options)?.probe()
    }

    fn build<'a>(
        &'a self,
        context: &'a Context,
        options: &'a Options,
    ) -> BoxFuture<'a, Result<Arc<dyn Forwarder>, BuildError>> {
        Box::pin(async move {
            let forwarder = KafkaForwarder::start(context, options).await?;
            Ok(Arc::new(forwarder) as Arc<dyn Forwarder>)
        })
    }
}

/// The librdkafka configuration a `kafka` forwarder table produces with (for a
/// benchmark's plain producer to match it).
#[cfg(feature = "bench")]
pub(crate) fn client_config(
    forwarder: &str,
    options: &Options,
) -> Result<ClientConfig, BuildError> {
    Ok(KafkaOptions::parse(options)?.client_config(forwarder))
}

pub(crate) struct KafkaForwarder {
    name: Arc<str>,
    options: KafkaOptions,
    /// Kept to recreate the producer after a fatal error. Never printed: it holds
    /// secrets.
    config: ClientConfig,
    encoder: RecordEncoder,
    /// `None` once closed.
    producer: Mutex<Option<Arc<Producer>>>,
    topics: Topics,
    trouble: Arc<Trouble>,
    /// Batches in a row whose every message timed out (see `STALLED_BATCHES`).
    stalled: std::sync::atomic::AtomicU32,
}

/// Batches in a row whose every message timed out, while the brokers answer metadata
/// requests, after which the producer is recreated. A broker replaced by an empty
/// one at the same address (it forgot the producer's id) is answered by librdkafka's
/// idempotent producer with no error at all: its messages just time out, and only a
/// new producer (a new id) gets through again.
const STALLED_BATCHES: u32 = 2;

impl KafkaForwarder {
    /// Connects, and checks (or creates) a fixed topic. Fails with a message that
    /// says what to fix when the topic is missing; unreachable brokers only warn.
    pub(crate) async fn start(context: &Context, options: &Options) -> Result<Self, BuildError> {
        let options = KafkaOptions::parse(options)?;
        let encoder = RecordEncoder::from_parsed(&options)?;
        let template = encoder.template().clone();
        let name: Arc<str> = context.name.as_str().into();
        let config = options.client_config(&name);
        let down = Arc::new(BrokersDown::default());
        let trouble = Arc::new(Trouble::default());
        let producer = create_producer(&config, &options, &name, Arc::clone(&down), &trouble)
            .await
            .map_err(|message| BuildError::Start {
                message,
                source: None,
            })?;
        let producer = Arc::new(producer);
        let topics = Topics::new(
            Arc::clone(&name),
            &config,
            options.create_topic,
            options.partitions,
            options.replication_factor,
            // A lookup waits no longer than a message would, so the attempt fails
            // with the brokers' own words before the pipeline's timeout cuts it.
            METADATA_TIMEOUT.min(options.message_timeout),
        );
        let brokers = options.brokers.joined();
        // Brokers that cannot be reached at start are not fatal: a node's audit trail
        // must not stop because Kafka is down at boot. Events wait in the
        // spool and the topic is checked on first use. A topic that is
        // reported missing (and may not be created) is a configuration error, though.
        let unreachable = |error: &dyn std::fmt::Display| {
            tracing::warn!(
                forwarder = %name,
                brokers,
                error = %error,
                "kafka brokers not reachable at start; events wait in the spool and are retried"
            );
        };
        let check = async {
            match template.fixed() {
                Some(topic) => match topics.ensure(&producer, topic).await {
                    Ok(true) => Ok(()),
                    Ok(false) => Err(BuildError::Start {
                        message: format!(
                            "kafka topic {topic:?} does not exist on {brokers}: create it (for example `kafka-topics.sh --create --topic {topic}`), or set `create_topic = true` to let eventgate create it"
                        ),
                        source: None,
                    }),
                    Err(error @ TopicError::Metadata(_)) => {
                        unreachable(&error);
                        Ok(())
                    }
                    Err(error) => Err(BuildError::start(
                        format!("cannot check kafka topic {topic:?} on {brokers}"),
                        error,
                    )),
                },
                None => match topics.reachable(&producer).await {
                    Err(error @ TopicError::Metadata(_)) => {
                        unreachable(&error);
                        Ok(())
                    }
                    Err(error) => Err(BuildError::start(
                        format!("cannot reach the kafka brokers {brokers}"),
                        error,
                    )),
                    Ok(()) => Ok(()),
                },
            }
        };
        let checked = tokio::select! {
            checked = check => checked,
            () = down.wait() => {
                unreachable(&"every broker connection is down (librdkafka: AllBrokersDown)");
                Ok(())
            }
        };
        if let Err(error) = checked {
            drop_off_runtime(producer);
            return Err(error);
        }
        tracing::info!(
            forwarder = %name,
            brokers,
            topic = options.topic,
            idempotence = options.idempotence,
            value_format = ?options.value_format,
            key = ?options.key,
            "kafka forwarder connected"
        );
        Ok(Self {
            encoder,
            name,
            options,
            config,
            producer: Mutex::new(Some(producer)),
            trouble,
            topics,
            stalled: std::sync::atomic::AtomicU32::new(0),
        })
    }

    fn producer(&self) -> Option<Arc<Producer>> {
        self.producer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Delivers a batch; a failure names what the brokers last failed with (a TLS
    /// handshake, SASL authentication), which a timeout alone would hide.
    async fn deliver(&self, batch: &Batch) -> Result<(), ForwardError> {
        let result = self.deliver_batch(batch).await;
        match result {
            Ok(()) => {
                self.trouble.clear();
                Ok(())
            }
            Err(mut error) => {
                if let Some(trouble) = self.trouble.get() {
                    error.message =
                        format!("{} (the brokers last reported: {trouble})", error.message);
                }
                Err(error)
            }
        }
    }

    async fn deliver_batch(&self, batch: &Batch) -> Result<(), ForwardError> {
        let producer = self
            .producer()
            .ok_or_else(|| ForwardError::permanent("the kafka forwarder is closed"))?;
        let records: Vec<Record> = batch
            .events()
            .iter()
            .map(|e| self.encoder.encode(e))
            .collect();
        let mut missing = BTreeSet::new();
        let names: BTreeSet<&str> = records.iter().map(|r| r.topic.as_str()).collect();
        for topic in names {
            match self.topics.ensure(&producer, topic).await {
                Ok(true) => {}
                Ok(false) => {
                    missing.insert(topic.to_owned());
                }
                Err(error) => {
                    return Err(ForwardError::retryable(format!(
                        "cannot look up kafka topic {topic:?}"
                    ))
                    .with_source(error));
                }
            }
        }

        let mut outcome = Outcome::default();
        let mut pending: VecDeque<(&str, DeliveryFuture)> = VecDeque::new();
        let give_up = Instant::now() + self.options.message_timeout;
        for record in records.iter().filter(|r| !missing.contains(&r.topic)) {
            // The batch will be sent again anyway: enqueueing the rest now would
            // only add duplicates and, with the broker gone, more waiting.
            if outcome.must_retry() {
                break;
            }
            let mut message = record.future_record();
            loop {
                match producer.send_result(message) {
                    Ok(delivery) => {
                        pending.push_back((&record.topic, delivery));
                        break;
                    }
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                        message = back;
                        metrics::counter!("eventgate_kafka_queue_full_total", "forwarder" => self.name.to_string())
                            .increment(1);
                        if let Some((topic, oldest)) = pending.pop_front() {
                            settle(&mut outcome, topic, oldest.await);
                        } else if Instant::now() < give_up {
                            tokio::time::sleep(QUEUE_FULL_PAUSE).await;
                        } else {
                            return Err(ForwardError::retryable(format!(
                                "librdkafka's producer queue stayed full for {:?}",
                                self.options.message_timeout
                            )));
                        }
                    }
                    Err((error, _)) => {
                        outcome.fail(&record.topic, error);
                        break;
                    }
                }
            }
        }
        for (topic, delivery) in pending {
            settle(&mut outcome, topic, delivery.await);
        }

        let label = self.name.to_string();
        metrics::counter!("eventgate_kafka_messages_total", "forwarder" => label.clone())
            .increment(outcome.delivered as u64);
        if outcome.failed > 0 {
            metrics::counter!("eventgate_kafka_message_errors_total", "forwarder" => label)
                .increment(outcome.failed as u64);
        }
        for topic in &outcome.unknown_topics {
            self.topics.forget(topic);
        }
        if let Some((code, reason)) = producer.client().fatal_error() {
            outcome.fatal = true;
            tracing::error!(forwarder = %self.name, %code, reason, "kafka producer hit a fatal error; recreating it");
        } else if self.stalled_again(&outcome) && self.topics.reachable(&producer).await.is_ok() {
            outcome.fatal = true;
            tracing::warn!(forwarder = %self.name, batches = STALLED_BATCHES, "every message of the last batches timed out while the brokers answer; recreating the kafka producer");
        }
        if outcome.fatal {
            self.recreate(producer).await;
        }
        outcome.verdict(&missing, records.len())
    }

    /// Counts a batch whose every message timed out; true once `STALLED_BATCHES` such
    /// batches came in a row (the count starts again).
    fn stalled_again(&self, outcome: &Outcome) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        if !outcome.all_timed_out() {
            self.stalled.store(0, Relaxed);
            return false;
        }
        let stalled = self.stalled.fetch_add(1, Relaxed) + 1;
        if stalled < STALLED_BATCHES {
            return false;
        }
        self.stalled.store(0, Relaxed);
        true
    }

    /// Replaces a producer that hit a fatal error (idempotent producer state lost);
    /// the failed batch is then retried on the new one.
    async fn recreate(&self, failed: Arc<Producer>) {
        match create_producer(
            &self.config,
            &self.options,
            &self.name,
            Arc::default(),
            &self.trouble,
        )
        .await
        {
            Ok(fresh) => {
                let mut slot = self.producer.lock().unwrap_or_else(PoisonError::into_inner);
                // The replaced producer, or the fresh one if the forwarder was
                // closed meanwhile.
                let unused = match slot.as_mut() {
                    Some(current) => std::mem::replace(current, Arc::new(fresh)),
                    None => Arc::new(fresh),
                };
                drop(slot);
                drop_off_runtime(unused);
                metrics::counter!("eventgate_kafka_producer_restarts_total", "forwarder" => self.name.to_string())
                    .increment(1);
            }
            Err(message) => {
                tracing::error!(forwarder = %self.name, error = message, "cannot recreate the kafka producer");
            }
        }
        drop_off_runtime(failed);
    }
}

fn settle(
    outcome: &mut Outcome,
    topic: &str,
    report: Result<
        rdkafka::producer::future_producer::OwnedDeliveryResult,
        futures::channel::oneshot::Canceled,
    >,
) {
    match report {
        Ok(Ok(_)) => outcome.delivered += 1,
        Ok(Err((error, _))) => outcome.fail(topic, error),
        Err(_) => outcome.fail(topic, KafkaError::Canceled),
    }
}

/// Creating a librdkafka handle may read files (certificates, keys): off the runtime.
async fn create_producer(
    config: &ClientConfig,
    options: &KafkaOptions,
    name: &Arc<str>,
    down: Arc<BrokersDown>,
    trouble: &Arc<Trouble>,
) -> Result<Producer, String> {
    let config = config.clone();
    let context = LogContext::new(Arc::clone(name), down)
        .hiding(options.secrets())
        .reporting(Arc::clone(trouble));
    let created =
        tokio::task::spawn_blocking(move || config.create_with_context::<_, Producer>(context))
            .await
            .map_err(|error| format!("the kafka producer creation task failed: {error}"))?;
    created.map_err(|error| {
        format!(
            "cannot create the kafka producer: {}",
            options.describe(&error)
        )
    })
}

/// Destroying a librdkafka handle joins its threads; keep that off the runtime.
fn drop_off_runtime<T: Send + 'static>(value: T) {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => drop(handle.spawn_blocking(move || drop(value))),
        Err(_) => drop(value),
    }
}

impl Forwarder for KafkaForwarder {
    fn send<'a>(&'a self, batch: &'a Batch) -> BoxFuture<'a, Result<(), ForwardError>> {
        Box::pin(self.deliver(batch))
    }

    fn close(&self) -> BoxFuture<'_, Result<(), ForwardError>> {
        Box::pin(async move {
            let Some(producer) = self
                .producer
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take()
            else {
                return Ok(());
            };
            let timeout = self.options.message_timeout;
            // The pipeline may stop waiting (its drain deadline) before the flush is
            // done; the flag tells the blocking flush to give up then, purging what
            // is left so dropping the producer does not block the process's exit
            // for the whole message timeout. Purged events are not acknowledged: the
            // spool delivers them at the next start.
            let abandoned = Arc::new(AtomicBool::new(false));
            let _abandon_on_drop = AbandonOnDrop(Arc::clone(&abandoned));
            tokio::task::spawn_blocking(move || {
                let deadline = std::time::Instant::now() + timeout;
                let flushed = loop {
                    match producer.flush(Duration::from_millis(100)) {
                        Ok(()) => break Ok(()),
                        Err(error)
                            if abandoned.load(Ordering::Acquire)
                                || std::time::Instant::now() >= deadline =>
                        {
                            producer.purge(PurgeConfig::default().queue().inflight());
                            break Err(error);
                        }
                        Err(_) => {}
                    }
                };
                drop(producer);
                flushed
            })
            .await
            .map_err(|e| ForwardError::retryable("the kafka flush task failed").with_source(e))?
            .map_err(|e| {
                ForwardError::retryable("flushing the kafka producer failed").with_source(e)
            })
        })
    }
}

/// Sets the flag when the close future is dropped unfinished.
struct AbandonOnDrop(Arc<AtomicBool>);

impl Drop for AbandonOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

impl Drop for KafkaForwarder {
    fn drop(&mut self) {
        let producer = self
            .producer
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        drop_off_runtime(producer);
    }
}
