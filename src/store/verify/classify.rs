//! Telling modified, deleted, inserted and reordered rows apart at the first broken
//! link, from the row before it, the row itself and the row after it.
//!
//! A row's own hash says whether its content still matches (`prev_hash` is stored
//! with it); its link says whether it follows the row before. The row after tells
//! whether the chain goes on through this row (it links to it), around it (it links
//! to the row before: this row is not part of the chain) or from somewhere else.

use rusqlite::{Connection, Row};

use super::problem::{Kind, Problem, RowRef};
use super::state::{ChainState, hash_value};
use super::{row_ref, short};
use crate::store::chain::{self, Hash};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Origin {
    /// A stored row.
    Row,
    /// The chain's start: 32 zero bytes.
    Start,
    /// The retention checkpoint: the last pruned row.
    Checkpoint,
}

/// The row (or start) the chain has been verified up to.
pub(super) struct Link {
    pub row_id: i64,
    pub seq: Option<i64>,
    /// What it links to; `None` for the start and the checkpoint.
    pub prev: Option<Hash>,
    pub hash: Hash,
    pub origin: Origin,
}

/// The first row whose hash or link is wrong.
pub(super) struct Broken {
    pub at: RowRef,
    pub prev: Hash,
    pub hash: Hash,
    pub recomputed: Hash,
}

/// The row after it: only its links matter.
pub(super) struct Next {
    pub row_id: i64,
    pub prev: Option<Hash>,
    pub hash: Option<Hash>,
}

impl Next {
    pub(super) fn read(row: &Row<'_>) -> rusqlite::Result<Next> {
        Ok(Next {
            row_id: row.get(0)?,
            prev: hash_value(row.get_ref(super::PREV_HASH)?).ok().flatten(),
            hash: hash_value(row.get_ref(super::HASH)?).ok().flatten(),
        })
    }
}

pub(super) fn classify(
    conn: &Connection,
    state: &ChainState,
    last: &Link,
    row: Broken,
    next: Option<Next>,
) -> rusqlite::Result<Problem> {
    let found = |kind, what: String| {
        Ok(Problem {
            kind,
            row: Some(row.at.clone()),
            what,
        })
    };
    let next_links_to = |hash: &Hash| next.as_ref().is_some_and(|n| n.prev == Some(*hash));
    let next_id = next.as_ref().map_or(0, |n| n.row_id);
    if row.at.row_id > state.head_row_id {
        return found(
            Kind::Inserted,
            format!(
                "it follows the head audit_chain records (row_id {}) and is not chained to it",
                state.head_row_id
            ),
        );
    }
    if row.recomputed != row.hash {
        if next_links_to(&last.hash) && !next_links_to(&row.hash) {
            return found(
                Kind::Inserted,
                format!(
                    "it is not part of the chain: its hash does not match its content, and the next row (row_id {next_id}) links to the row before it"
                ),
            );
        }
        let what = match row.prev == last.hash {
            true => "its content no longer matches its hash",
            false => "its content or its prev_hash no longer matches its hash",
        };
        return found(
            Kind::Modified,
            format!(
                "{what} (stored {}..., recomputed {}...)",
                short(&row.hash),
                short(&row.recomputed)
            ),
        );
    }
    // Intact, but not linked to the row before it.
    if next_links_to(&last.hash) {
        if next.as_ref().and_then(|n| n.hash) == Some(row.prev) {
            return found(
                Kind::Reordered,
                format!(
                    "it and the next row (row_id {next_id}) are in each other's places: it links to row_id {next_id}, which links to the row before it"
                ),
            );
        }
        return found(
            Kind::Inserted,
            format!(
                "it is not part of the chain: its hash matches its content, but it links to {}, and the next row (row_id {next_id}) links to the row before it",
                describe_link(&row.prev, last)
            ),
        );
    }
    if last.prev == Some(row.prev) {
        // Two rows claim the same predecessor and the chain goes on from the second:
        // the first is the one added.
        let inserted = row_ref(conn, last.row_id)?.unwrap_or(RowRef {
            row_id: last.row_id,
            seq: last.seq,
            time: None,
        });
        return Ok(Problem {
            kind: Kind::Inserted,
            row: Some(inserted),
            what: format!(
                "it is not part of the chain: it and the row after it, {}, both link to the same row, and the chain goes on from that one",
                row.at
            ),
        });
    }
    // row_ids are consecutive in the chain, so the gap says how many rows went.
    let gap = match row.at.row_id - last.row_id - 1 {
        1 => format!(" (row_id {}: 1 row)", last.row_id + 1),
        n if n > 1 => format!(
            " (row_id {} to {}: {n} rows)",
            last.row_id + 1,
            row.at.row_id - 1
        ),
        _ => String::new(),
    };
    let what = match last.origin {
        Origin::Start => format!(
            "the first chained row does not link to the chain's start (32 zero bytes): rows before it were deleted{gap}"
        ),
        Origin::Checkpoint => format!(
            "the first row after the retention checkpoint (row_id {}, seq {}) does not link to its hash {}: rows before it were deleted{gap} (or the checkpoint was changed)",
            state.pruned_row_id,
            state.pruned_seq.map_or("?".into(), |s| s.to_string()),
            state.pruned_hash.map_or("NULL".into(), |h| chain::hex(&h)),
        ),
        Origin::Row => {
            let before = row_ref(conn, last.row_id)?.unwrap_or(RowRef {
                row_id: last.row_id,
                seq: last.seq,
                time: None,
            });
            format!(
                "rows are missing between {before} and this row{gap}: its prev_hash is not the hash of row_id {}",
                last.row_id
            )
        }
    };
    found(Kind::Deleted, what)
}

fn describe_link(prev: &Hash, last: &Link) -> String {
    if last.prev == Some(*prev) {
        format!("the row before row_id {}", last.row_id)
    } else {
        format!(
            "{}... instead of row_id {}'s hash",
            short(prev),
            last.row_id
        )
    }
}
