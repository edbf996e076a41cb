//! Kafka offsets kept with the rows (`kafka_offsets`): the transactional consumer.
//!
//! A source that is assigned partitions claims each one here first: the claim raises
//! the partition's epoch and answers where its stored events end, and the source
//! starts reading there. Each message it reads carries the epoch it was read under.
//! The writer stores a batch only for partitions whose epoch is still the one its
//! events carry, holding their rows locked (`FOR UPDATE`) until its commit, and
//! moves `next_offset` in the same transaction. So a gateway that lost a partition
//! (a rebalance, a long pause, a SIGSTOP) and comes back with events it read before
//! writes none of them: the new owner claimed the partition since, and reads them
//! itself from the offset this table holds. Nothing is written twice, and nothing
//! is skipped, whichever gateway wins.

use std::collections::HashMap;

use tokio_postgres::{Client, Transaction};

use super::PostgresError;
use crate::event::KafkaPosition;

/// Where a claimed partition's stored events end, and the epoch to read it under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Claim {
    pub(crate) partition: i32,
    /// The first offset not stored yet; `None` before any of the partition's events
    /// were (start where the group's committed offset or `start` says).
    pub(crate) next_offset: Option<i64>,
    pub(crate) epoch: i64,
}

/// Claims `partitions` of `topic` for `owner` (a member of `group`), in one
/// transaction.
pub(crate) async fn claim(
    client: &mut Client,
    group: &str,
    topic: &str,
    partitions: &[i32],
    owner: &str,
) -> Result<Vec<Claim>, PostgresError> {
    let tx = client.transaction().await?;
    let statement = tx
        .prepare(
            "INSERT INTO kafka_offsets (consumer_group, topic, partition, next_offset, epoch, owner, claimed_at)
             VALUES ($1, $2, $3, NULL, 1, $4, now())
             ON CONFLICT (consumer_group, topic, partition) DO UPDATE
                 SET epoch = kafka_offsets.epoch + 1, owner = EXCLUDED.owner, claimed_at = now()
             RETURNING next_offset, epoch",
        )
        .await?;
    let mut claims = Vec::with_capacity(partitions.len());
    for &partition in partitions {
        let row = tx
            .query_one(&statement, &[&group, &topic, &partition, &owner])
            .await?;
        claims.push(Claim {
            partition,
            next_offset: row.get(0),
            epoch: row.get(1),
        });
    }
    tx.commit().await?;
    Ok(claims)
}

/// What the fence decided for a batch's taken-in events.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Fenced {
    /// Per event of the batch (in order): store it.
    pub(crate) keep: Vec<bool>,
    /// Read under an epoch that is no longer the partition's: another member owns it.
    pub(crate) stale: u64,
    /// Below the partition's `next_offset`: stored by an earlier transaction (a retry
    /// after a commit whose answer was lost).
    pub(crate) stored: u64,
    /// The offsets to record, per (group, topic, partition): the next one after the
    /// last kept event, and the epoch the update must still find.
    advance: HashMap<(String, String, i32), (i64, i64)>,
}

/// Locks the offset rows of every partition `positions` come from (this store's
/// only), and decides which events to store. `positions[i]` is event i's position,
/// `None` for events that came another way (always kept).
pub(crate) async fn fence(
    tx: &Transaction<'_>,
    store: &str,
    positions: &[Option<&KafkaPosition>],
) -> Result<Fenced, PostgresError> {
    let mut topics: HashMap<&str, Vec<&str>> = HashMap::new();
    for position in positions.iter().flatten() {
        if &*position.store != store {
            continue;
        }
        let listed = topics.entry(&position.group).or_default();
        if !listed.contains(&&*position.topic) {
            listed.push(&position.topic);
        }
    }
    let mut current: HashMap<(String, String, i32), (Option<i64>, i64)> = HashMap::new();
    for (group, topics) in &topics {
        let rows = tx
            .query(
                "SELECT topic, partition, next_offset, epoch FROM kafka_offsets
                 WHERE consumer_group = $1 AND topic = ANY($2)
                 ORDER BY topic, partition
                 FOR UPDATE",
                &[group, topics],
            )
            .await?;
        for row in rows {
            current.insert(
                ((*group).to_owned(), row.get(0), row.get(1)),
                (row.get(2), row.get(3)),
            );
        }
    }
    let mut fenced = Fenced {
        keep: Vec::with_capacity(positions.len()),
        ..Fenced::default()
    };
    for position in positions {
        let Some(position) = position.filter(|p| &*p.store == store) else {
            fenced.keep.push(true);
            continue;
        };
        let key = (
            position.group.to_string(),
            position.topic.to_string(),
            position.partition,
        );
        match current.get(&key) {
            Some(&(_, epoch)) if epoch != position.epoch => {
                fenced.stale += 1;
                fenced.keep.push(false);
            }
            Some(&(Some(next), _)) if position.offset < next => {
                fenced.stored += 1;
                fenced.keep.push(false);
            }
            Some(&(_, epoch)) => {
                fenced.keep.push(true);
                let advance = fenced.advance.entry(key).or_insert((0, epoch));
                advance.0 = advance.0.max(position.offset + 1);
            }
            // Never claimed in this database: read by a source whose claim is gone
            // (the table was emptied by hand). Not ours to store.
            None => {
                fenced.stale += 1;
                fenced.keep.push(false);
            }
        }
    }
    Ok(fenced)
}

/// Moves `next_offset` past the kept events, in the batch's transaction.
pub(crate) async fn advance(tx: &Transaction<'_>, fenced: &Fenced) -> Result<(), PostgresError> {
    for ((group, topic, partition), (next, epoch)) in &fenced.advance {
        tx.execute(
            "UPDATE kafka_offsets
             SET next_offset = GREATEST(COALESCE(next_offset, 0), $4), updated_at = now()
             WHERE consumer_group = $1 AND topic = $2 AND partition = $3 AND epoch = $5",
            &[group, topic, partition, next, epoch],
        )
        .await?;
    }
    Ok(())
}
