//! The Merkle tree against the rows and the signed tree heads: every leaf and every
//! stored hash from the first remaining row on is recomputed from the rows, and each
//! version 2 checkpoint's root must be the root of the store's tree at its size. The
//! stored hashes below the first remaining row (what retention left of deleted rows)
//! cannot be recomputed; they count only through the signed roots they must
//! reproduce.
//!
//! Streaming: one chunk of stored hashes and one row at a time, plus the tree's right
//! edge (at most 64 hashes).

use rusqlite::{Connection, OptionalExtension, params};

use super::signed::Signed;
use super::{ChainState, Kind, Problem, row_ref, values_at};
use crate::store::chain::{COLUMNS, RowHasher};
use crate::store::tree::{self, CHUNK, SqlHashes, TreeState};
use crate::tlog::stored::{Frontier, stored_hash_count, tree_hash};
use crate::tlog::tree_head::encode_hash;
use crate::tlog::{Hash, TlogError};

/// What the tree pass found: the first problem, and what it checked.
#[derive(Debug, Default)]
pub(crate) struct TreeReport {
    /// Leaves recomputed from rows.
    pub leaves: u64,
    /// Checkpoints whose root was found.
    pub roots: usize,
    pub state: Option<TreeState>,
}

/// Reads stored hashes in increasing index order, one chunk in memory.
struct Sequential<'c> {
    conn: &'c Connection,
    chunk: Option<(u64, Vec<u8>)>,
}

impl Sequential<'_> {
    fn get(&mut self, index: u64) -> rusqlite::Result<Option<Hash>> {
        let chunk = index / CHUNK;
        if self.chunk.as_ref().is_none_or(|(c, _)| *c != chunk) {
            // Anything but a blob (edited into text) holds no hash.
            let bytes: Option<Vec<u8>> = self
                .conn
                .prepare_cached("SELECT hashes FROM audit_tree_hashes WHERE chunk = ?1")?
                .query_row(params![i64::try_from(chunk).unwrap_or(i64::MAX)], |r| {
                    Ok(r.get_ref(0)?.as_blob().ok().map(<[u8]>::to_vec))
                })
                .optional()?
                .flatten();
            self.chunk = Some((chunk, bytes.unwrap_or_default()));
        }
        let at = usize::try_from((index % CHUNK) * 32).unwrap_or(usize::MAX);
        Ok(self
            .chunk
            .as_ref()
            .and_then(|(_, b)| b.get(at..at + 32))
            .and_then(|b| Hash::try_from(b).ok()))
    }
}

fn tree_problem(what: String) -> Problem {
    Problem {
        kind: Kind::TreeTable,
        row: None,
        what,
    }
}

/// Checks the tree against the rows and `checkpoints` (this store's, any version;
/// version 1 ones are skipped). `Ok(Err(problem))` is tampering found.
pub(crate) fn check(
    conn: &Connection,
    state: &ChainState,
    checkpoints: &[Signed],
    named: &dyn Fn(&Signed) -> String,
) -> rusqlite::Result<Result<TreeReport, Problem>> {
    let mut report = TreeReport::default();
    let Some(tree) = tree::state(conn)? else {
        return Ok(Err(tree_problem(
            "the audit_tree table has lost its row".into(),
        )));
    };
    report.state = Some(tree);
    if tree.last_row_id() != state.head_row_id {
        return Ok(Err(tree_problem(format!(
            "audit_tree says its {} leaves end at row_id {}, but the chain's head is row_id {}: the tree was edited",
            tree.size,
            tree.last_row_id(),
            state.head_row_id
        ))));
    }
    // Heads of this tree by size (oldest first), with the root each signed.
    let mut heads: Vec<(&Signed, u64, Hash)> = checkpoints
        .iter()
        .filter_map(|s| s.checkpoint.tree.as_ref().map(|t| (s, t.size, t.root)))
        .collect();
    heads.sort_by_key(|(s, size, _)| (*size, s.checkpoint.time, s.note_hash));
    if let Some((signed, size, _)) = heads.iter().find(|(s, _, _)| {
        s.checkpoint
            .tree
            .as_ref()
            .is_some_and(|t| t.first_row_id != tree.first_row_id)
    }) {
        let theirs = signed
            .checkpoint
            .tree
            .as_ref()
            .map_or(0, |t| t.first_row_id);
        return Ok(Err(tree_problem(format!(
            "{} puts the tree's first leaf at row_id {theirs} ({size} leaves), but audit_tree says row_id {}: the tree was edited",
            named(signed),
            tree.first_row_id
        ))));
    }
    // The first leaf whose row is still there.
    let first_row = (state.pruned_row_id + 1).max(tree.first_row_id);
    let first = u64::try_from(first_row - tree.first_row_id)
        .unwrap_or(0)
        .min(tree.size);
    let mismatch = |signed: &Signed, size: u64, ours: &Hash, theirs: &Hash, pruned: bool| Problem {
        kind: Kind::Rewritten,
        row: None,
        what: format!(
            "the store's tree of {size} leaves has root {}, but {} signed {}: {}",
            encode_hash(ours),
            named(signed),
            encode_hash(theirs),
            match pruned {
                true =>
                    "the hashes retention kept of the deleted rows no longer give the signed history (audit_tree_hashes edited, or rows deleted outside retention and the tree rebuilt)",
                false =>
                    "the history up to that size differs from the one signed: rows or audit_tree_hashes were changed after it was signed",
            }
        ),
    };
    // Heads within the deleted prefix: only the stored hashes can give their root.
    for (signed, size, root) in heads.iter().filter(|(_, size, _)| *size <= first) {
        match tree_hash(*size, &mut SqlHashes::new(conn)) {
            Ok(ours) if ours == *root => report.roots += 1,
            Ok(ours) => return Ok(Err(mismatch(signed, *size, &ours, root, true))),
            Err(e) => return Ok(Err(missing(e))),
        }
    }
    let mut frontier = match Frontier::read(first, &mut SqlHashes::new(conn)) {
        Ok(frontier) => frontier,
        Err(e) => return Ok(Err(missing(e))),
    };
    let mut pending = heads.iter().filter(|(_, size, _)| *size > first).peekable();
    let mut stored = Sequential { conn, chunk: None };
    let mut next_index = stored_hash_count(first);
    let mut produced = Vec::with_capacity(64);
    let mut hasher = RowHasher::default();
    let mut stmt = conn.prepare(&format!(
        "SELECT row_id, {} FROM events WHERE row_id >= ?1 ORDER BY row_id",
        COLUMNS.join(", ")
    ))?;
    let mut rows = stmt.query(params![first_row])?;
    while frontier.size() < tree.size {
        let Some(row) = rows.next()? else {
            break;
        };
        let row_id: i64 = row.get(0)?;
        let leaf_row = tree.first_row_id + i64::try_from(frontier.size()).unwrap_or(i64::MAX);
        if row_id != leaf_row {
            // The chain walk reports missing rows; here it is only where leaves stop.
            break;
        }
        let values = values_at(row, 1)?;
        produced.clear();
        frontier.append(hasher.leaf(&values), &mut produced);
        report.leaves += 1;
        for hash in &produced {
            if stored.get(next_index)? != Some(*hash) {
                let (level, n) = crate::tlog::stored::split_stored_hash_index(next_index);
                let what = match level {
                    0 => format!("the leaf of row_id {row_id} (stored hash {next_index})"),
                    _ => format!(
                        "the hash of leaves {} to {} (stored hash {next_index})",
                        n << level,
                        ((n + 1) << level) - 1
                    ),
                };
                return Ok(Err(Problem {
                    kind: Kind::TreeTable,
                    row: row_ref(conn, row_id)?,
                    what: format!(
                        "{what} is not the one the rows give: audit_tree_hashes was edited"
                    ),
                }));
            }
            next_index += 1;
        }
        while let Some((signed, size, root)) =
            pending.next_if(|(_, size, _)| *size == frontier.size())
        {
            let ours = frontier.root();
            if ours != *root {
                return Ok(Err(mismatch(signed, *size, &ours, root, false)));
            }
            report.roots += 1;
        }
    }
    Ok(Ok(report))
}

fn missing(error: TlogError) -> Problem {
    tree_problem(format!(
        "{error}: audit_tree_hashes lost hashes the tree needs"
    ))
}
