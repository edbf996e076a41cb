//! Proofs from an audit store: an event's inclusion in a signed tree head, and one
//! tree head's consistency with an older one ([`crate::tlog::proof_file`]), read
//! from the stored tree hashes without touching the rows but the one proven.

use rusqlite::{Connection, OptionalExtension, params};
use thiserror::Error;

use super::chain::RowHasher;
use super::checkpoint::Checkpoint;
use super::tree::{self, SqlHashes, TreeState};
use crate::tlog::TlogError;
use crate::tlog::proof::{prove_record, prove_tree};
use crate::tlog::proof_file::ProofFile;
use crate::tlog::tree_head::encode_hash;

/// Which event to prove.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Which {
    Row(i64),
    Seq(i64),
    Id(String),
}

#[derive(Debug, Error)]
pub enum ProveError {
    #[error("the checkpoint cannot be used: {0}")]
    Note(String),
    /// The store cannot be opened, or keeps no checkpoint to prove against.
    #[error("{0}")]
    Store(String),
    #[error(
        "the checkpoint is of store {theirs}, and this store is {ours}: prove with a checkpoint of this store"
    )]
    OtherStore { ours: String, theirs: String },
    #[error(
        "the checkpoint is a version 1 checkpoint, signed before the store kept a Merkle tree: nothing can be proven against it; use a newer one"
    )]
    NoTree,
    #[error("the store has no Merkle tree (open it once with `eventgate serve` to migrate it)")]
    StoreWithoutTree,
    #[error(
        "the checkpoint's tree has {size} leaves, but the store's tree only {ours}: the store lost rows the checkpoint covers, or it is another copy; run `eventgate audit verify`"
    )]
    Beyond { size: u64, ours: u64 },
    #[error(
        "the store's tree of {size} leaves has root {ours}, but the checkpoint signed {theirs}: the store no longer holds the history the checkpoint signed; run `eventgate audit verify`"
    )]
    Mismatch {
        size: u64,
        ours: String,
        theirs: String,
    },
    #[error("no event with {0}")]
    NotFound(String),
    #[error(
        "{count} rows have seq {seq} (row_id {rows}; seqs start again when a gateway's data is replaced): prove by --row or --id"
    )]
    Ambiguous {
        seq: i64,
        count: usize,
        rows: String,
    },
    #[error(
        "row_id {row_id} is not in the checkpoint's tree (rows {first} to {last}): it was stored after that checkpoint; use a newer one"
    )]
    After { row_id: i64, first: i64, last: i64 },
    #[error(
        "row_id {row_id} is before the tree's first row ({first}): it predates the tree (a row of a store whose oldest rows were deleted before the tree existed, or a row stored before the chain)"
    )]
    Before { row_id: i64, first: i64 },
    #[error(
        "row_id {row_id} was deleted by retention: its content is gone, so its inclusion cannot be shown"
    )]
    Pruned { row_id: i64 },
    #[error(
        "the checkpoint to prove from has {old} leaves, more than the {new} of the one to prove to: a consistency proof goes from the older checkpoint (--from) to the newer (--to)"
    )]
    Order { old: u64, new: u64 },
    // The cause is the source, printed after this by `main`.
    #[error("the store's tree hashes")]
    Tlog(#[from] TlogError),
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
}

/// The eventgate checkpoint a signed note carries (its signature is the checker's
/// business, not the prover's).
pub(crate) fn checkpoint_of(note: &str) -> Result<Checkpoint, ProveError> {
    let (text, _) = crate::note::split(note).map_err(|e| ProveError::Note(e.to_string()))?;
    Checkpoint::parse(text).map_err(|e| ProveError::Note(e.to_string()))
}

/// Checks that the store holds exactly the tree the checkpoint signed; returns its
/// size and the store's tree state.
fn matching(conn: &Connection, checkpoint: &Checkpoint) -> Result<(u64, TreeState), ProveError> {
    let facts = checkpoint.tree.as_ref().ok_or(ProveError::NoTree)?;
    let ours: String =
        conn.query_row("SELECT store_id FROM audit_store WHERE id = 1", [], |r| {
            r.get(0)
        })?;
    if ours != checkpoint.store {
        return Err(ProveError::OtherStore {
            ours,
            theirs: checkpoint.store.clone(),
        });
    }
    let state = tree::state(conn)?.ok_or(ProveError::StoreWithoutTree)?;
    if facts.size > state.size {
        return Err(ProveError::Beyond {
            size: facts.size,
            ours: state.size,
        });
    }
    let root = tree::root(conn, facts.size)?;
    if root != facts.root {
        return Err(ProveError::Mismatch {
            size: facts.size,
            ours: encode_hash(&root),
            theirs: encode_hash(&facts.root),
        });
    }
    Ok((facts.size, state))
}

/// The inclusion proof of one event in the tree head `note` signed.
pub(crate) fn inclusion(
    conn: &Connection,
    which: &Which,
    note: &str,
) -> Result<ProofFile, ProveError> {
    let checkpoint = checkpoint_of(note)?;
    let tx = conn.unchecked_transaction()?;
    let (size, state) = matching(&tx, &checkpoint)?;
    let row_id = row_of(&tx, which)?;
    let last = state.first_row_id + i64::try_from(size).unwrap_or(i64::MAX) - 1;
    if row_id < state.first_row_id {
        return Err(ProveError::Before {
            row_id,
            first: state.first_row_id,
        });
    }
    if row_id > last {
        return Err(ProveError::After {
            row_id,
            first: state.first_row_id,
            last,
        });
    }
    let index = u64::try_from(row_id - state.first_row_id).unwrap_or(0);
    let record = record(&tx, row_id)?.ok_or(ProveError::Pruned { row_id })?;
    let proof = prove_record(size, index, &mut SqlHashes::new(&tx))?;
    tx.finish()?;
    Ok(ProofFile::Inclusion {
        index,
        record,
        proof,
        note: note.to_owned(),
    })
}

/// The consistency proof from the tree head `old` signed to the one `new` signed.
pub(crate) fn consistency(
    conn: &Connection,
    old: &str,
    new: &str,
) -> Result<ProofFile, ProveError> {
    let (old_checkpoint, new_checkpoint) = (checkpoint_of(old)?, checkpoint_of(new)?);
    let tx = conn.unchecked_transaction()?;
    let (old_size, _) = matching(&tx, &old_checkpoint)?;
    let (new_size, _) = matching(&tx, &new_checkpoint)?;
    if old_size > new_size {
        return Err(ProveError::Order {
            old: old_size,
            new: new_size,
        });
    }
    let proof = match old_size {
        // Anything extends the empty tree.
        0 => Vec::new(),
        _ => prove_tree(new_size, old_size, &mut SqlHashes::new(&tx))?,
    };
    tx.finish()?;
    Ok(ProofFile::Consistency {
        proof,
        old: old.to_owned(),
        new: new.to_owned(),
    })
}

fn row_of(conn: &Connection, which: &Which) -> Result<i64, ProveError> {
    match which {
        Which::Row(row_id) => Ok(*row_id),
        Which::Id(id) => conn
            .query_row(
                "SELECT row_id FROM events WHERE id = ?1",
                params![id],
                |r| r.get(0),
            )
            .optional()?
            .ok_or_else(|| ProveError::NotFound(format!("id {id}"))),
        Which::Seq(seq) => {
            let rows: Vec<i64> = conn
                .prepare("SELECT row_id FROM events WHERE seq = ?1 ORDER BY row_id LIMIT 11")?
                .query_map(params![seq], |r| r.get(0))?
                .collect::<Result<_, _>>()?;
            match rows[..] {
                [] => Err(ProveError::NotFound(format!("seq {seq}"))),
                [row_id] => Ok(row_id),
                _ => Err(ProveError::Ambiguous {
                    seq: *seq,
                    count: rows.len(),
                    rows: rows
                        .iter()
                        .map(i64::to_string)
                        .collect::<Vec<_>>()
                        .join(", "),
                }),
            }
        }
    }
}

/// A row's record: the bytes its leaf hashes; `None` when the row is gone.
pub(crate) fn record(conn: &Connection, row_id: i64) -> rusqlite::Result<Option<Vec<u8>>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT row_id, {} FROM events WHERE row_id = ?1",
        super::chain::COLUMNS.join(", ")
    ))?;
    let mut rows = stmt.query(params![row_id])?;
    let Some(row) = rows.next()? else {
        return Ok(None);
    };
    let values = super::verify::values_at(row, 1)?;
    Ok(Some(RowHasher::default().record(&values)))
}
