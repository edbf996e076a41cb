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

use std::collections::{BTreeSet, HashMap};

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
    /// Each locked partition's `next_offset` as the fence found it.
    found: HashMap<(String, String, i32), Option<i64>>,
}

/// The messages of a split batch's earlier slices, per partition (their highest
/// offset): a later slice may commit only once the offset rows show them stored.
#[derive(Debug, Default)]
pub(crate) struct Before {
    last: HashMap<(String, String, i32), i64>,
}

impl Before {
    /// The last offset of each partition among `events` read for `store`.
    pub(crate) fn of(store: &str, events: &[std::sync::Arc<crate::event::Event>]) -> Self {
        let mut last: HashMap<(String, String, i32), i64> = HashMap::new();
        for position in events.iter().filter_map(|e| e.kafka_position()) {
            if &*position.store != store {
                continue;
            }
            let key = (
                position.group.to_string(),
                position.topic.to_string(),
                position.partition,
            );
            let offset = last.entry(key).or_insert(position.offset);
            *offset = (*offset).max(position.offset);
        }
        Self { last }
    }

    /// Whether each partition the fence locked is stored past these messages.
    pub(crate) fn passed(&self, fenced: &Fenced) -> bool {
        fenced
            .found
            .iter()
            .all(|(key, next)| match self.last.get(key) {
                Some(&last) => next.is_some_and(|next| next > last),
                None => true,
            })
    }
}

/// Locks the offset rows of the partitions `positions` come from (this store's
/// only), and decides which events to store. `positions[i]` is event i's position,
/// `None` for events that came another way (always kept).
///
/// Only the batch's own partitions are locked: the rest of the group's belong to
/// other members (or to this one, with nothing in this batch), and locking them
/// too would make every member's batch wait for every other's commit.
pub(crate) async fn fence(
    tx: &Transaction<'_>,
    store: &str,
    positions: &[Option<&KafkaPosition>],
) -> Result<Fenced, PostgresError> {
    // Per group, the batch's partitions: (topic, partition), each once.
    let mut wanted: HashMap<&str, BTreeSet<(&str, i32)>> = HashMap::new();
    for position in positions.iter().flatten() {
        if &*position.store != store {
            continue;
        }
        wanted
            .entry(&position.group)
            .or_default()
            .insert((&position.topic, position.partition));
    }
    let mut current: HashMap<(String, String, i32), (Option<i64>, i64)> = HashMap::new();
    for (group, partitions) in &wanted {
        let (topics, numbers): (Vec<&str>, Vec<i32>) = partitions.iter().copied().unzip();
        // Locked in (topic, partition) order, as every batch locks them: two
        // batches never wait for each other in a cycle.
        let rows = tx
            .query(
                "SELECT topic, partition, next_offset, epoch FROM kafka_offsets
                 WHERE consumer_group = $1
                   AND (topic, partition) IN (SELECT * FROM unnest($2::text[], $3::int4[]))
                 ORDER BY topic, partition
                 FOR UPDATE",
                &[group, &topics, &numbers],
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
    fenced.found = current
        .into_iter()
        .map(|(key, (next, _))| (key, next))
        .collect();
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

/// Against a real server: the benchmark's own cluster (`bench` feature), as the
/// soak benchmark's broker tests do.
#[cfg(all(test, feature = "bench"))]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::bench::postgres::{Cluster, find_bin};
    use crate::postgres::migrate;

    fn read(partition: i32, offset: i64, epoch: i64) -> KafkaPosition {
        KafkaPosition {
            store: Arc::from("central"),
            group: Arc::from("g"),
            topic: Arc::from("t"),
            partition,
            offset,
            epoch,
        }
    }

    fn positions(read: &[KafkaPosition]) -> Vec<Option<&KafkaPosition>> {
        read.iter().map(Some).collect()
    }

    async fn next_offsets(client: &Client) -> Vec<(i32, Option<i64>, i64, String)> {
        client
            .query(
                "SELECT partition, next_offset, epoch, owner FROM kafka_offsets ORDER BY 1",
                &[],
            )
            .await
            .expect("reading the offsets")
            .iter()
            .map(|row| (row.get(0), row.get(1), row.get(2), row.get(3)))
            .collect()
    }

    /// Two members' batches, each of its own partitions, do not wait for each
    /// other; a claim of a partition whose batch is still open does.
    #[tokio::test]
    #[ignore = "needs PostgreSQL's server binaries; run tests/run.sh"]
    async fn a_batch_locks_its_own_partitions_only() {
        let bin = find_bin().expect("PostgreSQL's server binaries");
        let cluster = Cluster::start(&bin, None).await.expect("a cluster");
        cluster.fresh_database("fence").await.expect("a database");
        let mut a = cluster.connect("fence").await.expect("a");
        let mut b = cluster.connect("fence").await.expect("b");
        let mut c = cluster.connect("fence").await.expect("c");
        migrate::migrate(&mut a).await.expect("the schema");
        claim(&mut a, "g", "t", &[0, 1], "a")
            .await
            .expect("a claims");
        claim(&mut b, "g", "t", &[2, 3], "b")
            .await
            .expect("b claims");

        // a's batch (partitions 0 and 1), its transaction left open.
        let tx_a = a.transaction().await.expect("a's transaction");
        let of_a = [read(0, 0, 1), read(1, 0, 1), read(0, 1, 1)];
        let fenced_a = fence(&tx_a, "central", &positions(&of_a))
            .await
            .expect("a's fence");
        assert_eq!(fenced_a.keep, [true, true, true]);

        // b's batch (partitions 2 and 3) meanwhile: it must not wait for a's.
        let tx_b = b.transaction().await.expect("b's transaction");
        tx_b.batch_execute("SET LOCAL lock_timeout = '2s'")
            .await
            .expect("a lock timeout");
        let of_b = [read(2, 0, 1), read(3, 0, 1)];
        let fenced_b = fence(&tx_b, "central", &positions(&of_b))
            .await
            .expect("b's partitions are not locked by a's batch");
        assert_eq!(fenced_b.keep, [true, true]);
        advance(&tx_b, &fenced_b).await.expect("b's offsets");
        tx_b.commit()
            .await
            .expect("b commits while a's batch is open");

        // Claiming partition 0 while a's batch holds it waits for a's commit.
        c.batch_execute("SET lock_timeout = '500ms'")
            .await
            .expect("a lock timeout");
        let waited = claim(&mut c, "g", "t", &[0], "c")
            .await
            .expect_err("partition 0 is locked by a's open batch");
        assert_eq!(waited.code(), Some("55P03"), "{waited}");

        advance(&tx_a, &fenced_a).await.expect("a's offsets");
        tx_a.commit().await.expect("a commits");
        assert_eq!(
            next_offsets(&c).await,
            [
                (0, Some(2), 1, "a".to_owned()),
                (1, Some(1), 1, "a".to_owned()),
                (2, Some(1), 1, "b".to_owned()),
                (3, Some(1), 1, "b".to_owned()),
            ]
        );
    }
}
