//! Writing rows: one transaction per batch, each new row chained to the one before
//! ([`super::chain`]).

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use thiserror::Error;

use super::{EventRow, chain, tree};

/// Re-delivery of an already stored event is a no-op, not an error, and takes no
/// place in the chain: `row_id` is given explicitly and only advances on a new row.
///
/// `node` is bound in both statements: every event captured since nodes were kept
/// has one; `node_seq`, `reconciled_from` and `reason` too, a few more parameters
/// rather than more statements.
const INSERT: &str = "INSERT INTO events (row_id, seq, id, timestamp, received_at, namespace, topic, type_url, payload, event, source, \
     publisher_uid, publisher_gid, publisher_pid, publisher_subject, origin, origin_clock, prev_hash, hash, node, node_seq, \
     reconciled_from, reason) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23) \
     ON CONFLICT(id) DO NOTHING";

/// [`INSERT`] with the workload columns, for rows that have one. Rows without one
/// leave them out (NULL by default) rather than binding seven NULLs: the writer's
/// cost per row stays what it was before the columns existed (measured: binding them
/// took about 5% more CPU per row).
const INSERT_WORKLOAD: &str = "INSERT INTO events (row_id, seq, id, timestamp, received_at, namespace, topic, type_url, payload, event, source, \
     publisher_uid, publisher_gid, publisher_pid, publisher_subject, origin, origin_clock, prev_hash, hash, node, node_seq, \
     reconciled_from, reason, pod_name, pod_namespace, pod_uid, container_name, container_kind, image, labels) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, \
     ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30) \
     ON CONFLICT(id) DO NOTHING";

const READ_HEAD: &str = "SELECT head_row_id, head_hash FROM audit_chain WHERE id = 1";

const WRITE_HEAD: &str =
    "UPDATE audit_chain SET head_row_id = ?1, head_seq = ?2, head_hash = ?3 WHERE id = 1";

/// SQLite integers are signed 64-bit; a sequence number past that cannot be stored.
fn sql_seq(seq: u64) -> rusqlite::Result<i64> {
    i64::try_from(seq).map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))
}

/// A failed insert, with the index of the row being inserted when it failed (if any).
/// The transaction has been rolled back: nothing of the batch is stored.
#[derive(Debug, Error)]
#[error("{source}")]
pub struct InsertError {
    pub row: Option<usize>,
    #[source]
    pub source: rusqlite::Error,
}

/// The chain's head as the store records it: where the next row links.
fn read_head(tx: &rusqlite::Transaction<'_>) -> rusqlite::Result<(i64, chain::Hash)> {
    let head = tx
        .prepare_cached(READ_HEAD)?
        .query_row([], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, Option<chain::Hash>>(1)?))
        })
        .optional()
        .map_err(|e| match e {
            // A head hash of the wrong size or type: the table was edited by hand.
            rusqlite::Error::FromSqlConversionFailure(..)
            | rusqlite::Error::InvalidColumnType(..) => {
                damaged_chain("audit_chain.head_hash is not a 32-byte hash")
            }
            other => other,
        })?;
    match head {
        Some((row_id, hash)) => Ok((row_id, hash.unwrap_or(chain::ZERO))),
        None => Err(damaged_chain("the audit_chain table has lost its row")),
    }
}

/// A chain table the writer cannot continue from. Reported as SQLite corruption:
/// retryable, so events stay queued while an operator looks (`eventgate audit
/// verify` says what was changed).
fn damaged_chain(what: &str) -> rusqlite::Error {
    rusqlite::Error::SqliteFailure(
        rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CORRUPT),
        Some(format!(
            "{what}: the audit store was modified outside eventgate; run `eventgate audit verify`"
        )),
    )
}

/// The row_id after the chain's head already holds a row: one was added by hand.
fn taken_row_id(error: rusqlite::Error, row_id: i64) -> rusqlite::Error {
    match &error {
        rusqlite::Error::SqliteFailure(e, _)
            if e.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY =>
        {
            damaged_chain(&format!(
                "row_id {row_id}, the next after the chain's head, already holds a row"
            ))
        }
        _ => error,
    }
}

/// Inserts `rows` in one transaction with cached prepared statements, chaining each
/// new row to the one before (see `chain`); rows whose id is already stored are
/// skipped. Returns how many rows were new. On error nothing of the batch is kept,
/// so the same rows can simply be sent again.
///
/// The chain's head is read from `audit_chain` inside the transaction and written
/// back before the commit, so there is no in-memory chain state to go stale: a
/// rolled-back batch leaves the head where it was.
pub fn insert_rows(conn: &mut Connection, rows: &[EventRow<'_>]) -> Result<usize, InsertError> {
    let whole = |source| InsertError { row: None, source };
    // IMMEDIATE takes the write lock up front, where busy_timeout applies; a
    // deferred transaction upgrading later can fail at once with SQLITE_BUSY.
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(whole)?;
    let (mut row_id, mut prev) = read_head(&tx).map_err(whole)?;
    let mut leaves = tree::Appender::start(&tx, row_id).map_err(|e| whole(e.into_sqlite()))?;
    let mut head_seq = None;
    let mut inserted = 0;
    let mut hasher = chain::RowHasher::default();
    {
        let mut plain = tx.prepare_cached(INSERT).map_err(whole)?;
        let mut with_workload = None;
        for (i, row) in rows.iter().enumerate() {
            let at = |source| InsertError {
                row: Some(i),
                source,
            };
            let seq = sql_seq(row.seq).map_err(at)?;
            let (hash, leaf) = hasher.hash_and_leaf(&prev, &chain::values(seq, row));
            let next = row_id.checked_add(1).ok_or_else(|| {
                at(damaged_chain(
                    "audit_chain.head_row_id is at the largest row_id",
                ))
            })?;
            // Every column named: one added to the row is a compile error here
            // until it is stored.
            let EventRow {
                seq: _,
                id,
                timestamp,
                received_at,
                namespace,
                topic,
                type_url,
                payload,
                event,
                source,
                publisher,
                origin,
                origin_clock,
                workload: w,
                node,
                node_seq,
                reconciled_from,
                reason,
            } = row;
            let columns = params![
                next,
                seq,
                id,
                timestamp,
                received_at,
                namespace,
                topic,
                type_url,
                payload,
                event,
                source,
                publisher.0,
                publisher.1,
                publisher.2,
                publisher.3,
                origin,
                origin_clock,
                prev,
                hash,
                node,
                node_seq,
                reconciled_from,
                reason,
            ];
            let changed = match w.is_empty() {
                true => plain.execute(columns),
                false => {
                    let stmt = match &mut with_workload {
                        Some(stmt) => stmt,
                        None => {
                            with_workload.insert(tx.prepare_cached(INSERT_WORKLOAD).map_err(at)?)
                        }
                    };
                    let workload = params![
                        w.pod_name,
                        w.pod_namespace,
                        w.pod_uid,
                        w.container_name,
                        w.container_kind,
                        w.image,
                        w.labels,
                    ];
                    stmt.execute(&[columns, workload].concat()[..])
                }
            }
            .map_err(|e| at(taken_row_id(e, next)))?;
            if changed > 0 {
                leaves.push(leaf);
                row_id = next;
                prev = hash;
                head_seq = Some(seq);
                inserted += 1;
            }
        }
    }
    leaves.finish(&tx).map_err(|e| whole(e.into_sqlite()))?;
    if let Some(seq) = head_seq {
        tx.prepare_cached(WRITE_HEAD)
            .and_then(|mut stmt| stmt.execute(params![row_id, seq, prev]))
            .map_err(whole)?;
    }
    // A failed COMMIT leaves the transaction open; dropping `tx` rolls it back.
    tx.commit().map_err(whole)?;
    Ok(inserted)
}

/// The baseline for benchmarks: the same rows into the same table (same indexes),
/// the way a plain rusqlite program would write them: one transaction, one prepared
/// statement, a plain INSERT (the rows must not be stored yet), no hash chain. Kept
/// here, next to the insert it is measured against, so a test holds the two to the
/// same rows.
#[cfg(any(test, feature = "bench"))]
pub(crate) fn raw_insert_rows(
    conn: &mut Connection,
    rows: &[EventRow<'_>],
) -> rusqlite::Result<()> {
    let tx = conn.transaction()?;
    {
        let mut stmt = tx.prepare_cached(
            "INSERT INTO events (seq, id, timestamp, received_at, namespace, topic, type_url, payload, event, source, \
             publisher_uid, publisher_gid, publisher_pid, publisher_subject, origin, origin_clock, \
             pod_name, pod_namespace, pod_uid, container_name, container_kind, image, labels, node, node_seq, \
             reconciled_from, reason) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, \
             ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27)",
        )?;
        for row in rows {
            stmt.execute(params![
                sql_seq(row.seq)?,
                row.id,
                row.timestamp,
                row.received_at,
                row.namespace,
                row.topic,
                row.type_url,
                row.payload,
                row.event,
                row.source,
                row.publisher.0,
                row.publisher.1,
                row.publisher.2,
                row.publisher.3,
                row.origin,
                row.origin_clock,
                row.workload.pod_name,
                row.workload.pod_namespace,
                row.workload.pod_uid,
                row.workload.container_name,
                row.workload.container_kind,
                row.workload.image,
                row.workload.labels,
                row.node,
                row.node_seq,
                row.reconciled_from,
                row.reason,
            ])?;
        }
    }
    tx.commit()
}
