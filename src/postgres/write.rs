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
//!
//! With more than one connection a large batch is split into slices, one a
//! connection, written at once ([`write_split`]): one batch's rows then take as many
//! server processes as it has slices instead of one. The slices are committed in
//! their order wherever it matters: a slice holding a partition's later messages
//! commits only once the partition's offset shows the earlier slices' messages
//! stored, so a partition's stored offset never passes a message that is not stored.

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

/// The fewest events a slice of a split batch holds: below this, a second
/// transaction costs more than the rows it takes off the first.
pub(crate) const MIN_SLICE: usize = 100;

/// The most connections one writer opens.
pub(crate) const MAX_CONNECTIONS: usize = 8;

/// What one batch did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Written {
    pub(crate) inserted: u64,
    /// The rows went the staging way (see the module's comment).
    pub(crate) staged: bool,
    /// The batch was split over several connections.
    pub(crate) split: bool,
    /// Rows the fence let through.
    pub(crate) kept: u64,
    /// Stored before (by id, or by the partition's offset).
    pub(crate) duplicates: u64,
    /// Read under a claim this gateway no longer holds: left to the partition's owner.
    pub(crate) fenced: u64,
}

/// The writer's connections and what it learnt about the database.
pub(crate) struct Writer {
    target: Target,
    /// One per slice of a split batch; the first writes every batch too small to
    /// split. A connection is opened when a batch first needs it.
    clients: Vec<Option<Client>>,
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
    /// A writer of one connection ([`Writer::connections`] for more).
    pub(crate) fn new(
        target: Target,
        period: Period,
        written_by: Arc<str>,
        store: Arc<str>,
    ) -> Self {
        Self {
            target,
            clients: vec![None],
            period,
            partitions: HashSet::new(),
            written_by,
            store,
            interrupted: false,
            replaying: false,
        }
    }

    /// Splits batches of at least `2 * MIN_SLICE` events over up to `connections`
    /// connections (1 to [`MAX_CONNECTIONS`]).
    pub(crate) fn connections(mut self, connections: usize) -> Self {
        self.clients
            .resize_with(connections.clamp(1, MAX_CONNECTIONS), || None);
        self
    }

    /// Opens every connection now (a benchmark, before its clock).
    #[cfg(feature = "bench")]
    pub(crate) async fn connect_all(&mut self) -> Result<(), PostgresError> {
        for lane in 0..self.clients.len() {
            self.connect(lane).await?;
        }
        Ok(())
    }

    /// Connection `lane`, opened (and the schema migrated) when there is none or the
    /// last one broke.
    async fn connect(&mut self, lane: usize) -> Result<&mut Client, PostgresError> {
        let slot = self
            .clients
            .get_mut(lane)
            .ok_or_else(|| PostgresError::Config(format!("no connection {lane}")))?;
        let usable = slot.as_ref().is_some_and(|c| !c.is_closed());
        if !usable {
            *slot = None;
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
                         written_by text, node_source text, row_id bigint
                     ) ON COMMIT DELETE ROWS"
                ))
                .await?;
            migrate::migrate(&mut client).await?;
            // Partitions made or dropped while disconnected are looked at anew.
            self.partitions.clear();
            *slot = Some(client);
        }
        slot.as_mut()
            .ok_or_else(|| PostgresError::Config(format!("no connection {lane}")))
    }

    /// Closes the connections (the next write opens new ones).
    pub(crate) fn disconnect(&mut self) {
        self.clients.iter_mut().for_each(|c| *c = None);
    }

    /// How many slices `events` are written in: one while replaying (the staging
    /// way, one transaction), and one when two events share a key (split apart,
    /// the second slice's COPY would wait on the first's uncommitted row).
    fn lanes_for(&self, events: &[Arc<Event>]) -> usize {
        let lanes = self.clients.len().min(events.len() / MIN_SLICE).max(1);
        if lanes == 1 || self.replaying {
            return 1;
        }
        let mut keys = HashSet::with_capacity(events.len());
        let unique = events
            .iter()
            .all(|e| keys.insert((e.identity.id, e.identity.received_at)));
        if unique { lanes } else { 1 }
    }

    /// Writes `events` in one transaction.
    pub(crate) async fn write(&mut self, events: &[Arc<Event>]) -> Result<Written, PostgresError> {
        // Still set at the next write when this one's future is dropped midway.
        if std::mem::replace(&mut self.interrupted, true) {
            self.disconnect();
        }
        let written = self.write_once(events).await;
        self.interrupted = false;
        if written.is_err() {
            // Retention may have dropped a partition this writer made (a late
            // event for that day then finds none): the next attempt makes each
            // partition its batch needs again.
            self.partitions.clear();
            for client in &mut self.clients {
                if client.as_ref().is_some_and(Client::is_closed) {
                    *client = None;
                }
            }
        }
        written
    }

    async fn write_once(&mut self, events: &[Arc<Event>]) -> Result<Written, PostgresError> {
        let lanes = self.lanes_for(events);
        for lane in 0..lanes {
            self.connect(lane).await?;
        }
        // After connecting: a new connection forgets the partitions known.
        let ranges: BTreeSet<Range> = events
            .iter()
            .map(|e| self.period.range(e.identity.received_at))
            .filter(|range| !self.partitions.contains(range))
            .collect();
        let store = Arc::clone(&self.store);
        let written_by = Arc::clone(&self.written_by);
        let replaying = self.replaying;
        let mut clients: Vec<&mut Client> = self.clients[..lanes].iter_mut().flatten().collect();
        let client = clients
            .first_mut()
            .ok_or_else(|| PostgresError::Config("no connection".into()))?;
        // Made before the slices start: their transactions then take no lock
        // but the rows' and the offsets'.
        partitions::ensure(client, &ranges).await?;
        let written = if lanes == 1 {
            write_batch(client, &store, &written_by, events, replaying, None).await?
        } else {
            write_split(clients, &store, &written_by, events).await?
        };
        self.partitions.extend(ranges);
        self.replaying = written.staged && written.inserted < written.kept;
        Ok(written)
    }
}

/// Writes `events` as one slice a connection, each slice in its own transaction,
/// all at once, and answers once every slice is committed or one failed (then the
/// slices before it may be committed: a retry finds their rows and offsets stored).
///
/// The rows are numbered before the slices start, so `row_id` follows the gateway's
/// order whichever slice commits first. The first slice is written as a batch
/// always is (its partitions' offset rows locked first). Each later one copies its
/// rows first and takes the offset rows after (waiting, in the server, for an
/// earlier slice holding them to end), and commits only when every one of its
/// events passes the fence and each partition's offset is past the earlier slices'
/// messages of that partition: committed before. Otherwise it rolls back, waits
/// for the slices before it to end, and, when they all committed, writes its events
/// the careful way (the staging table, the fence first). No slice waits for
/// another while holding a lock, except in the server, where a cycle is found.
async fn write_split(
    mut clients: Vec<&mut Client>,
    store: &str,
    written_by: &str,
    events: &[Arc<Event>],
) -> Result<Written, PostgresError> {
    // A batch is in the gateway's order (`Batch`): numbering by index follows it.
    let first = clients
        .first_mut()
        .ok_or_else(|| PostgresError::Config("no connection".into()))?;
    let ids = reserve_row_ids(first, events.len()).await?;
    if ids.len() != events.len() {
        return Err(PostgresError::Config(format!(
            "the server gave {} row ids for {} rows",
            ids.len(),
            events.len()
        )));
    }
    let lanes = clients.len();
    let bounds: Vec<usize> = (0..=lanes).map(|i| i * events.len() / lanes).collect();
    let mut lanes_run = Vec::with_capacity(lanes);
    // Lane i tells lane i + 1 whether every lane up to i committed.
    let mut heard = None;
    for (lane, client) in clients.into_iter().enumerate() {
        let (tell, next) = match lane + 1 < lanes {
            true => {
                let (tell, hear) = tokio::sync::oneshot::channel::<bool>();
                (Some(tell), Some(hear))
            }
            false => (None, None),
        };
        let hear = std::mem::replace(&mut heard, next);
        let slice = &events[bounds[lane]..bounds[lane + 1]];
        let slice_ids = &ids[bounds[lane]..bounds[lane + 1]];
        let before = offsets::Before::of(store, &events[..bounds[lane]]);
        lanes_run.push(async move {
            let written = match hear {
                None => write_batch(client, store, written_by, slice, false, Some(slice_ids))
                    .await
                    .map(Some),
                Some(hear) => {
                    write_after(client, store, written_by, slice, slice_ids, &before, hear).await
                }
            };
            if let Some(tell) = tell {
                let _ = tell.send(matches!(written, Ok(Some(_))));
            }
            written
        });
    }
    let mut total = Written {
        split: true,
        ..Written::default()
    };
    for written in futures::future::join_all(lanes_run).await {
        match written? {
            Some(written) => total.add(written),
            // An earlier lane failed: its error is the answer, returned above.
            None => {
                return Err(PostgresError::Config(
                    "a slice before this one failed".into(),
                ));
            }
        }
    }
    Ok(total)
}

/// A later slice of a split batch (see [`write_split`]). `None`: a lane before it
/// failed, and this one stored nothing.
async fn write_after(
    client: &mut Client,
    store: &str,
    written_by: &str,
    events: &[Arc<Event>],
    ids: &[i64],
    before: &offsets::Before,
    earlier: tokio::sync::oneshot::Receiver<bool>,
) -> Result<Option<Written>, PostgresError> {
    let rows: Vec<Row> = events
        .iter()
        .zip(ids)
        .map(|(event, &id)| Row::of(event, written_by).numbered(id))
        .collect();
    let positions: Vec<_> = events.iter().map(|e| e.kafka_position()).collect();
    let ours = positions.iter().flatten().any(|p| &*p.store == store);
    let tx = client.transaction().await?;
    let committed = match copy_rows(&tx, "events", &rows).await {
        Ok(copied) => {
            let fenced = match ours {
                true => Some(offsets::fence(&tx, store, &positions).await?),
                false => None,
            };
            let clean = fenced
                .as_ref()
                .is_none_or(|f| f.keep.iter().all(|k| *k) && before.passed(f));
            if clean {
                if let Some(fenced) = &fenced {
                    offsets::advance(&tx, fenced).await?;
                }
                tx.commit().await?;
                Some(copied)
            } else {
                tx.rollback().await?;
                None
            }
        }
        Err(error) if error.code() == Some(&SqlState::UNIQUE_VIOLATION) => {
            tx.rollback().await?;
            None
        }
        Err(error) => return Err(error.into()),
    };
    // Nothing is held from here on: waiting for the lanes before cannot block them.
    if !earlier.await.unwrap_or(false) {
        // This slice committed only partitions of its own (the fence's `before`
        // check holds the rest back): a retry finds them stored.
        return Ok(None);
    }
    match committed {
        Some(copied) => Ok(Some(Written {
            inserted: copied,
            kept: copied,
            ..Written::default()
        })),
        // Stored before in part, not this gateway's to store, or committed by the
        // lanes before only now: the careful way.
        None => write_batch(client, store, written_by, events, true, Some(ids))
            .await
            .map(Some),
    }
}

/// `n` values of `events.row_id`'s sequence, in order.
async fn reserve_row_ids(client: &mut Client, n: usize) -> Result<Vec<i64>, PostgresError> {
    let n = i32::try_from(n).unwrap_or(i32::MAX);
    let row = client
        .query_one(
            // The sequence's name looked up once (a plain CTE is inlined, and the
            // lookup then costs more than the numbers).
            "WITH s AS MATERIALIZED (
                 SELECT pg_get_serial_sequence('events', 'row_id')::regclass AS seq
             )
             SELECT array_agg(nextval(s.seq)) FROM s, generate_series(1, $1)",
            &[&n],
        )
        .await?;
    let mut ids: Vec<i64> = row.try_get::<_, Option<Vec<i64>>>(0)?.unwrap_or_default();
    ids.sort_unstable();
    Ok(ids)
}

impl Written {
    fn add(&mut self, other: Written) {
        self.inserted += other.inserted;
        self.staged |= other.staged;
        self.kept += other.kept;
        self.duplicates += other.duplicates;
        self.fenced += other.fenced;
    }
}

/// Writes `events` in one transaction. `ids`: the `row_id` of each event (numbered
/// before, a slice of a split batch), or `None` to let the server number them.
async fn write_batch<'a>(
    client: &mut Client,
    store: &str,
    written_by: &'a str,
    events: &'a [Arc<Event>],
    replaying: bool,
    ids: Option<&[i64]>,
) -> Result<Written, PostgresError> {
    let mut tx = client.transaction().await?;
    let positions: Vec<_> = events.iter().map(|e| e.kafka_position()).collect();
    let fenced = if positions.iter().flatten().any(|p| &*p.store == store) {
        Some(offsets::fence(&tx, store, &positions).await?)
    } else {
        None
    };
    let row = |(i, event): (usize, &'a Arc<Event>)| {
        let row = Row::of(event, written_by);
        match ids.and_then(|ids| ids.get(i)) {
            Some(&id) => row.numbered(id),
            None => row,
        }
    };
    let mut rows: Vec<Row> = match &fenced {
        Some(fenced) => events
            .iter()
            .enumerate()
            .zip(&fenced.keep)
            .filter(|(_, keep)| **keep)
            .map(|(event, _)| row(event))
            .collect(),
        None => events.iter().enumerate().map(row).collect(),
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
            let names = column_names(ids.is_some());
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
        split: false,
        kept,
        duplicates: kept - inserted + stored,
        fenced: stale,
    })
}

/// The columns a row is written with: [`COLUMNS`], and `row_id` when numbered.
fn column_names(numbered: bool) -> String {
    let mut names: Vec<&str> = COLUMNS.iter().map(|(name, _)| *name).collect();
    if numbered {
        names.push("row_id");
    }
    names.join(", ")
}

/// COPYs `rows`, in their order, into `table` (`events` or a table of its columns);
/// returns the rows copied. The rows are all numbered ([`Row::numbered`]) or none.
pub(crate) async fn copy_rows(
    tx: &Transaction<'_>,
    table: &str,
    rows: &[Row<'_>],
) -> Result<u64, tokio_postgres::Error> {
    let numbered = rows.first().is_some_and(|row| row.row_id.is_some());
    let mut types: Vec<Type> = COLUMNS.iter().map(|(_, t)| t.clone()).collect();
    if numbered {
        types.push(Type::INT8);
    }
    let sink = tx
        .copy_in(&format!(
            "COPY {table} ({}) FROM STDIN (FORMAT binary)",
            column_names(numbered)
        ))
        .await?;
    let writer = BinaryCopyInWriter::new(sink, &types);
    pin_mut!(writer);
    for row in rows {
        let mut values = row.values();
        if numbered {
            values.push(&row.row_id);
        }
        writer.as_mut().write(&values).await?;
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
    /// Numbered before the write (a split batch's), else by the server.
    row_id: Option<i64>,
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
            row_id: None,
        }
    }

    pub(crate) fn numbered(mut self, row_id: i64) -> Self {
        self.row_id = Some(row_id);
        self
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
#[path = "write_tests.rs"]
mod tests;
