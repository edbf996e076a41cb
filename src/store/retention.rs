//! Retention: deleting the oldest rows of the audit store, a few at a time.
//!
//! Rows go strictly from the front (lowest row_id first), so what remains is always a
//! contiguous tail of the hash chain, and the checkpoint in `audit_chain` (the last
//! deleted row's seq, time and hash) is all `audit verify` needs to check that the
//! first remaining row was not tampered with. Each step is its own short IMMEDIATE
//! transaction: the forwarder's inserts wait at most one step, never a whole purge.
//!
//! Age is judged by `received_at` (when the gateway accepted the event), which grows
//! with row_id; an envelope's own timestamp can be anything a publisher or upstream
//! sent. A row that is young enough stops the step even if older ones follow it (a
//! clock stepped back): the front only moves forward.

use std::time::{Duration, SystemTime};

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use crate::proto::rfc3339_nanos;

/// What to keep. At least one of `max_age` and `max_rows` is set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Policy {
    /// Rows received longer ago than this are deleted.
    pub max_age: Option<Duration>,
    /// At most this many rows are kept (the newest).
    pub max_rows: Option<u64>,
}

/// What one step deleted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Step {
    pub deleted: u64,
    /// The last deleted row (the new checkpoint), when anything was deleted.
    pub checkpoint: Option<Checkpoint>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Checkpoint {
    pub row_id: i64,
    pub seq: i64,
    pub timestamp: Option<String>,
    /// NULL for a row stored before the chain existed.
    pub hash: Option<Vec<u8>>,
}

/// The number of rows stored, for the `max_rows` policy. A full count walks the
/// smallest index, so callers count once per round and subtract what they delete.
pub(crate) fn count_rows(conn: &Connection) -> rusqlite::Result<u64> {
    let count: i64 = conn.query_row("SELECT count(*) FROM events", [], |row| row.get(0))?;
    Ok(count.max(0) as u64)
}

/// Deletes up to `limit` rows from the front that `policy` no longer keeps, in one
/// transaction that also moves the checkpoint. `stored` is the current row count
/// (only read for `max_rows`). Returns what was deleted; `deleted < limit` means the
/// front is now within the policy.
pub(crate) fn prune_step(
    conn: &mut Connection,
    policy: &Policy,
    stored: u64,
    now: SystemTime,
    limit: usize,
) -> rusqlite::Result<Step> {
    let excess = policy
        .max_rows
        .map_or(0, |keep| stored.saturating_sub(keep));
    let cutoff = policy
        .max_age
        .and_then(|age| now.checked_sub(age))
        .map(|time| rfc3339_nanos(&prost_types::Timestamp::from(time)));
    if excess == 0 && cutoff.is_none() {
        return Ok(Step::default());
    }
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let mut last = None;
    let mut deleted = 0u64;
    {
        let mut front = tx.prepare_cached(
            "SELECT row_id, seq, timestamp, received_at, hash FROM events ORDER BY row_id LIMIT ?1",
        )?;
        let mut rows = front.query(params![i64::try_from(limit).unwrap_or(i64::MAX)])?;
        while let Some(row) = rows.next()? {
            let received_at: String = row.get(3)?;
            let too_old = cutoff.as_deref().is_some_and(|c| received_at.as_str() < c);
            if deleted >= excess && !too_old {
                break;
            }
            deleted += 1;
            last = Some(Checkpoint {
                row_id: row.get(0)?,
                seq: row.get(1)?,
                timestamp: row.get(2)?,
                hash: row.get(4)?,
            });
        }
    }
    let Some(checkpoint) = last else {
        return Ok(Step::default());
    };
    // Kept so that verify can prove when the boundary row was received.
    let record = super::prove::record(&tx, checkpoint.row_id)?;
    tx.prepare_cached("DELETE FROM events WHERE row_id <= ?1")?
        .execute(params![checkpoint.row_id])?;
    tx.prepare_cached(
        "UPDATE audit_chain SET pruned_row_id = ?1, pruned_seq = ?2, pruned_timestamp = ?3, \
         pruned_hash = ?4, pruned_rows = pruned_rows + ?5, pruned_at = ?6, pruned_record = ?7 \
         WHERE id = 1",
    )?
    .execute(params![
        checkpoint.row_id,
        checkpoint.seq,
        checkpoint.timestamp,
        checkpoint.hash,
        i64::try_from(deleted).unwrap_or(i64::MAX),
        rfc3339_nanos(&prost_types::Timestamp::from(now)),
        record,
    ])?;
    tx.commit()?;
    Ok(Step {
        deleted,
        checkpoint: Some(checkpoint),
    })
}

/// Whether the file can give pages back (`auto_vacuum = INCREMENTAL`). Only stores
/// created by this version can; older ones need a one-off `VACUUM` to switch.
pub(crate) fn shrinks(conn: &Connection) -> rusqlite::Result<bool> {
    let mode: i64 = conn.pragma_query_value(None, "auto_vacuum", |row| row.get(0))?;
    Ok(mode == 2)
}

/// Pages on the free list: space pruning freed that the file still holds.
pub(crate) fn free_pages(conn: &Connection) -> rusqlite::Result<u64> {
    let pages: i64 = conn.pragma_query_value(None, "freelist_count", |row| row.get(0))?;
    Ok(pages.max(0) as u64)
}

/// Returns up to `pages` free pages to the file system (one short write
/// transaction). Returns how many the free list shrank by.
pub(crate) fn vacuum_step(conn: &Connection, pages: u64) -> rusqlite::Result<u64> {
    let before = free_pages(conn)?;
    // incremental_vacuum returns no rows but must be stepped to run.
    let mut stmt = conn.prepare(&format!("PRAGMA incremental_vacuum({pages})"))?;
    let mut rows = stmt.query([])?;
    while rows.next()?.is_some() {}
    let after = free_pages(conn)?;
    Ok(before.saturating_sub(after))
}

/// Copies the WAL into the database without waiting for readers, so the freed
/// pages at the end of the file can actually be truncated away.
pub(crate) fn checkpoint_wal(conn: &Connection) -> rusqlite::Result<()> {
    conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
        .optional()
        .map(drop)
}

#[cfg(test)]
#[path = "retention_tests.rs"]
mod tests;
