//! One batch, one transaction: the rows are copied (binary COPY) into a temporary
//! staging table, then inserted into `events` with `ON CONFLICT DO NOTHING`, so an
//! event stored before (a retried batch, a Kafka message read again) adds nothing.
//! Taken-in events whose source keeps its offsets here pass the fence first
//! ([`super::offsets`]) and move their partitions' offsets in the same transaction.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use futures::pin_mut;
use tokio_postgres::Client;
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::{ToSql, Type};

use super::partitions::{self, Period, Range};
use super::{PostgresError, Target, migrate, offsets};
use crate::event::Event;
use crate::store::EventRow;

/// The staged columns, in COPY order, with their types; `events` has the same names
/// (its `event` and `labels` are jsonb, cast on the way in).
const COLUMNS: &[(&str, Type)] = &[
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
    ("event", Type::TEXT),
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
    ("labels", Type::TEXT),
    ("node", Type::TEXT),
    ("node_seq", Type::INT8),
    ("reconciled_from", Type::TEXT),
    ("reason", Type::TEXT),
    ("written_by", Type::TEXT),
    ("node_source", Type::TEXT),
];

/// What one batch did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Written {
    pub(crate) inserted: u64,
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
        }
    }

    pub(crate) fn target(&self) -> &Target {
        &self.target
    }

    /// The open connection, connecting (and migrating) first when there is none or
    /// the last one broke.
    pub(crate) async fn client(&mut self) -> Result<&mut Client, PostgresError> {
        let usable = self.client.as_ref().is_some_and(|c| !c.is_closed());
        if !usable {
            self.client = None;
            let mut client = self.target.connect().await?;
            client
                .batch_execute(
                    "SET TIME ZONE 'UTC';
                     CREATE TEMP TABLE IF NOT EXISTS eventgate_staging (
                         received timestamptz, id uuid, seq bigint, timestamp text,
                         time timestamptz, received_at text, namespace text, topic text,
                         type_url text, payload bytea, event text, source text,
                         publisher_uid bigint, publisher_gid bigint, publisher_pid bigint,
                         publisher_subject text, origin text, origin_clock text,
                         pod_name text, pod_namespace text, pod_uid text,
                         container_name text, container_kind text, image text, labels text,
                         node text, node_seq bigint, reconciled_from text, reason text,
                         written_by text, node_source text
                     ) ON COMMIT DELETE ROWS",
                )
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
        let client = self.client().await?;
        partitions::ensure(client, &ranges).await?;
        let written = write_batch(client, &store, &written_by, events).await?;
        self.partitions.extend(ranges);
        Ok(written)
    }
}

async fn write_batch(
    client: &mut Client,
    store: &str,
    written_by: &str,
    events: &[Arc<Event>],
) -> Result<Written, PostgresError> {
    let tx = client.transaction().await?;
    let positions: Vec<_> = events.iter().map(|e| e.kafka_position()).collect();
    let fenced = if positions.iter().flatten().any(|p| &*p.store == store) {
        Some(offsets::fence(&tx, store, &positions).await?)
    } else {
        None
    };
    let kept: Vec<&Arc<Event>> = match &fenced {
        Some(fenced) => events
            .iter()
            .zip(&fenced.keep)
            .filter_map(|(event, keep)| keep.then_some(event))
            .collect(),
        None => events.iter().collect(),
    };
    let mut inserted = 0;
    if !kept.is_empty() {
        let names: Vec<&str> = COLUMNS.iter().map(|(name, _)| *name).collect();
        let types: Vec<Type> = COLUMNS.iter().map(|(_, t)| t.clone()).collect();
        let sink = tx
            .copy_in(&format!(
                "COPY eventgate_staging ({}) FROM STDIN (FORMAT binary)",
                names.join(", ")
            ))
            .await?;
        let writer = BinaryCopyInWriter::new(sink, &types);
        pin_mut!(writer);
        for event in &kept {
            let row = Row::of(event, written_by);
            writer.as_mut().write(&row.values()).await?;
        }
        writer.finish().await?;
        let selected: Vec<String> = names
            .iter()
            .map(|name| match *name {
                "event" | "labels" => format!("{name}::jsonb"),
                other => other.to_owned(),
            })
            .collect();
        inserted = tx
            .execute(
                &format!(
                    "INSERT INTO events ({}) SELECT {} FROM eventgate_staging ORDER BY seq
                     ON CONFLICT DO NOTHING",
                    names.join(", "),
                    selected.join(", ")
                ),
                &[],
            )
            .await?;
    }
    if let Some(fenced) = &fenced {
        offsets::advance(&tx, fenced).await?;
    }
    tx.commit().await?;
    let (stale, stored) = fenced.as_ref().map_or((0, 0), |f| (f.stale, f.stored));
    Ok(Written {
        inserted,
        duplicates: kept.len() as u64 - inserted + stored,
        fenced: stale,
    })
}

/// One event's staged values.
struct Row<'a> {
    received: SystemTime,
    id: uuid::Uuid,
    time: Option<SystemTime>,
    event: Option<&'a str>,
    columns: EventRow<'a>,
    seq: i64,
    written_by: &'a str,
    node_source: Option<&'a str>,
}

impl<'a> Row<'a> {
    fn of(event: &'a Event, written_by: &'a str) -> Self {
        let columns = EventRow::from_event(event);
        Self {
            received: event.identity.received_at,
            id: uuid::Uuid::from_bytes(*event.identity.id.as_bytes()),
            time: event.envelope.timestamp.as_ref().and_then(storable_time),
            // jsonb has no \u0000: such an event keeps its payload bytes, not its JSON.
            event: columns.event.filter(|json| !json.contains("\\u0000")),
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
            &w.labels,
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
    fn the_staged_columns_are_the_tables() {
        let schema: String = super::migrate::MIGRATIONS
            .iter()
            .map(|(_, sql)| *sql)
            .collect();
        for (name, _) in COLUMNS {
            assert!(
                schema.contains(&format!("\n    {name} "))
                    || schema.contains(&format!("ADD COLUMN {name} ")),
                "{name} is not a column of events"
            );
        }
    }
}
