//! The audit store's Merkle tree ([`crate::tlog`]) over its chained rows, kept in
//! `audit_tree` and `audit_tree_hashes` (migrations/0014_tree.sql) and written in the
//! same transaction as the rows, so a committed row always has its leaf.
//!
//! A batch reads the tree's right edge once (at most 64 stored hashes), appends its
//! leaves in memory and writes the new stored hashes as whole chunks: O(1) amortised
//! hashes and one or two chunk writes per batch, nothing recomputed at start.

use std::collections::HashMap;

use rusqlite::{Connection, OptionalExtension, params};

use crate::tlog::stored::{Frontier, HashReader, stored_hash_count};
use crate::tlog::{Hash, TlogError};

/// Stored hashes per row of `audit_tree_hashes` (see the migration for why 126).
pub(crate) const CHUNK: u64 = 126;

/// Where the tree stands: leaf `i` is row `first_row_id + i`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TreeState {
    pub first_row_id: i64,
    pub size: u64,
}

impl TreeState {
    /// The row of the last leaf (`first_row_id - 1` for an empty tree).
    pub(crate) fn last_row_id(&self) -> i64 {
        self.first_row_id + i64::try_from(self.size).unwrap_or(i64::MAX) - 1
    }
}

/// Reads the tree's state; `None` for a store without a tree (an older schema).
pub(crate) fn state(conn: &Connection) -> rusqlite::Result<Option<TreeState>> {
    conn.prepare_cached("SELECT first_row_id, size FROM audit_tree WHERE id = 1")?
        .query_row([], |row| {
            Ok(TreeState {
                first_row_id: row.get(0)?,
                size: u64::try_from(row.get::<_, i64>(1)?).unwrap_or(0),
            })
        })
        .optional()
}

/// Stored hashes read from a connection, a chunk at a time, each chunk read once.
pub(crate) struct SqlHashes<'c> {
    conn: &'c Connection,
    chunks: HashMap<u64, Vec<u8>>,
}

impl<'c> SqlHashes<'c> {
    pub(crate) fn new(conn: &'c Connection) -> Self {
        SqlHashes {
            conn,
            chunks: HashMap::new(),
        }
    }

    fn chunk(&mut self, chunk: u64) -> Result<&Vec<u8>, TlogError> {
        if !self.chunks.contains_key(&chunk) {
            // Anything but a blob (edited into text) holds no hash.
            let blob: Option<Vec<u8>> = self
                .conn
                .prepare_cached("SELECT hashes FROM audit_tree_hashes WHERE chunk = ?1")
                .and_then(|mut stmt| {
                    stmt.query_row(params![i64::try_from(chunk).unwrap_or(i64::MAX)], |r| {
                        Ok(r.get_ref(0)?.as_blob().ok().map(<[u8]>::to_vec))
                    })
                    .optional()
                })
                .map_err(|e| TlogError::Read(e.to_string()))?
                .flatten();
            self.chunks.insert(chunk, blob.unwrap_or_default());
        }
        Ok(&self.chunks[&chunk])
    }
}

impl HashReader for SqlHashes<'_> {
    fn read_hashes(&mut self, indexes: &[u64]) -> Result<Vec<Hash>, TlogError> {
        indexes
            .iter()
            .map(|&index| {
                let at = usize::try_from((index % CHUNK) * 32).unwrap_or(usize::MAX);
                let bytes = self.chunk(index / CHUNK)?;
                bytes
                    .get(at..at + 32)
                    .and_then(|b| Hash::try_from(b).ok())
                    .ok_or(TlogError::Missing { index })
            })
            .collect()
    }
}

/// Appends leaves to the tree inside the caller's transaction.
pub(crate) struct Appender {
    state: TreeState,
    frontier: Frontier,
    /// New stored hashes, from stored index `first_new` on.
    first_new: u64,
    new: Vec<Hash>,
}

impl Appender {
    /// Reads the tree's edge. The tree must cover every chained row up to
    /// `head_row_id`: a store whose tree is behind was edited outside eventgate (the
    /// writer fills it in at open).
    pub(crate) fn start(conn: &Connection, head_row_id: i64) -> Result<Appender, TreeError> {
        let state = state(conn)
            .map_err(TreeError::Sqlite)?
            .ok_or(TreeError::Damaged("the audit_tree table has lost its row"))?;
        if state.last_row_id() != head_row_id {
            return Err(TreeError::Behind {
                last: state.last_row_id(),
                head: head_row_id,
            });
        }
        let frontier = Frontier::read(state.size, &mut SqlHashes::new(conn))?;
        Ok(Appender {
            state,
            frontier,
            first_new: stored_hash_count(state.size),
            new: Vec::new(),
        })
    }

    pub(crate) fn push(&mut self, leaf: Hash) {
        self.frontier.append(leaf, &mut self.new);
    }

    /// Writes the new stored hashes and the new size.
    pub(crate) fn finish(self, conn: &Connection) -> Result<TreeState, TreeError> {
        if self.new.is_empty() {
            return Ok(self.state);
        }
        let mut index = self.first_new;
        let mut pending = self.new.as_slice();
        while !pending.is_empty() {
            let chunk = index / CHUNK;
            let offset = index % CHUNK;
            let mut bytes: Vec<u8> = match offset {
                0 => Vec::with_capacity(CHUNK as usize * 32),
                _ => conn
                    .prepare_cached("SELECT hashes FROM audit_tree_hashes WHERE chunk = ?1")
                    .and_then(|mut s| {
                        s.query_row(params![chunk as i64], |r| {
                            Ok(r.get_ref(0)?.as_blob().ok().map(<[u8]>::to_vec))
                        })
                    })
                    .optional()
                    .map_err(TreeError::Sqlite)?
                    .flatten()
                    .unwrap_or_default(),
            };
            if bytes.len() as u64 != offset * 32 {
                return Err(TreeError::Damaged(
                    "audit_tree_hashes does not end where the tree's size says",
                ));
            }
            let take = usize::try_from((CHUNK - offset).min(pending.len() as u64)).unwrap_or(0);
            for hash in &pending[..take] {
                bytes.extend_from_slice(hash);
            }
            conn.prepare_cached(
                "INSERT INTO audit_tree_hashes (chunk, hashes) VALUES (?1, ?2) \
                 ON CONFLICT(chunk) DO UPDATE SET hashes = excluded.hashes",
            )
            .and_then(|mut s| s.execute(params![chunk as i64, bytes]))
            .map_err(TreeError::Sqlite)?;
            pending = &pending[take..];
            index += take as u64;
        }
        let size = self.frontier.size();
        conn.prepare_cached("UPDATE audit_tree SET size = ?1 WHERE id = 1")
            .and_then(|mut s| s.execute(params![i64::try_from(size).unwrap_or(i64::MAX)]))
            .map_err(TreeError::Sqlite)?;
        Ok(TreeState {
            first_row_id: self.state.first_row_id,
            size,
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TreeError {
    #[error("{0}: the audit store was modified outside eventgate; run `eventgate audit verify`")]
    Damaged(&'static str),
    #[error(
        "the tree ends at row_id {last} but the chain at row_id {head}: the audit store was modified outside eventgate; run `eventgate audit verify`"
    )]
    Behind { last: i64, head: i64 },
    #[error("the tree's stored hashes: {0}")]
    Tlog(#[from] TlogError),
    #[error(transparent)]
    Sqlite(rusqlite::Error),
}

impl TreeError {
    /// As the insert path reports store problems: damage is SQLite corruption
    /// (retryable, events stay queued while someone looks).
    pub(crate) fn into_sqlite(self) -> rusqlite::Error {
        match self {
            TreeError::Sqlite(e) => e,
            other => rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CORRUPT),
                Some(other.to_string()),
            ),
        }
    }
}

/// The root of the tree of the first `size` leaves, from the stored hashes.
pub(crate) fn root(conn: &Connection, size: u64) -> Result<Hash, TlogError> {
    crate::tlog::stored::tree_hash(size, &mut SqlHashes::new(conn))
}

/// Rows filled in per transaction while catching up.
const CATCH_UP_BATCH: usize = 10_000;

/// Gives the tree a leaf for every chained row it lacks (the rows of a store made
/// before the tree existed), in transactions of [`CATCH_UP_BATCH`] rows, calling
/// `progress(done, total)` after each. Returns how many leaves were added.
pub(crate) fn catch_up(
    conn: &mut Connection,
    mut progress: impl FnMut(u64, u64),
) -> Result<u64, TreeError> {
    let Some(start) = state(conn).map_err(TreeError::Sqlite)? else {
        return Ok(0);
    };
    let head: i64 = conn
        .query_row(
            "SELECT head_row_id FROM audit_chain WHERE id = 1",
            [],
            |r| r.get(0),
        )
        .map_err(TreeError::Sqlite)?;
    let total = u64::try_from(head - start.last_row_id()).unwrap_or(0);
    let mut done = 0u64;
    let mut hasher = super::chain::RowHasher::default();
    while done < total {
        let tx = conn.transaction().map_err(TreeError::Sqlite)?;
        let mut appender = {
            let current = state(&tx)
                .map_err(TreeError::Sqlite)?
                .ok_or(TreeError::Damaged("the audit_tree table has lost its row"))?;
            let frontier = Frontier::read(current.size, &mut SqlHashes::new(&tx))?;
            Appender {
                state: current,
                frontier,
                first_new: stored_hash_count(current.size),
                new: Vec::new(),
            }
        };
        let from = appender.state.last_row_id() + 1;
        let mut added = 0usize;
        {
            let mut stmt = tx
                .prepare(&format!(
                    "SELECT row_id, {} FROM events WHERE row_id >= ?1 AND row_id <= ?2 ORDER BY row_id LIMIT ?3",
                    super::chain::COLUMNS.join(", ")
                ))
                .map_err(TreeError::Sqlite)?;
            let mut rows = stmt
                .query(params![from, head, CATCH_UP_BATCH as i64])
                .map_err(TreeError::Sqlite)?;
            let mut expected = from;
            while let Some(row) = rows.next().map_err(TreeError::Sqlite)? {
                let row_id: i64 = row.get(0).map_err(TreeError::Sqlite)?;
                if row_id != expected {
                    return Err(TreeError::Damaged(
                        "a chained row is missing, so the tree cannot be built: rows were deleted outside retention",
                    ));
                }
                let values = super::verify::values_at(row, 1).map_err(TreeError::Sqlite)?;
                appender.push(hasher.leaf(&values));
                expected += 1;
                added += 1;
            }
        }
        if added == 0 {
            return Err(TreeError::Damaged(
                "the chain's head is past its last row: rows were cut off its end",
            ));
        }
        appender.finish(&tx)?;
        tx.commit().map_err(TreeError::Sqlite)?;
        done += added as u64;
        progress(done, total);
    }
    Ok(done)
}

#[cfg(test)]
#[path = "tree_tests.rs"]
mod tests;
