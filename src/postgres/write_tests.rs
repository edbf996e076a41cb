//! The writer's tests; those against a real server use the benchmark's own cluster
//! (`bench` feature).

use super::*;
#[cfg(feature = "bench")]
use crate::bench::postgres::{Cluster, find_bin};
#[cfg(feature = "bench")]
use crate::proto::containerd::events::TaskExit;
#[cfg(feature = "bench")]
use crate::testing::{event, workload};

#[test]
fn only_times_postgres_holds_are_kept() {
    let at = |seconds, nanos| prost_types::Timestamp { seconds, nanos };
    assert_eq!(
        storable_time(&at(0, 5)),
        Some(UNIX_EPOCH + std::time::Duration::from_nanos(5))
    );
    assert!(storable_time(&at(-62_135_596_800, 0)).is_some());
    assert_eq!(storable_time(&at(i64::MAX, 0)), None);
    assert_eq!(storable_time(&at(i64::MIN, 0)), None);
    assert_eq!(storable_time(&at(0, -1)), None);
}

#[test]
fn the_columns_are_every_column_of_events_but_row_id() {
    let migrations = crate::postgres::migrate::MIGRATIONS;
    let table = migrations[0]
        .1
        .split("CREATE TABLE events (")
        .nth(1)
        .and_then(|rest| rest.split(") PARTITION BY").next())
        .expect("the events table");
    let mut columns: Vec<&str> = table
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with("PRIMARY KEY"))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "row_id")
        .collect();
    // Columns added by later versions, in order.
    for (_, sql) in &migrations[1..] {
        columns.extend(sql.lines().filter_map(|line| {
            line.trim()
                .strip_prefix("ALTER TABLE events ADD COLUMN ")?
                .split_whitespace()
                .next()
        }));
    }
    let ours: Vec<&str> = COLUMNS.iter().map(|(name, _)| *name).collect();
    assert_eq!(ours, columns);
}

#[cfg(feature = "bench")]
fn events(seqs: &[u64], ids: &mut std::collections::HashMap<u64, Arc<Event>>) -> Vec<Arc<Event>> {
    seqs.iter()
        .map(|&seq| {
            Arc::clone(ids.entry(seq).or_insert_with(|| {
                Arc::new(
                    event(seq)
                        .message(
                            "containerd.events.TaskExit",
                            &TaskExit {
                                container_id: format!("c{seq}"),
                                id: format!("c{seq}"),
                                pid: 100,
                                exit_status: 137,
                                exited_at: None,
                            },
                        )
                        .workload(workload("busybox", &[("app", "web"), ("tier", "a\"b")]))
                        .build(),
                )
            }))
        })
        .collect()
}

/// A batch holding events stored before stores the others once, in seq order;
/// the batch after it is staged, and the one after a clean staged batch is not.
/// Against a real server: the benchmark's own cluster (`bench` feature).
#[cfg(feature = "bench")]
#[tokio::test]
#[ignore = "needs PostgreSQL's server binaries; run tests/run.sh"]
async fn a_batch_with_events_stored_before_stores_the_rest_once_in_order() {
    let bin = find_bin().expect("PostgreSQL's server binaries");
    let cluster = Cluster::start(&bin, None).await.expect("a cluster");
    cluster.fresh_database("write").await.expect("a database");
    let target = cluster.target("write").expect("a target");
    let mut writer = Writer::new(target, Period::default(), "w".into(), "central".into());
    let mut made = std::collections::HashMap::new();
    let mut write = async |seqs: &[u64]| {
        let batch = events(seqs, &mut made);
        writer.write(&batch).await.expect("a written batch")
    };
    let w = |inserted, staged, kept, duplicates| Written {
        inserted,
        staged,
        split: false,
        kept,
        duplicates,
        fenced: 0,
    };
    assert_eq!(write(&[1, 2, 3, 4, 5]).await, w(5, false, 5, 0));
    // 3, 4 and 5 are there: the direct COPY is refused, the staged insert skips them.
    assert_eq!(write(&[8, 3, 6, 4, 7, 5]).await, w(3, true, 6, 3));
    // Still replaying: staged, and nothing was stored before.
    assert_eq!(write(&[10, 9]).await, w(2, true, 2, 0));
    assert_eq!(write(&[11, 12]).await, w(2, false, 2, 0));
    assert_eq!(write(&[12]).await, w(0, true, 1, 1));

    let client = cluster.connect("write").await.expect("a reader");
    let rows = client
        .query(
            "SELECT seq, id, event::text, labels::text FROM events ORDER BY row_id",
            &[],
        )
        .await
        .expect("the rows");
    let seqs: Vec<i64> = rows.iter().map(|row| row.get(0)).collect();
    assert_eq!(seqs, (1..=12).collect::<Vec<i64>>());
    for row in &rows {
        let seq = u64::try_from(row.get::<_, i64>(0)).expect("a seq");
        let stored = &made[&seq];
        let id: uuid::Uuid = row.get(1);
        assert_eq!(id.as_bytes(), stored.identity.id.as_bytes());
        let columns = EventRow::from_event(stored);
        let json = |text: &str| serde_json::from_str::<serde_json::Value>(text).expect("json");
        assert_eq!(
            json(row.get::<_, &str>(2)),
            json(columns.event.expect("an event json"))
        );
        assert_eq!(
            json(row.get::<_, &str>(3)),
            json(columns.workload.labels.as_deref().expect("labels"))
        );
    }
}

/// Split batches against a real server.
#[cfg(feature = "bench")]
mod split {
    use std::sync::Arc;

    use super::*;
    use crate::bench::postgres::{Cluster, find_bin};
    use crate::event::KafkaPosition;
    use crate::proto::containerd::events::TaskExit;
    use crate::testing::event;

    /// Events `first..first + n`, event i read from partition `partition_of(i)` at
    /// that partition's next offset (counted in `next`), under epoch 1.
    fn read(
        seqs: std::ops::Range<u64>,
        partition_of: impl Fn(u64) -> i32,
        next: &mut std::collections::HashMap<i32, i64>,
    ) -> Vec<Arc<Event>> {
        read_in(seqs, partition_of, next, "default")
    }

    /// [`read`], every event in `namespace`.
    fn read_in(
        seqs: std::ops::Range<u64>,
        partition_of: impl Fn(u64) -> i32,
        next: &mut std::collections::HashMap<i32, i64>,
        namespace: &str,
    ) -> Vec<Arc<Event>> {
        seqs.map(|seq| {
            let partition = partition_of(seq);
            let offset = next.entry(partition).or_insert(0);
            let position = KafkaPosition {
                store: Arc::from("central"),
                group: Arc::from("g"),
                topic: Arc::from("t"),
                partition,
                offset: *offset,
                epoch: 1,
            };
            *offset += 1;
            Arc::new(
                event(seq)
                    .namespace(namespace)
                    .message(
                        "containerd.events.TaskExit",
                        &TaskExit {
                            container_id: format!("c{seq}"),
                            ..TaskExit::default()
                        },
                    )
                    .build()
                    .with_kafka_position(Some(Arc::new(position))),
            )
        })
        .collect()
    }

    /// A fresh database `db` whose group `g` claimed `partitions` of topic `t`: a
    /// reader, and a writer of store `central` over `connections` connections.
    async fn claimed(
        cluster: &Cluster,
        db: &str,
        partitions: &[i32],
        connections: usize,
    ) -> (Client, Writer) {
        cluster.fresh_database(db).await.expect("a database");
        let mut client = cluster.connect(db).await.expect("a reader");
        migrate::migrate(&mut client).await.expect("the schema");
        offsets::claim(&mut client, "g", "t", partitions, "w")
            .await
            .expect("the claims");
        let target = cluster.target(db).expect("a target");
        let writer = Writer::new(target, Period::default(), "w".into(), "central".into())
            .connections(connections);
        (client, writer)
    }

    async fn stored(client: &Client) -> (Vec<i64>, Vec<(i32, Option<i64>)>) {
        let seqs = client
            .query("SELECT seq FROM events ORDER BY row_id", &[])
            .await
            .expect("the rows")
            .iter()
            .map(|row| row.get(0))
            .collect();
        let offsets = client
            .query(
                "SELECT partition, next_offset FROM kafka_offsets ORDER BY partition",
                &[],
            )
            .await
            .expect("the offsets")
            .iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect();
        (seqs, offsets)
    }

    /// Batches of one partition and of several, split over two and three
    /// connections: every row once, numbered in the gateway's order, and every
    /// partition's offset past its last message.
    #[tokio::test]
    #[ignore = "needs PostgreSQL's server binaries; run tests/run.sh"]
    async fn a_split_batch_stores_every_row_once_in_order_with_its_offsets() {
        let bin = find_bin().expect("PostgreSQL's server binaries");
        let cluster = Cluster::start(&bin, None).await.expect("a cluster");
        for connections in [2, 3] {
            let db = format!("split{connections}");
            let (client, mut writer) = claimed(&cluster, &db, &[0, 1, 2], connections).await;
            let mut next = std::collections::HashMap::new();
            // One partition; then three, interleaved; then one again.
            let batches = [
                read(1..1001, |_| 0, &mut next),
                read(1001..2001, |seq| (seq % 3) as i32, &mut next),
                read(2001..2601, |_| 2, &mut next),
            ];
            for batch in &batches {
                let written = writer.write(batch).await.expect("a written batch");
                assert_eq!(
                    (written.inserted, written.kept, written.duplicates),
                    (batch.len() as u64, batch.len() as u64, 0)
                );
            }
            let (seqs, offsets) = stored(&client).await;
            assert_eq!(
                seqs,
                (1..2601).collect::<Vec<i64>>(),
                "{connections} connections"
            );
            let expected: Vec<(i32, Option<i64>)> = [0, 1, 2]
                .iter()
                .map(|p| (*p, next.get(p).copied()))
                .collect();
            assert_eq!(offsets, expected, "{connections} connections");
            // Written again (a retry whose answer was lost): nothing added.
            let again = writer.write(&batches[1]).await.expect("the batch again");
            assert_eq!((again.inserted, again.duplicates), (0, 1000));
            assert_eq!(stored(&client).await.0.len(), 2600);
        }
    }

    /// The first slice fails (a row the server refuses): the second slice, holding
    /// the same partition's later messages, must not commit (its offset would pass
    /// messages that are not stored); a slice of another partition may. Sent again
    /// without the bad row, every row is stored once and every offset is right.
    #[tokio::test]
    #[ignore = "needs PostgreSQL's server binaries; run tests/run.sh"]
    async fn a_failed_slice_holds_back_the_later_slices_of_its_partitions() {
        let bin = find_bin().expect("PostgreSQL's server binaries");
        let cluster = Cluster::start(&bin, None).await.expect("a cluster");
        let (client, mut writer) = claimed(&cluster, "held", &[0, 1], 3).await;
        let mut next = std::collections::HashMap::new();
        // Slices of 100: partition 0, partition 0, partition 1.
        let mut batch = read(1..201, |_| 0, &mut next);
        batch.extend(read(201..301, |_| 1, &mut next));
        // Event 50 is refused: PostgreSQL's text holds no NUL.
        let mut bad_next = std::collections::HashMap::from([(0, 49)]);
        let bad = read_in(50..51, |_| 0, &mut bad_next, "bad\0namespace");
        let mut refused = batch.clone();
        refused[49] = Arc::clone(&bad[0]);
        let error = writer
            .write(&refused)
            .await
            .expect_err("a row the server refuses");
        assert!(!error.is_retryable(), "{error}");
        let (seqs, offsets) = stored(&client).await;
        assert_eq!(
            seqs,
            (201..301).collect::<Vec<i64>>(),
            "only partition 1's slice"
        );
        assert_eq!(offsets, [(0, None), (1, Some(100))]);

        let written = writer.write(&batch).await.expect("the batch, mended");
        assert_eq!((written.inserted, written.duplicates), (200, 100));
        let (seqs, offsets) = stored(&client).await;
        let mut sorted = seqs.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (1..301).collect::<Vec<i64>>());
        assert_eq!(offsets, [(0, Some(200)), (1, Some(100))]);
    }
}
