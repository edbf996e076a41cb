//! `eventgate audit verify`: walks the audit store in row_id order, recomputes every
//! row's hash and link ([`crate::store::chain`]) and compares the end with the head
//! `audit_chain` records. Streaming, one row (and one link) in memory at a time.
//!
//! Everything is read in one read transaction: the rows and `audit_chain` are one
//! snapshot, so a gateway writing meanwhile (WAL) neither disturbs the walk nor
//! looks like tampering.

mod classify;
mod problem;
mod state;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rusqlite::types::ValueRef;
use rusqlite::{Connection, OptionalExtension, Row};
use thiserror::Error;

pub use problem::{Kind, Problem, RowRef};
pub use state::{Anchor, ChainState};

use super::chain::{self, Hash, RowValues};
use super::{StoreError, open_reader};
use classify::{Broken, Link, Next, Origin};
use state::hash_value;

#[derive(Debug, Error)]
pub enum VerifyError {
    #[error(
        "no audit store at {path}; the `sqlite` forwarder creates it when `eventgate serve` runs (name another file with --db or --data-dir)"
    )]
    Missing { path: PathBuf },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("audit store {path}: {what}")]
    Sqlite {
        path: PathBuf,
        what: &'static str,
        #[source]
        source: rusqlite::Error,
    },
    #[error("anchor {anchor} cannot be checked: {why}")]
    Anchor { anchor: Anchor, why: String },
}

/// What verification found: counts up to the first problem, and that problem.
#[derive(Debug)]
pub struct Report {
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
    pub elapsed: Duration,
    pub problem: Option<Problem>,
}

/// How long a read waits for a lock; in WAL mode only a checkpoint's brief moments
/// (or a migration) can hold one.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

const ROWS: &str = "SELECT row_id, seq, id, timestamp, received_at, namespace, topic, type_url, \
     payload, event, source, prev_hash, hash FROM events ORDER BY row_id";

/// Opens the store read-only, refusing a missing file with a message of its own.
pub fn open(path: &Path) -> Result<Connection, VerifyError> {
    if !path.exists() {
        return Err(VerifyError::Missing {
            path: path.to_path_buf(),
        });
    }
    Ok(open_reader(path, BUSY_TIMEOUT)?)
}

/// Verifies the whole store at `path`; `anchors` are hashes recorded elsewhere for
/// given rows. Blocking.
pub fn verify(path: &Path, anchors: &[Anchor]) -> Result<Report, VerifyError> {
    let conn = open(path)?;
    let sqlite = |what| {
        move |source| VerifyError::Sqlite {
            path: path.to_path_buf(),
            what,
            source,
        }
    };
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
        elapsed: Duration::ZERO,
        problem: None,
    };
    match state::read(&tx).map_err(sqlite("reading audit_chain"))? {
        Ok(state) => {
            let mut anchors = anchors.to_vec();
            anchors.sort_by_key(|a| a.row_id);
            report.problem = Walk::new(&tx, &state, &anchors, &mut report)?
                .run()
                .map_err(sqlite("reading the events"))?;
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
pub struct Head {
    pub state: ChainState,
    pub row: Option<RowRef>,
    pub hash: Option<Hash>,
}

/// Reads the head without verifying anything. `Ok(Err(_))`: `audit_chain` is
/// damaged. Blocking.
pub fn head(path: &Path) -> Result<Result<Head, Problem>, VerifyError> {
    let conn = open(path)?;
    let sqlite = |what| {
        move |source| VerifyError::Sqlite {
            path: path.to_path_buf(),
            what,
            source,
        }
    };
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
        state,
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
    let mut values = [ValueRef::Null; 10];
    for (i, value) in values.iter_mut().enumerate() {
        *value = row.get_ref(i + 1)?;
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

struct Walk<'a> {
    conn: &'a Connection,
    state: &'a ChainState,
    anchors: &'a [Anchor],
    report: &'a mut Report,
    /// The last row (or the chain's start) that everything so far links up to.
    last: Link,
    hasher: chain::RowHasher,
}

impl<'a> Walk<'a> {
    fn new(
        conn: &'a Connection,
        state: &'a ChainState,
        anchors: &'a [Anchor],
        report: &'a mut Report,
    ) -> Result<Self, VerifyError> {
        let last = if state.pruned_row_id >= state.first_row_id {
            Link {
                row_id: state.pruned_row_id,
                seq: state.pruned_seq,
                prev: None,
                hash: state.pruned_hash.unwrap_or(chain::ZERO),
                origin: Origin::Checkpoint,
            }
        } else {
            Link {
                row_id: state.first_row_id - 1,
                seq: None,
                prev: None,
                hash: chain::ZERO,
                origin: Origin::Start,
            }
        };
        for anchor in anchors {
            let why = if anchor.row_id < state.first_row_id {
                format!(
                    "row_id {} was stored before the chain began (at row_id {})",
                    anchor.row_id, state.first_row_id
                )
            } else if anchor.row_id < state.pruned_row_id {
                format!(
                    "row_id {} was deleted by retention (the checkpoint is row_id {}); record a newer head",
                    anchor.row_id, state.pruned_row_id
                )
            } else {
                continue;
            };
            return Err(VerifyError::Anchor {
                anchor: *anchor,
                why,
            });
        }
        Ok(Walk {
            conn,
            state,
            anchors,
            report,
            last,
            hasher: chain::RowHasher::default(),
        })
    }

    fn run(mut self) -> rusqlite::Result<Option<Problem>> {
        let (start, start_hash) = (self.last.row_id, self.last.hash);
        if let Some(problem) = self.anchor(start, &start_hash, None) {
            return Ok(Some(problem));
        }
        let state = self.state;
        let mut stmt = self.conn.prepare(ROWS)?;
        let mut rows = stmt.query([])?;
        while let Some(row) = rows.next()? {
            let row_id: i64 = row.get(0)?;
            let values = values(row)?;
            let problem = |kind, what: String| {
                Ok(Some(Problem {
                    kind,
                    row: Some(here(row_id, &values)),
                    what,
                }))
            };
            if row_id <= state.pruned_row_id {
                return problem(
                    Kind::Inserted,
                    format!(
                        "retention deleted every row up to row_id {} (audit_chain.pruned_row_id); this one was added afterwards",
                        state.pruned_row_id
                    ),
                );
            }
            let (prev, hash) = (row.get_ref(11)?, row.get_ref(12)?);
            if row_id < state.first_row_id {
                if prev != ValueRef::Null || hash != ValueRef::Null {
                    return problem(
                        Kind::ChainTable,
                        format!(
                            "it carries a hash, but audit_chain.first_row_id ({}) says it predates the chain: the chain's start was moved",
                            state.first_row_id
                        ),
                    );
                }
                self.report.legacy += 1;
                continue;
            }
            let hash = match hash_value(hash) {
                Ok(Some(hash)) => hash,
                Ok(None) => {
                    return problem(
                        Kind::Inserted,
                        format!(
                            "it has no hash, but every row from row_id {} on is chained",
                            state.first_row_id
                        ),
                    );
                }
                Err(()) => {
                    return problem(
                        Kind::Modified,
                        format!("its hash column holds {}", state::describe(hash)),
                    );
                }
            };
            let Ok(Some(prev)) = hash_value(prev) else {
                return problem(
                    Kind::Modified,
                    format!("its prev_hash column holds {}", state::describe(prev)),
                );
            };
            let recomputed = self.hasher.hash(&prev, &values);
            let own_ok = recomputed == hash;
            let link_ok = prev == self.last.hash;
            if own_ok && link_ok {
                let expected = self.last.row_id + 1;
                if row_id != expected {
                    return problem(
                        Kind::Modified,
                        format!("its row_id was changed: the chain puts it at row_id {expected}"),
                    );
                }
                if row_id > state.head_row_id {
                    return problem(
                        Kind::Inserted,
                        format!(
                            "it is chained after the head audit_chain records (row_id {}): appended outside eventgate, or the recorded head was moved back",
                            state.head_row_id
                        ),
                    );
                }
                let at = here(row_id, &values);
                if let Some(problem) = self.anchor(row_id, &hash, Some(at)) {
                    return Ok(Some(problem));
                }
                self.report.verified += 1;
                self.last = Link {
                    row_id,
                    seq: values[0].as_i64().ok(),
                    prev: Some(prev),
                    hash,
                    origin: Origin::Row,
                };
                continue;
            }
            let broken = Broken {
                at: here(row_id, &values),
                prev,
                hash,
                recomputed,
            };
            let next = rows.next()?.map(Next::read).transpose()?;
            return classify::classify(self.conn, state, &self.last, broken, next).map(Some);
        }
        drop(rows);
        self.end()
    }

    /// Compares a row's hash with the anchor recorded for it, if any.
    fn anchor(&mut self, row_id: i64, hash: &Hash, at: Option<RowRef>) -> Option<Problem> {
        let anchor = self.anchors.iter().find(|a| a.row_id == row_id)?;
        if anchor.hash == *hash {
            self.report.anchors.push(*anchor);
            return None;
        }
        Some(Problem {
            kind: Kind::Rewritten,
            row: at.or_else(|| Some(checkpoint_ref(self.state))),
            what: format!(
                "its hash is {}, but {} was recorded for it: the chain up to here was recomputed after that record",
                chain::hex(hash),
                chain::hex(&anchor.hash)
            ),
        })
    }

    /// After the last row: the chain must end where audit_chain says it does.
    fn end(self) -> rusqlite::Result<Option<Problem>> {
        let state = self.state;
        let last = &self.last;
        let last_ref = match last.origin {
            Origin::Row => row_ref(self.conn, last.row_id)?,
            Origin::Checkpoint => Some(checkpoint_ref(state)),
            Origin::Start => None,
        };
        if last.row_id < state.head_row_id {
            let what = format!(
                "the chain ends here, but audit_chain records its head at row_id {} (seq {}): the rows after it were deleted",
                state.head_row_id,
                state.head_seq.map_or("?".into(), |s| s.to_string())
            );
            return Ok(Some(Problem {
                kind: Kind::Deleted,
                row: last_ref,
                what,
            }));
        }
        let expected = match last.origin {
            Origin::Start => None,
            _ => Some(last.hash),
        };
        let seq_ok = last.origin == Origin::Start || state.head_seq == last.seq;
        if state.head_hash != expected || !seq_ok {
            let show = |h: Option<Hash>| h.map_or("NULL".into(), |h| chain::hex(&h));
            let seq = |s: Option<i64>| s.map_or("NULL".into(), |s| s.to_string());
            return Ok(Some(Problem {
                kind: Kind::ChainTable,
                row: last_ref,
                what: format!(
                    "audit_chain records the head as hash {} seq {}, but this head row has hash {} seq {}",
                    show(state.head_hash),
                    seq(state.head_seq),
                    show(expected),
                    seq(last.seq)
                ),
            }));
        }
        if let Some(anchor) = self.anchors.iter().find(|a| a.row_id > last.row_id) {
            return Ok(Some(Problem {
                kind: Kind::Rewritten,
                row: last_ref,
                what: format!(
                    "the chain ends here, but a hash was recorded for row_id {} (anchor {anchor}): rows were deleted and the recorded head moved back",
                    anchor.row_id
                ),
            }));
        }
        self.report.head = last_ref;
        Ok(None)
    }
}

#[cfg(test)]
mod tests;
