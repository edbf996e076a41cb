//! One `events` row back as an [`Event`], so the matcher and the renderers see exactly
//! what the gateway saw.

use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;

use rusqlite::Row;

use super::QueryError;
use super::time::from_stored;
use crate::event::{Event, EventId, Identity, Origin, Source};
use crate::proto::containerd::types::Envelope;
use crate::publisher::Publisher;
use crate::store::workload;

pub(super) const COLUMNS: &str = "row_id, seq, id, timestamp, received_at, namespace, topic, \
     type_url, payload, source, publisher_uid, publisher_gid, publisher_pid, publisher_subject, \
     origin, origin_clock, pod_name, pod_namespace, pod_uid, container_name, container_kind, image, \
     labels, node, node_seq, reconciled_from, reason";

/// A stored event with what only the store knows about it.
#[derive(Debug)]
pub struct StoredEvent {
    pub row_id: i64,
    pub event: Event,
    /// The `source` column as stored; `None` for rows written before it existed.
    pub source: Option<String>,
}

/// The columns of one row as stored, before they are checked and rebuilt: what each
/// store's reader fills in from its own types.
pub(super) struct RawRow {
    pub row_id: i64,
    pub seq: i64,
    pub id: String,
    pub timestamp: Option<String>,
    pub received_at: String,
    pub namespace: String,
    pub topic: String,
    pub type_url: Option<String>,
    pub payload: Option<Vec<u8>>,
    pub source: Option<String>,
    pub publisher: (Option<i64>, Option<i64>, Option<i64>, Option<String>),
    pub origin: String,
    pub origin_clock: Option<String>,
    /// pod_name, pod_namespace, pod_uid, container_name, container_kind, image,
    /// labels (as JSON text).
    pub workload: [Option<String>; 7],
    pub node: Option<String>,
    pub node_seq: Option<i64>,
    pub reconciled_from: Option<String>,
    pub reason: Option<String>,
}

pub(super) fn read(row: &Row<'_>, path: &Path) -> Result<StoredEvent, QueryError> {
    let raw = read_sqlite(row).map_err(|source| QueryError::Sqlite {
        path: path.to_path_buf(),
        what: "reading a row",
        source,
    })?;
    raw.into_stored(&path.display().to_string())
}

fn read_sqlite(row: &Row<'_>) -> rusqlite::Result<RawRow> {
    let mut workload: [Option<String>; 7] = Default::default();
    for (i, column) in workload.iter_mut().enumerate() {
        *column = row.get(16 + i)?;
    }
    Ok(RawRow {
        row_id: row.get(0)?,
        seq: row.get(1)?,
        id: row.get(2)?,
        timestamp: row.get(3)?,
        received_at: row.get(4)?,
        namespace: row.get(5)?,
        topic: row.get(6)?,
        type_url: row.get(7)?,
        payload: row.get(8)?,
        source: row.get(9)?,
        publisher: (row.get(10)?, row.get(11)?, row.get(12)?, row.get(13)?),
        origin: row.get(14)?,
        origin_clock: row.get(15)?,
        workload,
        node: row.get(23)?,
        node_seq: row.get(24)?,
        reconciled_from: row.get(25)?,
        reason: row.get(26)?,
    })
}

impl RawRow {
    /// The event the row holds; `store` names the store in errors.
    pub(super) fn into_stored(self, store: &str) -> Result<StoredEvent, QueryError> {
        let row_id = self.row_id;
        let bad = |what: String| QueryError::BadRow {
            store: store.to_owned(),
            row_id,
            what,
        };
        let (uid, gid, pid, subject) = self.publisher;
        let publisher = Publisher::from_columns(uid, gid, pid, subject).map_err(bad)?;
        let origin = Origin::from_stored(
            &self.origin,
            self.origin_clock.as_deref(),
            self.reconciled_from.as_deref(),
        )
        .map_err(bad)?;
        let workload = workload::with_reason(
            workload::from_columns(self.workload).map_err(bad)?,
            self.reason,
        );
        let seq = self.seq;
        let seq = u64::try_from(seq).map_err(|_| bad(format!("negative seq {seq}")))?;
        let node_seq = self
            .node_seq
            .map(|seq| u64::try_from(seq).map_err(|_| bad(format!("negative node_seq {seq}"))))
            .transpose()?;
        let id = &self.id;
        let id = EventId::from_str(id).map_err(|e| bad(format!("id {id:?}: {e}")))?;
        let timestamp = match self.timestamp {
            None => None,
            Some(text) => Some(
                prost_types::Timestamp::from_str(&text)
                    .map_err(|e| bad(format!("timestamp {text:?}: {e}")))?,
            ),
        };
        let received_at = &self.received_at;
        let received_at = from_stored(received_at)
            .ok_or_else(|| bad(format!("received_at {received_at:?} is not RFC 3339")))?;
        let event = self.type_url.map(|type_url| prost_types::Any {
            type_url,
            value: self.payload.unwrap_or_default(),
        });
        let envelope = Envelope {
            timestamp,
            namespace: self.namespace,
            topic: self.topic,
            event,
        };
        let source = self.source;
        let identity = Identity {
            id,
            received_at: received_at.into(),
            source: source.as_deref().map_or(Source::Internal, Source::parse),
            publisher,
            origin,
            workload: workload.map(Arc::new),
            node: self.node.map(Arc::from),
            node_seq,
            // Not read back: the SQLite store has no such column, and `audit verify
            // --node` reads PostgreSQL's itself.
            node_source: None,
        };
        Ok(StoredEvent {
            row_id,
            event: Event::from_identity(seq, identity, envelope),
            source,
        })
    }
}
