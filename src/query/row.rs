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

pub(super) fn read(row: &Row<'_>, path: &Path) -> Result<StoredEvent, QueryError> {
    let sqlite = |source| QueryError::Sqlite {
        path: path.to_path_buf(),
        what: "reading a row",
        source,
    };
    let row_id: i64 = row.get(0).map_err(sqlite)?;
    let bad = |what: String| QueryError::BadRow {
        path: path.to_path_buf(),
        row_id,
        what,
    };
    let seq: i64 = row.get(1).map_err(sqlite)?;
    let id: String = row.get(2).map_err(sqlite)?;
    let timestamp: Option<String> = row.get(3).map_err(sqlite)?;
    let received_at: String = row.get(4).map_err(sqlite)?;
    let type_url: Option<String> = row.get(7).map_err(sqlite)?;
    let payload: Option<Vec<u8>> = row.get(8).map_err(sqlite)?;
    let source: Option<String> = row.get(9).map_err(sqlite)?;
    let publisher = Publisher::from_columns(
        row.get(10).map_err(sqlite)?,
        row.get(11).map_err(sqlite)?,
        row.get(12).map_err(sqlite)?,
        row.get(13).map_err(sqlite)?,
    )
    .map_err(bad)?;
    let origin: String = row.get(14).map_err(sqlite)?;
    let clock: Option<String> = row.get(15).map_err(sqlite)?;
    let from: Option<String> = row.get(25).map_err(sqlite)?;
    let origin = Origin::from_stored(&origin, clock.as_deref(), from.as_deref()).map_err(bad)?;
    let mut workload: [Option<String>; 7] = Default::default();
    for (i, column) in workload.iter_mut().enumerate() {
        *column = row.get(16 + i).map_err(sqlite)?;
    }
    let reason: Option<String> = row.get(26).map_err(sqlite)?;
    let workload = workload::with_reason(workload::from_columns(workload).map_err(bad)?, reason);
    let node: Option<String> = row.get(23).map_err(sqlite)?;
    let node_seq: Option<i64> = row.get(24).map_err(sqlite)?;

    let seq = u64::try_from(seq).map_err(|_| bad(format!("negative seq {seq}")))?;
    let node_seq = node_seq
        .map(|seq| u64::try_from(seq).map_err(|_| bad(format!("negative node_seq {seq}"))))
        .transpose()?;
    let id = EventId::from_str(&id).map_err(|e| bad(format!("id {id:?}: {e}")))?;
    let timestamp = match timestamp {
        None => None,
        Some(text) => Some(
            prost_types::Timestamp::from_str(&text)
                .map_err(|e| bad(format!("timestamp {text:?}: {e}")))?,
        ),
    };
    let received_at = from_stored(&received_at)
        .ok_or_else(|| bad(format!("received_at {received_at:?} is not RFC 3339")))?;
    let event = type_url.map(|type_url| prost_types::Any {
        type_url,
        value: payload.unwrap_or_default(),
    });
    let envelope = Envelope {
        timestamp,
        namespace: row.get(5).map_err(sqlite)?,
        topic: row.get(6).map_err(sqlite)?,
        event,
    };
    let identity = Identity {
        id,
        received_at: received_at.into(),
        source: source.as_deref().map_or(Source::Internal, Source::parse),
        publisher,
        origin,
        workload: workload.map(Arc::new),
        node: node.map(Arc::from),
        node_seq,
    };
    Ok(StoredEvent {
        row_id,
        event: Event::from_identity(seq, identity, envelope),
        source,
    })
}
