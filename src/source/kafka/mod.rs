//! A `kafka` source: a consumer in a consumer group, reading what node gateways'
//! `kafka` forwarders produced and appending each event, with the id, node, seq and
//! times it had there, to this gateway's exchange.
//!
//! At least once: a message's offset is stored for librdkafka's (auto) commit only
//! once its event is durable in the spool, in the order the messages were read, so
//! a crash, a rebalance or a broker outage can make events be read again but never
//! skipped. Stores drop repeats by event id.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use rdkafka::consumer::{
    BaseConsumer, CommitMode, Consumer as _, ConsumerContext, RebalanceProtocol, StreamConsumer,
};
use rdkafka::error::KafkaError;
use rdkafka::message::{Headers as _, Message as _};
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use tokio_util::sync::CancellationToken;

use crate::exchange::{AcceptError, Durable, Exchange, Incoming};
use crate::forward::BuildError;

pub(crate) mod backlog;
pub(crate) mod claims;
pub(crate) mod decode;
pub(crate) mod options;

pub(crate) use backlog::KafkaBacklog;
pub(crate) use claims::Claims;
pub(crate) use options::SourceOptions;

#[cfg(test)]
pub(crate) fn decode_record(
    record: &crate::forward::kafka::Record,
) -> Result<crate::event::Event, String> {
    let message = decode::Message {
        topic: &record.topic,
        partition: 0,
        offset: 0,
        headers: record
            .headers
            .iter()
            .map(|(k, v)| (*k, v.as_bytes()))
            .collect(),
        value: record.value.as_deref(),
    };
    decode::decode(&message, options::Format::Auto, &Arc::from("test")).map_err(|e| e.to_string())
}

/// At most this many events appended and not yet durable; at the bound the source
/// stops reading until the oldest is durable (the rest wait in Kafka).
const MAX_IN_FLIGHT: usize = 4096;

/// Between attempts to append while the exchange has no room (a full `block` queue,
/// a full spool, a disk at its reserve).
const FULL_PAUSE: Duration = Duration::from_millis(50);

/// After a consumer error, before reading again.
const ERROR_PAUSE: Duration = Duration::from_millis(100);

/// librdkafka's logs and errors, into tracing, secrets scrubbed; and the group's
/// assignments and revocations.
struct SourceContext {
    source: Arc<str>,
    secrets: Vec<String>,
    /// librdkafka's errors (a broker down) count as the consumer failing; the
    /// partitions held are kept here for `/status` and `/readyz`.
    stats: Arc<super::SourceStats>,
    /// `eventgate_source_assigned_partitions`.
    assigned: metrics::Gauge,
    /// Claims partitions in the store that keeps the offsets, at each assignment.
    claims: Option<Arc<Claims>>,
}

impl ClientContext for SourceContext {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, facility: &str, message: &str) {
        use rdkafka::config::RDKafkaLogLevel::*;
        let message = crate::redact::text(message, &self.secrets);
        match level {
            Emerg | Alert | Critical | Error => {
                tracing::error!(source = %self.source, facility, "librdkafka: {message}")
            }
            Warning => tracing::warn!(source = %self.source, facility, "librdkafka: {message}"),
            _ => tracing::debug!(source = %self.source, facility, "librdkafka: {message}"),
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        metrics::counter!("eventgate_source_errors_total", "source" => self.source.to_string())
            .increment(1);
        let reason = crate::redact::text(reason, &self.secrets);
        self.stats.consumer_failed(crate::redact::text(
            &format!("kafka consumer: {error}: {reason}"),
            &self.secrets,
        ));
        tracing::warn!(source = %self.source, %error, "kafka consumer: {reason}");
    }
}

impl ConsumerContext for SourceContext {
    /// Every assignment and revocation passes here, to be logged and kept for
    /// `/status`; librdkafka's assign and unassign are then done as its default
    /// handler does them (incrementally with the cooperative protocol).
    fn rebalance(
        &self,
        consumer: &BaseConsumer<Self>,
        err: rdkafka::types::RDKafkaRespErr,
        partitions: &mut TopicPartitionList,
    ) {
        use rdkafka::types::RDKafkaRespErr::{
            RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS, RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS,
        };
        let incremental = matches!(
            consumer.rebalance_protocol(),
            RebalanceProtocol::Cooperative
        );
        match err {
            RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                if let Err(error) = self.on_assign(partitions) {
                    self.stats.consumer_failed(format!(
                        "cannot claim the assigned partitions in the offsets' store: {error}"
                    ));
                    tracing::error!(source = %self.source, %error, "cannot claim the assigned partitions in the offsets' store; reading nothing, the consumer starts again and rejoins");
                    if !incremental && let Err(error) = consumer.assign(&TopicPartitionList::new())
                    {
                        tracing::warn!(source = %self.source, %error, "librdkafka could not assign nothing");
                    }
                    return;
                }
                let done = if incremental {
                    consumer.incremental_assign(partitions)
                } else {
                    consumer.assign(partitions)
                };
                if let Err(error) = done {
                    tracing::error!(source = %self.source, %error, "librdkafka refused the group's assignment; the source reads nothing until the next rebalance");
                    self.stats
                        .consumer_failed(format!("assigning partitions: {error}"));
                    return;
                }
                let listed = listed(partitions);
                let (generation, member_id) = membership(consumer).unzip();
                let held = self
                    .stats
                    .assigned(&listed, incremental, generation, member_id.clone());
                self.assigned.set(held as f64);
                tracing::info!(
                    source = %self.source,
                    generation,
                    member_id,
                    partitions = %super::starvation::partition_list(&listed),
                    held,
                    "kafka source assigned partitions"
                );
            }
            RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                // Lost rather than handed over: the group went on without this
                // member (a session that ran out); what it read since its last
                // commit is read again by the new owner.
                let lost = consumer.assignment_lost();
                if let Some(claims) = &self.claims {
                    claims.revoke(partitions);
                }
                let done = if incremental {
                    consumer.incremental_unassign(partitions)
                } else {
                    consumer.unassign()
                };
                if let Err(error) = done {
                    tracing::warn!(source = %self.source, %error, "librdkafka could not unassign the revoked partitions");
                }
                let listed = listed(partitions);
                let held = self.stats.revoked(Some(&listed));
                self.assigned.set(held as f64);
                // The generation of the assignment it gives up: no request to
                // librdkafka's group thread, which a closing consumer may have
                // stopped serving.
                let generation = self.stats.assignment().generation;
                tracing::info!(
                    source = %self.source,
                    generation,
                    partitions = %super::starvation::partition_list(&listed),
                    held,
                    lost,
                    "kafka source revoked partitions"
                );
            }
            other => {
                let error = KafkaError::Rebalance(other.into());
                tracing::warn!(source = %self.source, %error, "kafka rebalance failed; the source gives up its partitions until the next one");
                if let Err(error) = consumer.unassign() {
                    tracing::warn!(source = %self.source, %error, "librdkafka could not unassign");
                }
                if let Some(claims) = &self.claims {
                    claims.clear();
                }
                self.stats.revoked(None);
                self.assigned.set(0.0);
            }
        }
    }

    fn commit_callback(&self, result: rdkafka::error::KafkaResult<()>, _: &TopicPartitionList) {
        if let Err(error) = result {
            // Nothing to store means nothing new to commit: not a failure.
            if error.rdkafka_error_code() != Some(rdkafka::types::RDKafkaErrorCode::NoOffset) {
                metrics::counter!("eventgate_source_errors_total", "source" => self.source.to_string())
                    .increment(1);
                tracing::warn!(source = %self.source, %error, "committing offsets failed; they are committed again with the next ones");
            }
        }
    }
}

impl SourceContext {
    /// Where assigned partitions start, before librdkafka fetches them: for a source
    /// whose offsets a `postgres` store keeps, each is claimed there and starts at
    /// the store's offset ([`Claims::assign`]); otherwise at the group's committed
    /// offset (nothing to do). It runs on the task polling the consumer, during the
    /// rebalance, and the group waits for it.
    fn on_assign(
        &self,
        partitions: &mut TopicPartitionList,
    ) -> Result<(), crate::postgres::PostgresError> {
        match &self.claims {
            Some(claims) => claims.assign(partitions),
            None => Ok(()),
        }
    }
}

/// (topic, partition) pairs of a list, in order.
fn listed(partitions: &TopicPartitionList) -> Vec<(String, i32)> {
    let mut listed: Vec<(String, i32)> = partitions
        .elements()
        .iter()
        .map(|p| (p.topic().to_owned(), p.partition()))
        .collect();
    listed.sort();
    listed
}

/// The consumer's group generation and member id, as librdkafka has them now;
/// `None` before it has joined (or without a group).
fn membership(consumer: &BaseConsumer<SourceContext>) -> Option<(i32, String)> {
    use rdkafka::bindings as rd;
    let native = consumer.client().native_ptr();
    // SAFETY: `native` is the live client `consumer` owns. The metadata object
    // librdkafka returns is owned here: read, then destroyed once; the member id
    // string it points to is copied before that.
    unsafe {
        let metadata = rd::rd_kafka_consumer_group_metadata(native);
        if metadata.is_null() {
            return None;
        }
        let generation = rd::rd_kafka_consumer_group_metadata_generation_id(metadata);
        let member = rd::rd_kafka_consumer_group_metadata_member_id(metadata);
        let member = if member.is_null() {
            String::new()
        } else {
            std::ffi::CStr::from_ptr(member)
                .to_string_lossy()
                .into_owned()
        };
        rd::rd_kafka_consumer_group_metadata_destroy(metadata);
        (generation >= 0).then_some((generation, member))
    }
}

/// Where a message is in Kafka.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Position {
    topic: Arc<str>,
    partition: i32,
    offset: i64,
}

/// A message read: its event on its way to the disk, or nothing to wait for (a
/// skipped message, whose offset is stored in its turn all the same).
struct Pending {
    at: Position,
    durable: Option<Durable>,
}

pub(crate) struct Consumer {
    name: Arc<str>,
    consumer: StreamConsumer<SourceContext>,
    format: options::Format,
    exchange: Exchange,
    cancel: CancellationToken,
    pending: VecDeque<Pending>,
    /// The last offset stored per partition, committed once more at stop.
    stored: HashMap<(Arc<str>, i32), i64>,
    topics: HashMap<String, Arc<str>>,
    inflight: metrics::Gauge,
    taken_in: metrics::Counter,
    stats: Arc<super::SourceStats>,
    claims: Option<Arc<Claims>>,
}

impl Consumer {
    /// Creates the consumer and subscribes; connecting happens in the background.
    /// `node` is the gateway's node name, of which the default `instance_id` is
    /// made.
    pub(crate) fn start(
        name: Arc<str>,
        options: &SourceOptions,
        node: &str,
        exchange: Exchange,
        cancel: CancellationToken,
        stats: Arc<super::SourceStats>,
        claims: Option<Arc<Claims>>,
    ) -> Result<Self, BuildError> {
        let instance = options.group_instance_id(&name, node)?;
        let label = name.to_string();
        let assigned =
            metrics::gauge!("eventgate_source_assigned_partitions", "source" => label.clone());
        assigned.set(0.0);
        stats.assignment_reset();
        let context = SourceContext {
            source: Arc::clone(&name),
            secrets: options.secrets(),
            stats: Arc::clone(&stats),
            assigned,
            claims: claims.clone(),
        };
        let consumer: StreamConsumer<SourceContext> = options
            .client_config(&name, instance.as_deref())
            .create_with_context(context)
            .map_err(|e| BuildError::Options(options.describe(&e)))?;
        let topics: Vec<&str> = options.topics.iter().map(String::as_str).collect();
        consumer
            .subscribe(&topics)
            .map_err(|e| BuildError::Options(options.describe(&e)))?;
        tracing::info!(
            source = %name,
            topics = ?options.topics,
            group = %options.group,
            instance_id = instance.as_deref().unwrap_or("(none: dynamic membership)"),
            "kafka source subscribed"
        );
        let inflight =
            metrics::gauge!("eventgate_source_inflight_events", "source" => label.clone());
        inflight.set(0.0);
        Ok(Self {
            taken_in: metrics::counter!("eventgate_source_events_total", "source" => label),
            name,
            consumer,
            format: options.value_format,
            exchange,
            cancel,
            pending: VecDeque::new(),
            stored: HashMap::new(),
            topics: HashMap::new(),
            inflight,
            stats,
            claims,
        })
    }

    pub(crate) async fn run(mut self) {
        let claims = self.claims.clone();
        let claim_failed = async {
            match &claims {
                Some(claims) => claims.failed().await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(claim_failed);
        loop {
            let room = self.pending.len() < MAX_IN_FLIGHT;
            tokio::select! {
                biased;
                () = self.cancel.cancelled() => break,
                () = &mut claim_failed => break,
                synced = next_durable(&mut self.pending) => {
                    if !self.done(synced) {
                        break;
                    }
                }
                received = self.consumer.recv(), if room => match received {
                    Ok(message) => {
                        self.stats.read_one();
                        let topic = intern(&mut self.topics, message.topic());
                        let taken = self.take(topic, &message);
                        drop(message);
                        if !self.append(taken).await {
                            break;
                        }
                    }
                    Err(error) => {
                        self.stats.consumer_failed(format!("kafka consumer error: {error}"));
                        metrics::counter!("eventgate_source_errors_total", "source" => self.name.to_string()).increment(1);
                        tracing::warn!(source = %self.name, %error, "kafka consumer error");
                        // librdkafka retries on its own; an error that repeats at
                        // once must not spin this task.
                        tokio::select! {
                            () = self.cancel.cancelled() => break,
                            () = tokio::time::sleep(ERROR_PAUSE) => {}
                        }
                    }
                },
            }
        }
        self.finish().await;
    }

    /// The message as an event, or why it cannot be one (counted and logged here).
    fn take(
        &self,
        topic: Arc<str>,
        message: &rdkafka::message::BorrowedMessage<'_>,
    ) -> (Position, Option<crate::event::Event>) {
        let at = Position {
            topic,
            partition: message.partition(),
            offset: message.offset(),
        };
        let headers = message
            .headers()
            .map(|headers| {
                headers
                    .iter()
                    .map(|h| (h.key, h.value.unwrap_or_default()))
                    .collect()
            })
            .unwrap_or_default();
        let view = decode::Message {
            topic: message.topic(),
            partition: at.partition,
            offset: at.offset,
            headers,
            value: message.payload(),
        };
        let event = match decode::decode(&view, self.format, &self.name) {
            Ok(event) => event,
            Err(error) => {
                self.skipped(&at, error.reason(), &error);
                return (at, None);
            }
        };
        match self.exchange.check_envelope(&event.envelope) {
            Ok(()) => (at, Some(event)),
            Err(refused) => {
                self.skipped(&at, refused.reason(), &refused);
                (at, None)
            }
        }
    }

    fn skipped(&self, at: &Position, reason: &'static str, error: &dyn std::fmt::Display) {
        self.stats.skipped_one();
        self.stats.failed(format!(
            "skipped {}/{} offset {} ({reason}): {error}",
            at.topic, at.partition, at.offset
        ));
        metrics::counter!("eventgate_source_skipped_total", "source" => self.name.to_string(), "reason" => reason)
            .increment(1);
        tracing::warn!(
            source = %self.name,
            topic = %at.topic,
            partition = at.partition,
            offset = at.offset,
            reason,
            %error,
            "kafka message skipped: it stays in the topic at this offset until the topic's retention removes it"
        );
    }

    /// Appends the event, waiting while the exchange has no room: what is not read
    /// waits in Kafka. False once the exchange is closed or cannot write.
    async fn append(&mut self, (at, event): (Position, Option<crate::event::Event>)) -> bool {
        let Some(event) = event else {
            self.push(at, None);
            return true;
        };
        let position = match &self.claims {
            Some(claims) => match claims.position(&at.topic, at.partition, at.offset) {
                Some(position) => Some(position),
                None => {
                    // Revoked since it was fetched: its new owner reads it.
                    tracing::debug!(source = %self.name, topic = %at.topic, partition = at.partition, offset = at.offset, "message of a partition this gateway no longer claims; left to its owner");
                    return true;
                }
            },
            None => None,
        };
        let mut warned = false;
        loop {
            let incoming = Incoming::taken_in(event.identity.clone(), event.envelope.clone())
                .kafka_position(position.clone());
            match self.exchange.append(incoming).await {
                Ok(appended) => {
                    self.taken_in.increment(1);
                    self.stats.took_in();
                    self.push(at, Some(appended.durable));
                    return true;
                }
                Err(
                    full @ (AcceptError::QueueFull(_)
                    | AcceptError::SpoolFull(_)
                    | AcceptError::DiskLow(_)),
                ) => {
                    if !warned {
                        tracing::warn!(source = %self.name, error = %full, "no room for the source's events; reading no further until there is");
                        warned = true;
                    }
                    tokio::select! {
                        () = self.cancel.cancelled() => return false,
                        () = tokio::time::sleep(FULL_PAUSE) => {}
                    }
                }
                Err(AcceptError::Closed) => return false,
                // One record over the spool's limit: this message, not the disk.
                Err(error @ AcceptError::Spool(crate::spool::SpoolError::TooLarge { .. })) => {
                    self.skipped(&at, "too_large", &error);
                    self.push(at, None);
                    return true;
                }
                Err(error @ AcceptError::Spool(_)) => {
                    tracing::error!(source = %self.name, %error, "cannot spool the source's events; it stops reading, and what was not durable is read again at the next start");
                    return false;
                }
                Err(error) => {
                    self.skipped(&at, error.reason(), &error);
                    self.push(at, None);
                    return true;
                }
            }
        }
    }

    fn push(&mut self, at: Position, durable: Option<Durable>) {
        self.pending.push_back(Pending { at, durable });
        self.inflight.set(self.pending.len() as f64);
    }

    /// The oldest message's event is durable (or it had none): its offset is
    /// stored. False when the spool failed to write it.
    fn done(&mut self, (at, synced): (Position, Result<(), AcceptError>)) -> bool {
        self.inflight.set(self.pending.len() as f64);
        if let Err(error) = synced {
            tracing::error!(source = %self.name, %error, "a taken-in event could not be made durable; the source stops, and reads it again at the next start");
            return false;
        }
        if let Err(error) = self
            .consumer
            .store_offset(&at.topic, at.partition, at.offset)
        {
            // The partition was revoked meanwhile: its new owner reads from the last
            // commit, and stores drop what is read twice.
            tracing::debug!(source = %self.name, topic = %at.topic, partition = at.partition, %error, "offset not stored");
            return true;
        }
        self.stored.insert((at.topic, at.partition), at.offset);
        true
    }

    /// Waits for what was appended, then commits the last stored offsets, so the
    /// next start (or the partitions' next owner) reads on from there.
    async fn finish(mut self) {
        while !self.pending.is_empty() {
            let synced = next_durable(&mut self.pending).await;
            if !self.done(synced) {
                break;
            }
        }
        // Only partitions still assigned: committing for one that moved to another
        // member could take its committed offset back.
        let assigned = self.consumer.assignment().unwrap_or_default();
        let mut positions = TopicPartitionList::new();
        for ((topic, partition), offset) in &self.stored {
            if assigned.find_partition(topic, *partition).is_none() {
                continue;
            }
            if let Err(error) =
                positions.add_partition_offset(topic, *partition, Offset::Offset(offset + 1))
            {
                tracing::warn!(source = %self.name, %error, "cannot list an offset to commit");
            }
        }
        if positions.count() > 0 {
            match self.consumer.commit(&positions, CommitMode::Sync) {
                Ok(()) => {
                    tracing::info!(source = %self.name, partitions = positions.count(), "kafka source committed its offsets")
                }
                Err(error) => {
                    tracing::warn!(source = %self.name, %error, "the last offsets could not be committed; events since the previous commit are read again (stores drop repeats)")
                }
            }
        }
        self.inflight.set(0.0);
    }
}

/// The oldest pending message once its event is durable; never resolves while
/// nothing is pending. Cancel-safe: the entry stays until it resolves.
async fn next_durable(pending: &mut VecDeque<Pending>) -> (Position, Result<(), AcceptError>) {
    let synced = std::future::poll_fn(|cx| match pending.front_mut() {
        Some(Pending {
            durable: Some(durable),
            ..
        }) => std::pin::Pin::new(durable).poll(cx),
        Some(Pending { durable: None, .. }) => std::task::Poll::Ready(Ok(())),
        None => std::task::Poll::Pending,
    })
    .await;
    match pending.pop_front() {
        Some(entry) => (entry.at, synced),
        // Only reached with an entry: poll_fn resolves for the front one.
        None => std::future::pending().await,
    }
}

/// One shared name per topic, rather than one allocation per message.
fn intern(topics: &mut HashMap<String, Arc<str>>, topic: &str) -> Arc<str> {
    if let Some(name) = topics.get(topic) {
        return Arc::clone(name);
    }
    let name: Arc<str> = Arc::from(topic);
    topics.insert(topic.to_owned(), Arc::clone(&name));
    name
}
