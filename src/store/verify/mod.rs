//! `eventgate audit verify`: walks the audit store in row_id order, recomputes every
//! row's hash and link ([`crate::store::chain`]) and compares the end with the head
//! `audit_chain` records. Streaming, one row (and one link) in memory at a time.
//!
//! Everything is read in one read transaction: the rows and `audit_chain` are one
//! snapshot, so a gateway writing meanwhile (WAL) neither disturbs the walk nor
//! looks like tampering.

pub(crate) mod checkpoints;
mod classify;
mod policy;
mod problem;
pub(crate) mod shipped;
mod signed;
mod state;
pub(crate) mod tree;
mod walk;
pub(crate) mod witnessed;

use std::path::Path;
use std::time::{Duration, Instant};

use rusqlite::types::ValueRef;
use rusqlite::{Connection, OptionalExtension, Row};
use thiserror::Error;

pub(crate) use problem::{Kind, Problem, RowRef};
pub(crate) use state::{Anchor, ChainState};

use super::chain::{self, Hash, RowValues};
use super::{StoreError, open_reader};
use walk::Walk;

#[derive(Debug, Error)]
pub enum VerifyError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("anchor {anchor} cannot be checked: {why}")]
    Anchor { anchor: Anchor, why: String },
    /// The signed checkpoints given could not be read or used.
    #[error(transparent)]
    Checkpoints(#[from] checkpoints::CheckpointsError),
}

/// What verification found: counts up to the first problem, and that problem.
#[derive(Debug)]
pub(crate) struct Report {
    /// `None` when `audit_chain` itself is unreadable (then `problem` says why).
    pub state: Option<ChainState>,
    /// Chained rows whose hash and link were recomputed and found right.
    pub verified: u64,
    /// Rows stored before the chain existed (schema 1 and 2): counted, not verified.
    pub legacy: u64,
    /// The last verified row: the chain's head when there is no problem.
    pub head: Option<RowRef>,
    /// Anchors found to match.
    pub anchors: Vec<Anchor>,
    /// The anchor whose row did not have its hash, when that is the problem.
    pub rewritten: Option<Anchor>,
    pub elapsed: Duration,
    pub problem: Option<Problem>,
}

/// How long a read waits for a lock; in WAL mode only a checkpoint's brief moments
/// (or a migration) can hold one.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

const ROWS: &str = "SELECT row_id, seq, id, timestamp, received_at, namespace, topic, type_url, \
     payload, event, source, publisher_uid, publisher_gid, publisher_pid, publisher_subject, \
     origin, origin_clock, pod_name, pod_namespace, pod_uid, container_name, container_kind, \
     image, labels, node, node_seq, reconciled_from, reason, prev_hash, hash FROM events \
     ORDER BY row_id";

/// Where [`ROWS`] puts `prev_hash` and `hash`: after row_id and the hashed columns.
const PREV_HASH: usize = 1 + chain::COLUMNS.len();
const HASH: usize = PREV_HASH + 1;

/// Opens the store read-only (a missing file is refused with the store's message).
pub(crate) fn open(path: &Path) -> Result<Connection, VerifyError> {
    Ok(open_reader(path, BUSY_TIMEOUT)?)
}

/// A read of the store at `path` failed, named as the store names it.
fn sqlite_error(path: &Path, what: &'static str) -> impl FnOnce(rusqlite::Error) -> VerifyError {
    let path = path.to_path_buf();
    move |source| StoreError::Sqlite { path, what, source }.into()
}

/// Verifies the whole store at `path`; `anchors` are hashes recorded elsewhere for
/// given rows. Blocking.
pub(crate) fn verify(path: &Path, anchors: &[Anchor]) -> Result<Report, VerifyError> {
    verify_with(path, |_, _| {
        Ok(Plan {
            anchors: anchors.to_vec(),
            problem: None,
        })
    })
}

/// What to check the walk against, decided from the same snapshot it reads.
pub(crate) struct Plan {
    pub anchors: Vec<Anchor>,
    /// Found before walking: reported instead of walking.
    pub problem: Option<Problem>,
}

/// [`verify`], with the anchors chosen by `plan` from the snapshot's `audit_chain`
/// (and anything else it reads on the connection), so that what is compared and what
/// is walked are one state of a store a gateway may be writing. `plan` is not called
/// when `audit_chain` itself is damaged. Blocking.
pub(crate) fn verify_with(
    path: &Path,
    plan: impl FnOnce(&Connection, &ChainState) -> Result<Plan, VerifyError>,
) -> Result<Report, VerifyError> {
    verify_then(path, plan, |_, _, _| Ok(()))
}

/// [`verify_with`], then `after` on the same snapshot when the walk found nothing
/// (the checks that need the whole chain verified first).
pub(crate) fn verify_then(
    path: &Path,
    plan: impl FnOnce(&Connection, &ChainState) -> Result<Plan, VerifyError>,
    after: impl FnOnce(&Connection, &ChainState, &mut Report) -> Result<(), VerifyError>,
) -> Result<Report, VerifyError> {
    let conn = open(path)?;
    let sqlite = |what| sqlite_error(path, what);
    let started = Instant::now();
    // One snapshot for audit_chain and every row.
    let tx = conn
        .unchecked_transaction()
        .map_err(sqlite("starting a read transaction"))?;
    let mut report = Report {
        state: None,
        verified: 0,
        legacy: 0,
        head: None,
        anchors: Vec::new(),
        rewritten: None,
        elapsed: Duration::ZERO,
        problem: None,
    };
    match state::read(&tx).map_err(sqlite("reading audit_chain"))? {
        Ok(state) => {
            let Plan {
                mut anchors,
                problem,
            } = plan(&tx, &state)?;
            report.problem = match problem {
                Some(problem) => Some(problem),
                None => {
                    // Sorted, so the walk finds a row's anchors by binary search: there
                    // may be one per signed checkpoint.
                    anchors.sort_unstable_by_key(|a| (a.row_id, a.hash));
                    anchors.dedup();
                    Walk::new(&tx, &state, &anchors, &mut report)?
                        .run()
                        .map_err(sqlite("reading the events"))?
                }
            };
            if report.problem.is_none() {
                after(&tx, &state, &mut report)?;
            }
            report.state = Some(state);
        }
        Err(problem) => report.problem = Some(problem),
    }
    report.elapsed = started.elapsed();
    Ok(report)
}

/// The head `audit_chain` records, with its row's time: what to record elsewhere
/// and pass to `verify --anchor` later. `None` row: nothing chained yet.
#[derive(Debug)]
pub(crate) struct Head {
    pub row: Option<RowRef>,
    pub hash: Option<Hash>,
}

/// Reads the head without verifying anything. `Ok(Err(_))`: `audit_chain` is
/// damaged. Blocking.
pub(crate) fn head(path: &Path) -> Result<Result<Head, Problem>, VerifyError> {
    let conn = open(path)?;
    let sqlite = |what| sqlite_error(path, what);
    let tx = conn
        .unchecked_transaction()
        .map_err(sqlite("starting a read transaction"))?;
    let state = match state::read(&tx).map_err(sqlite("reading audit_chain"))? {
        Ok(state) => state,
        Err(problem) => return Ok(Err(problem)),
    };
    let row = match state.head_hash {
        None => None,
        Some(_) if state.head_row_id == state.pruned_row_id => Some(checkpoint_ref(&state)),
        Some(_) => Some(
            row_ref(&tx, state.head_row_id)
                .map_err(sqlite("reading the head row"))?
                .unwrap_or(RowRef {
                    row_id: state.head_row_id,
                    seq: state.head_seq,
                    time: None,
                }),
        ),
    };
    Ok(Ok(Head {
        hash: state.head_hash,
        row,
    }))
}

fn checkpoint_ref(state: &ChainState) -> RowRef {
    RowRef {
        row_id: state.pruned_row_id,
        seq: state.pruned_seq,
        time: state.pruned_timestamp.clone(),
    }
}

/// A stored row's row_id, seq and time, looked up when a report names it.
fn row_ref(conn: &Connection, row_id: i64) -> rusqlite::Result<Option<RowRef>> {
    conn.prepare_cached(
        "SELECT seq, coalesce(timestamp, received_at) FROM events WHERE row_id = ?1",
    )?
    .query_row([row_id], |r| {
        Ok(RowRef {
            row_id,
            seq: r.get_ref(0)?.as_i64().ok(),
            time: r.get_ref(1)?.as_str().ok().map(str::to_owned),
        })
    })
    .optional()
}

fn values<'r>(row: &'r Row<'_>) -> rusqlite::Result<RowValues<'r>> {
    values_at(row, 1)
}

/// A row's hashed columns, [`chain::COLUMNS`] in order from column `first`.
pub(crate) fn values_at<'r>(row: &'r Row<'_>, first: usize) -> rusqlite::Result<RowValues<'r>> {
    let mut values = [ValueRef::Null; chain::COLUMNS.len()];
    for (i, value) in values.iter_mut().enumerate() {
        *value = row.get_ref(i + first)?;
    }
    Ok(values)
}

fn here(row_id: i64, values: &RowValues<'_>) -> RowRef {
    let text = |v: ValueRef<'_>| v.as_str().ok().map(str::to_owned);
    RowRef {
        row_id,
        seq: values[0].as_i64().ok(),
        time: text(values[2]).or_else(|| text(values[3])),
    }
}

fn short(hash: &Hash) -> String {
    chain::hex(&hash[..8])
}

#[cfg(test)]
mod tests;
