//! The raw baseline's client side: events as rows of the PostgreSQL store's `events`
//! table, written with tokio-postgres's binary COPY straight into the partitioned
//! table (PostgreSQL routes each row to its partition), no staging table, no
//! conflict handling. The values are the ones the `postgres` forwarder's writer
//! stages (`src/postgres/write.rs`); `event` and `labels` go in as jsonb.

use std::time::SystemTime;

use bytes::BufMut;
use futures::pin_mut;
use tokio_postgres::Client;
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::{IsNull, ToSql, Type, to_sql_checked};

use crate::event::Event;
use crate::store::EventRow;

/// The columns written, in COPY order, with their types: every column of `events`
/// but `row_id` (a bigserial the server numbers).
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

/// JSON text sent as jsonb's binary form (a version byte, then the text): the
/// server parses it as it parses the writer's `::jsonb` cast.
#[derive(Debug)]
struct Jsonb<T>(T);

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

/// One row's values, owned where the event does not hold them.
struct Values<'a> {
    received: SystemTime,
    id: uuid::Uuid,
    seq: i64,
    time: Option<SystemTime>,
    event: Option<Jsonb<&'a str>>,
    labels: Option<Jsonb<String>>,
    row: EventRow<'a>,
    node_source: Option<&'a str>,
}

impl<'a> Values<'a> {
    fn of(event: &'a Event) -> Self {
        let mut row = EventRow::from_event(event);
        let labels = row.workload.labels.take().map(Jsonb);
        Self {
            received: event.identity.received_at,
            id: uuid::Uuid::from_bytes(*event.identity.id.as_bytes()),
            seq: i64::try_from(event.seq).unwrap_or(i64::MAX),
            // As the writer makes it.
            time: event
                .envelope
                .timestamp
                .as_ref()
                .and_then(crate::postgres::write::storable_time),
            // jsonb has no \u0000 (the writer keeps such an event's payload only).
            event: row
                .event
                .filter(|json| !json.contains("\\u0000"))
                .map(Jsonb),
            labels,
            row,
            node_source: event.identity.node_source.as_deref(),
        }
    }

    fn params(&'a self, written_by: &'a &'a str) -> Vec<&'a (dyn ToSql + Sync)> {
        let c = &self.row;
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
            written_by,
            &self.node_source,
        ]
    }
}

/// COPYs `events` into `events` in one transaction per `batch` events; returns the
/// rows copied.
pub(crate) async fn copy_batches(
    client: &mut Client,
    events: &[Event],
    batch: usize,
    written_by: &str,
) -> Result<u64, tokio_postgres::Error> {
    let names: Vec<&str> = COLUMNS.iter().map(|(name, _)| *name).collect();
    let types: Vec<Type> = COLUMNS.iter().map(|(_, t)| t.clone()).collect();
    let statement = format!(
        "COPY events ({}) FROM STDIN (FORMAT binary)",
        names.join(", ")
    );
    let mut copied = 0;
    for chunk in events.chunks(batch.max(1)) {
        let tx = client.transaction().await?;
        let sink = tx.copy_in(&statement).await?;
        let writer = BinaryCopyInWriter::new(sink, &types);
        pin_mut!(writer);
        for event in chunk {
            let values = Values::of(event);
            writer.as_mut().write(&values.params(&written_by)).await?;
        }
        copied += writer.finish().await?;
        tx.commit().await?;
    }
    Ok(copied)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_columns_are_every_column_of_the_table_but_row_id() {
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
}
