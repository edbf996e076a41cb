//! A Kafka source whose offsets a `postgres` store keeps (`offsets = "<forwarder>"`):
//! the consumer side of the transactional consumer ([`crate::postgres::offsets`]).
//!
//! At each assignment the partitions are claimed in the database before librdkafka
//! starts fetching them, and each starts at the offset the database holds; one the
//! database has no offset for starts at its beginning, never at the group's committed
//! offset (see [`Claims::assign`]). Every message read carries its partition's claim,
//! and the store writes it only while that claim is current. A claim that cannot be
//! made (the server is down) ends the consumer: it starts again a second later and
//! rejoins, and nothing is read meanwhile.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use rdkafka::{Offset, TopicPartitionList};
use tokio::sync::Notify;

use crate::event::KafkaPosition;
use crate::postgres::{PostgresError, Target, offsets};

pub(crate) struct Claims {
    /// The `postgres` forwarder that keeps the offsets.
    store: Arc<str>,
    group: Arc<str>,
    /// Who claimed, as the offsets table shows it.
    owner: String,
    target: Target,
    /// The current claim's epoch per (topic, partition).
    epochs: Mutex<HashMap<(Arc<str>, i32), i64>>,
    failed: Notify,
}

impl Claims {
    pub(crate) fn new(store: Arc<str>, group: Arc<str>, owner: String, target: Target) -> Self {
        Self {
            store,
            group,
            owner,
            target,
            epochs: Mutex::new(HashMap::new()),
            failed: Notify::new(),
        }
    }

    /// Claims the assigned `partitions` and sets each one's start to the offset the
    /// store holds. Runs on librdkafka's callback, which must not return before the
    /// offsets are known: the claim runs on a thread of its own (the callback may be
    /// on the gateway's only runtime thread) and this waits for it.
    pub(crate) fn assign(&self, partitions: &mut TopicPartitionList) -> Result<(), PostgresError> {
        let mut by_topic: BTreeMap<String, Vec<i32>> = BTreeMap::new();
        for element in partitions.elements() {
            by_topic
                .entry(element.topic().to_owned())
                .or_default()
                .push(element.partition());
        }
        if by_topic.is_empty() {
            return Ok(());
        }
        let claimed = std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .map_err(|e| {
                            PostgresError::Config(format!("cannot claim partitions: {e}"))
                        })?;
                    // The gateway's runtime waits for this callback: a server that
                    // accepts the connection and then hangs must not hold it longer
                    // than one connection attempt may take.
                    let budget = self.target.connect_timeout();
                    runtime
                        .block_on(async {
                            tokio::time::timeout(budget, self.claim(&by_topic)).await
                        })
                        .unwrap_or_else(|_| {
                            Err(PostgresError::Config(format!(
                                "claiming partitions took longer than {budget:?} (connect_timeout)"
                            )))
                        })
                })
                .join()
                .unwrap_or_else(|_| {
                    Err(PostgresError::Config(
                        "claiming partitions failed (the claiming thread panicked)".into(),
                    ))
                })
        });
        let claimed = match claimed {
            Ok(claimed) => claimed,
            Err(error) => {
                self.failed.notify_one();
                return Err(error);
            }
        };
        let mut epochs = self.epochs.lock().unwrap_or_else(PoisonError::into_inner);
        for (topic, claims) in claimed {
            let topic: Arc<str> = Arc::from(topic.as_str());
            for claim in claims {
                // Never the group's committed offset: librdkafka commits what is in
                // the spool, ahead of what the store holds, and starting there would
                // skip what another member read but did not store. A partition
                // never stored starts at its beginning (`start = "earliest"`, the
                // only start such a source takes).
                let start = claim.next_offset.map_or(Offset::Beginning, Offset::Offset);
                // The partition is in the list librdkafka handed over.
                let _ = partitions.set_partition_offset(&topic, claim.partition, start);
                tracing::info!(
                    store = %self.store,
                    group = %self.group,
                    topic = %topic,
                    partition = claim.partition,
                    epoch = claim.epoch,
                    next_offset = claim.next_offset,
                    "kafka partition claimed in the postgres store; reading from its stored offset"
                );
                epochs.insert((Arc::clone(&topic), claim.partition), claim.epoch);
            }
        }
        Ok(())
    }

    async fn claim(
        &self,
        by_topic: &BTreeMap<String, Vec<i32>>,
    ) -> Result<Vec<(String, Vec<offsets::Claim>)>, PostgresError> {
        let mut client = self.target.connect().await?;
        // The offsets' table may not exist yet: the forwarder makes the schema with
        // its first batch, and a source may be assigned partitions before that.
        crate::postgres::migrate::migrate(&mut client).await?;
        let mut claimed = Vec::with_capacity(by_topic.len());
        for (topic, partitions) in by_topic {
            let claims =
                offsets::claim(&mut client, &self.group, topic, partitions, &self.owner).await?;
            claimed.push((topic.clone(), claims));
        }
        Ok(claimed)
    }

    /// The partitions are no longer this member's: messages of theirs read from now
    /// on have no claim.
    pub(crate) fn revoke(&self, partitions: &TopicPartitionList) {
        let mut epochs = self.epochs.lock().unwrap_or_else(PoisonError::into_inner);
        for element in partitions.elements() {
            epochs.retain(|(topic, partition), _| {
                !(&**topic == element.topic() && *partition == element.partition())
            });
        }
    }

    /// Forgets every claim (the consumer ends).
    pub(crate) fn clear(&self) {
        self.epochs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    /// Where a message read now is, under its partition's current claim; `None` when
    /// the partition is not claimed by this member.
    pub(crate) fn position(
        &self,
        topic: &Arc<str>,
        partition: i32,
        offset: i64,
    ) -> Option<Arc<KafkaPosition>> {
        let epochs = self.epochs.lock().unwrap_or_else(PoisonError::into_inner);
        let epoch = *epochs.get(&(Arc::clone(topic), partition))?;
        Some(Arc::new(KafkaPosition {
            store: Arc::clone(&self.store),
            group: Arc::clone(&self.group),
            topic: Arc::clone(topic),
            partition,
            offset,
            epoch,
        }))
    }

    /// Resolves once a claim failed.
    pub(crate) async fn failed(&self) {
        self.failed.notified().await
    }
}
