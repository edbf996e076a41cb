//! The statements behind [`super::Store`]. Blocking: they run on the blocking pool.

use std::sync::Arc;
use std::time::SystemTime;

use prost::Message;
use rusqlite::{Connection, OptionalExtension, Row, TransactionBehavior, params};

use super::{Entry, Failure, Reason, State, timestamp};
use crate::event::{Clock, Event, Identity, Origin, Witness, Workload};
use crate::publisher::Publisher;

/// A second death of the same event for the same forwarder adds to its row: attempts
/// add up, the first attempt stays the earliest, the rest describes the latest failure.
const RECORD: &str = "INSERT INTO dead_letters (forwarder, event_id, seq, source, envelope, received_at, \
     error, reason, attempts, first_attempt_at, last_attempt_at, dead_at, retry_requested_at, state, \
     publisher_uid, publisher_gid, publisher_pid, publisher_subject, origin, origin_clock, workload, node, node_seq, \
     reconciled_from, node_source) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, NULL, 'dead', ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23) \
     ON CONFLICT (forwarder, event_id) DO UPDATE SET \
       seq = excluded.seq, error = excluded.error, reason = excluded.reason, \
       attempts = attempts + excluded.attempts, \
       first_attempt_at = min(first_attempt_at, excluded.first_attempt_at), \
       last_attempt_at = excluded.last_attempt_at, dead_at = excluded.dead_at, \
       retry_requested_at = NULL, state = 'dead'";

const COLUMNS: &str = "id, forwarder, event_id, seq, source, envelope, received_at, error, reason, \
     attempts, first_attempt_at, last_attempt_at, dead_at, retry_requested_at, state, \
     publisher_uid, publisher_gid, publisher_pid, publisher_subject, origin, origin_clock, workload, node, node_seq, \
     reconciled_from, node_source";

fn sql_int(n: u64) -> rusqlite::Result<i64> {
    i64::try_from(n).map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))
}

pub(super) fn record(
    conn: &mut Connection,
    forwarder: &str,
    events: &[Arc<Event>],
    failure: &Failure,
    now: SystemTime,
) -> rusqlite::Result<usize> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    {
        let mut stmt = tx.prepare_cached(RECORD)?;
        let first = timestamp(failure.first_attempt_at);
        let last = timestamp(failure.last_attempt_at);
        let dead_at = timestamp(now);
        for event in events {
            let Identity {
                id,
                received_at,
                source,
                publisher,
                origin,
                workload,
                node,
                node_seq,
                node_source,
            } = &event.identity;
            let (uid, gid, pid, subject) = Publisher::columns(publisher.as_ref());
            stmt.execute(params![
                forwarder,
                id.to_string(),
                sql_int(event.seq)?,
                source.describe(),
                event.envelope.encode_to_vec(),
                timestamp(*received_at),
                failure.error,
                failure.reason.as_str(),
                failure.attempts,
                first,
                last,
                dead_at,
                uid,
                gid,
                pid,
                subject,
                origin.label(),
                origin.clock().map(Clock::label),
                workload.as_deref().map(Message::encode_to_vec),
                node.as_deref(),
                node_seq.map(sql_int).transpose()?,
                origin.witness().map(Witness::label),
                node_source.as_deref(),
            ])?;
        }
    }
    tx.commit()?;
    Ok(events.len())
}

/// SQLite integers are signed; counts and sequence numbers stored here never are.
fn unsigned(row: &Row<'_>, i: usize) -> rusqlite::Result<u64> {
    let n: i64 = row.get(i)?;
    u64::try_from(n).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(i, rusqlite::types::Type::Integer, Box::new(e))
    })
}

fn entry(row: &Row<'_>) -> rusqlite::Result<Entry> {
    let text = |i: usize, value: String| {
        rusqlite::Error::FromSqlConversionFailure(
            i,
            rusqlite::types::Type::Text,
            format!("unexpected value {value:?}").into(),
        )
    };
    let reason: String = row.get(8)?;
    let state: String = row.get(14)?;
    let publisher = Publisher::from_columns(row.get(15)?, row.get(16)?, row.get(17)?, row.get(18)?)
        .map_err(|what| {
            rusqlite::Error::FromSqlConversionFailure(
                15,
                rusqlite::types::Type::Integer,
                what.into(),
            )
        })?;
    let origin: String = row.get(19)?;
    let clock: Option<String> = row.get(20)?;
    let from: Option<String> = row.get(24)?;
    let origin =
        Origin::from_stored(&origin, clock.as_deref(), from.as_deref()).map_err(|what| {
            rusqlite::Error::FromSqlConversionFailure(19, rusqlite::types::Type::Text, what.into())
        })?;
    let workload = row
        .get::<_, Option<Vec<u8>>>(21)?
        .map(|bytes| Workload::decode(bytes.as_slice()))
        .transpose()
        .map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(21, rusqlite::types::Type::Blob, e.into())
        })?;
    Ok(Entry {
        id: row.get(0)?,
        forwarder: row.get(1)?,
        event_id: row.get(2)?,
        seq: unsigned(row, 3)?,
        source: row.get(4)?,
        envelope: row.get(5)?,
        received_at: row.get(6)?,
        error: row.get(7)?,
        reason: Reason::parse(&reason).ok_or_else(|| text(8, reason.clone()))?,
        attempts: unsigned(row, 9)?,
        first_attempt_at: row.get(10)?,
        last_attempt_at: row.get(11)?,
        dead_at: row.get(12)?,
        retry_requested_at: row.get(13)?,
        state: State::parse(&state).ok_or_else(|| text(14, state.clone()))?,
        publisher,
        origin,
        workload,
        node: row.get(22)?,
        node_seq: row
            .get::<_, Option<i64>>(23)?
            .map(|n| {
                u64::try_from(n).map_err(|e| {
                    rusqlite::Error::FromSqlConversionFailure(
                        23,
                        rusqlite::types::Type::Integer,
                        Box::new(e),
                    )
                })
            })
            .transpose()?,
        node_source: row.get(25)?,
    })
}

/// Entries in the order they first died, optionally of one forwarder.
pub(super) fn list(
    conn: &Connection,
    forwarder: Option<&str>,
    limit: Option<u64>,
) -> rusqlite::Result<Vec<Entry>> {
    let limit = limit.map_or(Ok(-1), sql_int)?;
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM dead_letters WHERE ?1 IS NULL OR forwarder = ?1 ORDER BY id LIMIT ?2"
    ))?;
    stmt.query_map(params![forwarder, limit], entry)?.collect()
}

/// Marks `dead` entries as requested for redelivery: all of `forwarder` (or of every
/// forwarder), or only those with the given ids. Returns how many were marked.
pub(super) fn request(
    conn: &mut Connection,
    forwarder: Option<&str>,
    ids: &[i64],
    now: SystemTime,
) -> rusqlite::Result<usize> {
    let now = timestamp(now);
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let mut marked = 0;
    {
        let mut stmt = tx.prepare_cached(
            "UPDATE dead_letters SET state = 'requested', retry_requested_at = ?1 \
             WHERE state = 'dead' AND (?2 IS NULL OR forwarder = ?2) AND (?3 IS NULL OR id = ?3)",
        )?;
        if ids.is_empty() {
            marked += stmt.execute(params![now, forwarder, None::<i64>])?;
        }
        for id in ids {
            marked += stmt.execute(params![now, forwarder, id])?;
        }
    }
    tx.commit()?;
    Ok(marked)
}

/// Takes up to `limit` requested entries of `forwarder` for redelivery: they become
/// `queued` in the same transaction, so two takers never get the same entry.
pub(super) fn take(
    conn: &mut Connection,
    forwarder: &str,
    limit: u64,
) -> rusqlite::Result<Vec<Entry>> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let entries = {
        let mut select = tx.prepare_cached(&format!(
            "SELECT {COLUMNS} FROM dead_letters WHERE forwarder = ?1 AND state = 'requested' ORDER BY id LIMIT ?2"
        ))?;
        let entries: Vec<Entry> = select
            .query_map(params![forwarder, sql_int(limit)?], entry)?
            .collect::<rusqlite::Result<_>>()?;
        let mut queue =
            tx.prepare_cached("UPDATE dead_letters SET state = 'queued' WHERE id = ?1")?;
        for entry in &entries {
            queue.execute([entry.id])?;
        }
        entries
    };
    tx.commit()?;
    Ok(entries)
}

/// Removes entries by id (redelivered). Returns how many there were.
pub(super) fn delete(conn: &mut Connection, ids: &[i64]) -> rusqlite::Result<usize> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let mut deleted = 0;
    {
        let mut stmt = tx.prepare_cached("DELETE FROM dead_letters WHERE id = ?1")?;
        for id in ids {
            deleted += stmt.execute([id])?;
        }
    }
    tx.commit()?;
    Ok(deleted)
}

/// Puts entries back to `dead` with a new error, without counting an attempt (used
/// when an entry cannot even be turned back into an event).
pub(super) fn release(conn: &mut Connection, id: i64, error: &str) -> rusqlite::Result<usize> {
    conn.execute(
        "UPDATE dead_letters SET state = 'dead', retry_requested_at = NULL, error = ?2 WHERE id = ?1",
        params![id, error],
    )
}

/// Removes entries of `forwarder` (or all) that died before `before` (or whenever).
pub(super) fn purge(
    conn: &mut Connection,
    forwarder: Option<&str>,
    before: Option<SystemTime>,
) -> rusqlite::Result<usize> {
    conn.execute(
        "DELETE FROM dead_letters WHERE (?1 IS NULL OR forwarder = ?1) AND (?2 IS NULL OR dead_at < ?2)",
        params![forwarder, before.map(timestamp)],
    )
}

/// Entries a stopped gateway left `queued` go back to `requested`.
pub(super) fn requeue_interrupted(conn: &mut Connection) -> rusqlite::Result<usize> {
    conn.execute(
        "UPDATE dead_letters SET state = 'requested' WHERE state = 'queued'",
        [],
    )
}

/// The forwarders with entries, and how many each has, by name.
pub(super) fn forwarders(conn: &Connection) -> rusqlite::Result<Vec<(String, u64)>> {
    let mut stmt = conn.prepare_cached(
        "SELECT forwarder, count(*) FROM dead_letters GROUP BY forwarder ORDER BY forwarder",
    )?;
    stmt.query_map([], |row| Ok((row.get(0)?, unsigned(row, 1)?)))?
        .collect()
}

/// Whether `forwarder` has any entry.
pub(super) fn has_forwarder(conn: &Connection, forwarder: &str) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT 1 FROM dead_letters WHERE forwarder = ?1 LIMIT 1",
        [forwarder],
        |_| Ok(()),
    )
    .optional()
    .map(|found| found.is_some())
}
