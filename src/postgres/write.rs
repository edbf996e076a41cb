//! One batch, one transaction, and an event stored before (a retried batch, a Kafka
//! message read again) adds nothing. The rows are first copied (binary COPY) straight
//! into `events`, under a savepoint: the primary key refuses the whole COPY if one of
//! them is there already. Then, and for the batches after it until one finds nothing
//! stored before, they go the slower way that skips what is there: COPY into a
//! temporary staging table, then `INSERT ... ON CONFLICT DO NOTHING` into `events`.
//! Replays come in runs (a retried batch, a partition read again from its stored
//! offset), so one wasted COPY starts each run, not each batch of it.
//! Taken-in events whose source keeps its offsets here pass the fence first
//! ([`super::offsets`]) and move their partitions' offsets in the same transaction.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::BufMut;
use futures::pin_mut;
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{IsNull, ToSql, Type, to_sql_checked};
use tokio_postgres::{Client, Transaction};

use super::partitions::{self, Period, Range};
use super::{PostgresError, Target, migrate, offsets};
use crate::event::Event;
use crate::store::EventRow;

/// Every column of `events` but `row_id` (a bigserial the server numbers), in COPY
/// order, with their types; the staging table has the same.
pub(crate) const COLUMNS: &[(&str, Type)] = &[
    ("received", Type::TIMESTAMPTZ),
    ("id", Type::UUID),
    ("seq", Type::INT8),
    ("timestamp", Type::TEXT),
    ("time", Type::TIMESTAMPTZ),
    ("received_at", Type::TEXT),
    ("namespace", Type::TEXT),
    ("topic", Type::TEXT),
    ("type_url", Type::TEXT),
    ("payload", Type::BYTEA),
    ("event", Type::JSONB),
    ("source", Type::TEXT),
    ("publisher_uid", Type::INT8),
    ("publisher_gid", Type::INT8),
    ("publisher_pid", Type::INT8),
    ("publisher_subject", Type::TEXT),
    ("origin", Type::TEXT),
    ("origin_clock", Type::TEXT),
    ("pod_name", Type::TEXT),
    ("pod_namespace", Type::TEXT),
    ("pod_uid", Type::TEXT),
    ("container_name", Type::TEXT),
    ("container_kind", Type::TEXT),
    ("image", Type::TEXT),
    ("labels", Type::JSONB),
    ("node", Type::TEXT),
    ("node_seq", Type::INT8),
    ("reconciled_from", Type::TEXT),
    ("reason", Type::TEXT),
    ("written_by", Type::TEXT),
    ("node_source", Type::TEXT),
];

/// The temporary table a batch holding events stored before goes through (each
/// connection has its own).
pub(crate) const STAGING: &str = "eventgate_staging";

/// What one batch did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Written {
    pub(crate) inserted: u64,
    /// The rows went the staging way (see the module's comment).
    pub(crate) staged: bool,
    /// Rows the fence let through.
    pub(crate) kept: u64,
    /// Stored before (by id, or by the partition's offset).
    pub(crate) duplicates: u64,
    /// Read under a claim this gateway no longer holds: left to the partition's owner.
    pub(crate) fenced: u64,
}

/// The writer's connection and what it learnt about the database.
pub(crate) struct Writer {
    target: Target,
    client: Option<Client>,
    period: Period,
    /// Partitions known to exist.
    partitions: HashSet<Range>,
    /// This gateway, for `written_by`.
    written_by: Arc<str>,
    /// The forwarder's name: the store taken-in events' positions name.
    store: Arc<str>,
    /// A write is under way, or was cut off midway (its future dropped by a
    /// timeout): then the connection's state is unknown, and the next write starts
    /// on a new one.
    interrupted: bool,
    /// The last batch held an event stored before: the next one is staged.
    replaying: bool,
}

impl Writer {
    pub(crate) fn new(
        target: Target,
        period: Period,
        written_by: Arc<str>,
        store: Arc<str>,
    ) -> Self {
        Self {
            target,
            client: None,
            period,
            partitions: HashSet::new(),
            written_by,
            store,
            interrupted: false,
            replaying: false,
        }
    }

    /// The open connection, connecting (and migrating) first when there is none or
    /// the last one broke.
    pub(crate) async fn client(&mut self) -> Result<&mut Client, PostgresError> {
        let usable = self.client.as_ref().is_some_and(|c| !c.is_closed());
        if !usable {
            self.client = None;
            let mut client = self.target.connect().await?;
            client
                .batch_execute(&format!(
                    "SET TIME ZONE 'UTC';
                     CREATE TEMP TABLE IF NOT EXISTS {STAGING} (
                         received timestamptz, id uuid, seq bigint, timestamp text,
                         time timestamptz, received_at text, namespace text, topic text,
                         type_url text, payload bytea, event jsonb, source text,
                         publisher_uid bigint, publisher_gid bigint, publisher_pid bigint,
                         publisher_subject text, origin text, origin_clock text,
                         pod_name text, pod_namespace text, pod_uid text,
                         container_name text, container_kind text, image text, labels jsonb,
                         node text, node_seq bigint, reconciled_from text, reason text,
                         written_by text, node_source text
                     ) ON COMMIT DELETE ROWS"
                ))
                .await?;
            migrate::migrate(&mut client).await?;
            // Partitions made or dropped while disconnected are looked at anew.
            self.partitions.clear();
            self.client = Some(client);
        }
        self.client
            .as_mut()
            .ok_or_else(|| PostgresError::Config("no connection".into()))
    }

    /// Closes the connection (the next write opens a new one).
    pub(crate) fn disconnect(&mut self) {
        self.client = None;
    }

    /// Writes `events` in one transaction.
    pub(crate) async fn write(&mut self, events: &[Arc<Event>]) -> Result<Written, PostgresError> {
        // Still set at the next write when this one's future is dropped midway.
        if std::mem::replace(&mut self.interrupted, true) {
            self.client = None;
        }
        let written = self.write_once(events).await;
        self.interrupted = false;
        if written.is_err() {
            // Retention may have dropped a partition this writer made (a late
            // event for that day then finds none): the next attempt makes each
            // partition its batch needs again.
            self.partitions.clear();
            if self.client.as_ref().is_some_and(Client::is_closed) {
                self.client = None;
            }
        }
        written
    }

    async fn write_once(&mut self, events: &[Arc<Event>]) -> Result<Written, PostgresError> {
        let ranges: BTreeSet<Range> = events
            .iter()
            .map(|e| self.period.range(e.identity.received_at))
            .filter(|range| !self.partitions.contains(range))
            .collect();
        let store = Arc::clone(&self.store);
        let written_by = Arc::clone(&self.written_by);
        let replaying = self.replaying;
        let client = self.client().await?;
        partitions::ensure(client, &ranges).await?;
        let written = write_batch(client, &store, &written_by, events, replaying).await?;
        self.partitions.extend(ranges);
        self.replaying = written.staged && written.inserted < written.kept;
        Ok(written)
    }
}

async fn write_batch(
    client: &mut Client,
    store: &str,
    written_by: &str,
    events: &[Arc<Event>],
    replaying: bool,
) -> Result<Written, PostgresError> {
    let mut tx = client.transaction().await?;
    let positions: Vec<_> = events.iter().map(|e| e.kafka_position()).collect();
    let fenced = if positions.iter().flatten().any(|p| &*p.store == store) {
        Some(offsets::fence(&tx, store, &positions).await?)
    } else {
        None
    };
    let mut rows: Vec<Row> = match &fenced {
        Some(fenced) => events
            .iter()
            .zip(&fenced.keep)
            .filter(|(_, keep)| **keep)
            .map(|(event, _)| Row::of(event, written_by))
            .collect(),
        None => events.iter().map(|e| Row::of(e, written_by)).collect(),
    };
    // `row_id` numbers the rows in the order they arrive: the gateway's order.
    rows.sort_by_key(|row| row.seq);
    let mut inserted = None;
    if !rows.is_empty() && !replaying {
        let direct = tx.savepoint("direct").await?;
        match copy_rows(&direct, "events", &rows).await {
            Ok(copied) => {
                direct.commit().await?;
                inserted = Some(copied);
            }
            Err(error) if error.code() == Some(&SqlState::UNIQUE_VIOLATION) => {
                direct.rollback().await?;
            }
            Err(error) => return Err(error.into()),
        }
    }
    let staged = inserted.is_none() && !rows.is_empty();
    let inserted = match inserted {
        Some(copied) => copied,
        None if rows.is_empty() => 0,
        None => {
            copy_rows(&tx, STAGING, &rows).await?;
            let names = column_names();
            tx.execute(
                &format!(
                    "INSERT INTO events ({names}) SELECT {names} FROM {STAGING}
                     ORDER BY seq ON CONFLICT DO NOTHING"
                ),
                &[],
            )
            .await?
        }
    };
    if let Some(fenced) = &fenced {
        offsets::advance(&tx, fenced).await?;
    }
    tx.commit().await?;
    let kept = rows.len() as u64;
    let (stale, stored) = fenced.as_ref().map_or((0, 0), |f| (f.stale, f.stored));
    Ok(Written {
        inserted,
        staged,
        kept,
        duplicates: kept - inserted + stored,
        fenced: stale,
    })
}

fn column_names() -> String {
    let names: Vec<&str> = COLUMNS.iter().map(|(name, _)| *name).collect();
    names.join(", ")
}

/// COPYs `rows`, in their order, into `table` (`events` or a table of its columns);
/// returns the rows copied.
pub(crate) async fn copy_rows(
    tx: &Transaction<'_>,
    table: &str,
    rows: &[Row<'_>],
) -> Result<u64, tokio_postgres::Error> {
    let types: Vec<Type> = COLUMNS.iter().map(|(_, t)| t.clone()).collect();
    let sink = tx
        .copy_in(&format!(
            "COPY {table} ({}) FROM STDIN (FORMAT binary)",
            column_names()
        ))
        .await?;
    let writer = BinaryCopyInWriter::new(sink, &types);
    pin_mut!(writer);
    for row in rows {
        writer.as_mut().write(&row.values()).await?;
    }
    writer.finish().await
}

/// JSON text sent as jsonb's binary form (a version byte, then the text): the
/// server parses it as it parses a `::jsonb` cast of the text.
#[derive(Debug)]
pub(crate) struct Jsonb<T>(T);

impl<T: AsRef<str> + std::fmt::Debug> ToSql for Jsonb<T> {
    fn to_sql(
        &self,
        _: &Type,
        out: &mut bytes::BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        out.put_u8(1);
        out.put_slice(self.0.as_ref().as_bytes());
        Ok(IsNull::No)
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::JSONB
    }

    to_sql_checked!();
}

/// One event's values, as [`COLUMNS`] lists them.
pub(crate) struct Row<'a> {
    received: SystemTime,
    id: uuid::Uuid,
    time: Option<SystemTime>,
    event: Option<Jsonb<&'a str>>,
    labels: Option<Jsonb<String>>,
    columns: EventRow<'a>,
    seq: i64,
    written_by: &'a str,
    node_source: Option<&'a str>,
}

impl<'a> Row<'a> {
    pub(crate) fn of(event: &'a Event, written_by: &'a str) -> Self {
        let mut columns = EventRow::from_event(event);
        Self {
            received: event.identity.received_at,
            id: uuid::Uuid::from_bytes(*event.identity.id.as_bytes()),
            time: event.envelope.timestamp.as_ref().and_then(storable_time),
            // jsonb has no \u0000: such an event keeps its payload bytes, not its JSON.
            event: columns
                .event
                .filter(|json| !json.contains("\\u0000"))
                .map(Jsonb),
            labels: columns.workload.labels.take().map(Jsonb),
            seq: i64::try_from(event.seq).unwrap_or(i64::MAX),
            columns,
            written_by,
            node_source: event.identity.node_source.as_deref(),
        }
    }

    fn values(&self) -> Vec<&(dyn ToSql + Sync)> {
        let c = &self.columns;
        let (uid, gid, pid, subject) = &c.publisher;
        let w = &c.workload;
        vec![
            &self.received,
            &self.id,
            &self.seq,
            &c.timestamp,
            &self.time,
            &c.received_at,
            &c.namespace,
            &c.topic,
            &c.type_url,
            &c.payload,
            &self.event,
            &c.source,
            uid,
            gid,
            pid,
            subject,
            &c.origin,
            &c.origin_clock,
            &w.pod_name,
            &w.pod_namespace,
            &w.pod_uid,
            &w.container_name,
            &w.container_kind,
            &w.image,
            &self.labels,
            &c.node,
            &c.node_seq,
            &c.reconciled_from,
            &c.reason,
            &self.written_by,
            &self.node_source,
        ]
    }
}

/// The envelope's time when PostgreSQL can hold it (years 1 to 9999, as RFC 3339
/// writes them); `timestamp` keeps the exact text either way.
pub(crate) fn storable_time(timestamp: &prost_types::Timestamp) -> Option<SystemTime> {
    const YEAR_1: i64 = -62_135_596_800;
    const YEAR_10000: i64 = 253_402_300_800;
    if !(YEAR_1..YEAR_10000).contains(&timestamp.seconds) {
        return None;
    }
    let nanos = u32::try_from(timestamp.nanos).ok()?;
    let since = std::time::Duration::new(timestamp.seconds.unsigned_abs(), 0);
    let whole = if timestamp.seconds >= 0 {
        UNIX_EPOCH.checked_add(since)?
    } else {
        UNIX_EPOCH.checked_sub(since)?
    };
    whole.checked_add(std::time::Duration::from_nanos(u64::from(
        nanos.min(999_999_999),
    )))
}

#[cfg(test)]
mod tests {
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
    fn events(
        seqs: &[u64],
        ids: &mut std::collections::HashMap<u64, Arc<Event>>,
    ) -> Vec<Arc<Event>> {
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
}
