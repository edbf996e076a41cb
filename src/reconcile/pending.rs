//! A reconcile's snapshot before its marker is durable: the second file of the
//! two-phase save that keeps the snapshot exactly as far as the record across a crash.
//!
//! The snapshot a reconcile leaves is known when it is planned, but it is only true
//! once its events and its marker are in the spool. Saved before, a crash would leave
//! a snapshot that claims events the record never got; saved after, a crash between
//! the marker's fsync and the save would lose it (and for a first reconcile, the
//! baseline itself: the next start would take a new one and reconstruct nothing). So
//! the state is written as `<upstream>.pending.json` before the events are appended,
//! naming the marker it waits for, and promoted once that marker is durable. A start
//! that finds one looks for its marker in the spool: found, the pending state is the
//! snapshot as of the marker; not found, the reconcile was not recorded and the next
//! one does it again.

use std::io;
use std::path::{Path, PathBuf};

use prost::Message;
use prost_types::Timestamp;
use serde::{Deserialize, Serialize};

use super::state::NodeState;
use crate::event::Source;
use crate::proto::eventgate::events::v1::UpstreamReconciled;
use crate::spool::{Spool, SpoolError};

pub(super) const VERSION: u32 = 1;

pub(crate) fn path(data_dir: &Path, upstream: &str) -> PathBuf {
    data_dir
        .join("state")
        .join(format!("{upstream}.pending.json"))
}

/// The marker a pending snapshot waits for: its upstream's reconcile whose lists were
/// read at this time (`seconds.nanos`), unique per upstream.
pub(crate) fn marker_id(listed_at: &Timestamp) -> String {
    format!("{}.{:09}", listed_at.seconds, listed_at.nanos)
}

/// The file's shape, as read.
#[derive(Deserialize)]
pub(super) struct Pending {
    pub version: u32,
    pub upstream: String,
    pub marker: String,
    /// The spool's next seq when it was written: the marker's is at least this.
    pub from_seq: u64,
    pub state: NodeState,
}

/// The same shape, written without copying the state.
#[derive(Serialize)]
struct Writing<'a> {
    version: u32,
    upstream: &'a str,
    marker: &'a str,
    from_seq: u64,
    state: &'a NodeState,
}

/// Writes the pending snapshot atomically and durably (temp file, fsync, rename,
/// fsync of the directory).
pub(super) fn write(
    path: &Path,
    upstream: &str,
    marker: &str,
    from_seq: u64,
    state: &NodeState,
) -> io::Result<()> {
    if let Some(dir) = path.parent() {
        crate::fsmode::create_dir_all(dir)?;
    }
    let writing = Writing {
        version: VERSION,
        upstream,
        marker,
        from_seq,
        state,
    };
    let bytes = serde_json::to_vec(&writing).map_err(io::Error::other)?;
    crate::spool::write_atomic(path, &bytes)
}

/// The pending snapshot of `upstream`, if one is there and readable; one that is not
/// (torn by a disk that lied, another upstream's, another version) is removed, which
/// is what a pending reconcile that was not recorded comes to anyway.
pub(super) fn read(path: &Path, upstream: &str) -> Option<Pending> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return None,
        Err(error) => {
            tracing::error!(path = %path.display(), %error, "a pending state snapshot cannot be read; the next reconcile does its work again");
            remove(path);
            return None;
        }
    };
    match serde_json::from_slice::<Pending>(&bytes) {
        Ok(pending) if pending.version == VERSION && pending.upstream == upstream => Some(pending),
        Ok(_) | Err(_) => {
            // `serve` refused a newer one at start; one that came since is left alone.
            if super::snapshot::version_of(path).is_some_and(|v| v > u64::from(VERSION)) {
                tracing::error!(path = %path.display(), "a pending state snapshot was written by a newer eventgate; left as it is");
                return None;
            }
            tracing::error!(path = %path.display(), "a pending state snapshot cannot be read; the next reconcile does its work again");
            remove(path);
            None
        }
    }
}

pub(super) fn remove(path: &Path) {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(error) if error.kind() == io::ErrorKind::NotFound => {}
        Err(error) => {
            tracing::warn!(path = %path.display(), %error, "cannot remove a pending state snapshot")
        }
    }
}

/// The seq of `upstream`'s reconciled marker named `marker`, if the spool holds it
/// durably at or after `from_seq`.
pub(super) async fn find_marker(
    spool: &Spool,
    upstream: &str,
    marker: &str,
    from_seq: u64,
) -> Result<Option<u64>, SpoolError> {
    let end = spool.next_seq();
    let mut reader = spool.reader(from_seq);
    while reader.position() < end {
        let batch = reader.next(1024, 4 << 20).await?;
        if batch.events.is_empty() && batch.gap.is_none() {
            break;
        }
        for event in &batch.events {
            if event.seq >= end {
                return Ok(None);
            }
            let envelope = &event.envelope;
            if event.identity.source != Source::Internal
                || envelope.topic != crate::markers::RECONCILED_TOPIC
            {
                continue;
            }
            let Some(any) = &envelope.event else {
                continue;
            };
            if any.type_url != crate::markers::RECONCILED_TYPE {
                continue;
            }
            let Ok(reconciled) = UpstreamReconciled::decode(any.value.as_slice()) else {
                continue;
            };
            if reconciled.upstream == upstream
                && reconciled.listed_at.as_ref().map(marker_id).as_deref() == Some(marker)
            {
                return Ok(Some(event.seq));
            }
        }
    }
    Ok(None)
}
