//! The `audit_chain` row as found, read without trusting its types: a value of the
//! wrong kind is evidence of tampering, reported as such, not a read error.

use std::str::FromStr;

use rusqlite::types::ValueRef;
use rusqlite::{Connection, OptionalExtension};

use super::problem::{Kind, Problem};
use crate::store::chain::{self, Hash};

/// The chain's bounds and the retention checkpoint, as `audit_chain` records them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ChainState {
    pub first_row_id: i64,
    pub head_row_id: i64,
    pub head_seq: Option<i64>,
    pub head_hash: Option<Hash>,
    pub pruned_row_id: i64,
    pub pruned_seq: Option<i64>,
    pub pruned_timestamp: Option<String>,
    pub pruned_hash: Option<Hash>,
    pub pruned_rows: i64,
    pub pruned_at: Option<String>,
}

const SELECT: &str = "SELECT first_row_id, head_row_id, head_seq, head_hash, pruned_row_id, \
     pruned_seq, pruned_timestamp, pruned_hash, pruned_rows, pruned_at FROM audit_chain WHERE id = 1";

fn tampered(what: String) -> Problem {
    Problem {
        kind: Kind::ChainTable,
        row: None,
        what,
    }
}

/// `Ok(Err(problem))`: the table is missing, empty, or holds values eventgate never
/// writes.
pub(super) fn read(conn: &Connection) -> rusqlite::Result<Result<ChainState, Problem>> {
    let exists: bool = conn.query_row(
        "SELECT count(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = 'audit_chain'",
        [],
        |r| r.get(0),
    )?;
    if !exists {
        return Ok(Err(tampered("the audit_chain table is missing".into())));
    }
    let row = conn
        .query_row(SELECT, [], |r| {
            let mut values = Vec::with_capacity(10);
            for i in 0..10 {
                values.push(r.get::<_, rusqlite::types::Value>(i)?);
            }
            Ok(values)
        })
        .optional()?;
    let Some(values) = row else {
        return Ok(Err(tampered(
            "the audit_chain table has lost its row".into(),
        )));
    };
    Ok(parse(&values))
}

fn parse(values: &[rusqlite::types::Value]) -> Result<ChainState, Problem> {
    const NAMES: [&str; 10] = [
        "first_row_id",
        "head_row_id",
        "head_seq",
        "head_hash",
        "pruned_row_id",
        "pruned_seq",
        "pruned_timestamp",
        "pruned_hash",
        "pruned_rows",
        "pruned_at",
    ];
    let bad = |i: usize, wanted: &str| {
        tampered(format!(
            "audit_chain.{} holds {}, not {wanted}",
            NAMES[i],
            describe(ValueRef::from(&values[i]))
        ))
    };
    let int = |i: usize| match ValueRef::from(&values[i]) {
        ValueRef::Integer(v) => Ok(v),
        _ => Err(bad(i, "an integer")),
    };
    let opt_int = |i: usize| match ValueRef::from(&values[i]) {
        ValueRef::Null => Ok(None),
        ValueRef::Integer(v) => Ok(Some(v)),
        _ => Err(bad(i, "an integer or NULL")),
    };
    let opt_text = |i: usize| match ValueRef::from(&values[i]) {
        ValueRef::Null => Ok(None),
        ValueRef::Text(t) => Ok(Some(String::from_utf8_lossy(t).into_owned())),
        _ => Err(bad(i, "text or NULL")),
    };
    let opt_hash = |i: usize| match hash_value(ValueRef::from(&values[i])) {
        Ok(hash) => Ok(hash),
        Err(()) => Err(bad(i, "a 32-byte hash or NULL")),
    };
    let state = ChainState {
        first_row_id: int(0)?,
        head_row_id: int(1)?,
        head_seq: opt_int(2)?,
        head_hash: opt_hash(3)?,
        pruned_row_id: int(4)?,
        pruned_seq: opt_int(5)?,
        pruned_timestamp: opt_text(6)?,
        pruned_hash: opt_hash(7)?,
        pruned_rows: int(8)?,
        pruned_at: opt_text(9)?,
    };
    state.consistent()?;
    Ok(state)
}

impl ChainState {
    /// Relations the writer and retention always keep.
    fn consistent(&self) -> Result<(), Problem> {
        if self.first_row_id < 1 {
            return Err(tampered(format!(
                "audit_chain.first_row_id is {}; row_ids start at 1",
                self.first_row_id
            )));
        }
        if self.head_row_id < self.first_row_id - 1 {
            return Err(tampered(format!(
                "audit_chain.head_row_id {} is before the chain's first row_id {}",
                self.head_row_id, self.first_row_id
            )));
        }
        if self.pruned_row_id > self.head_row_id {
            return Err(tampered(format!(
                "audit_chain.pruned_row_id {} is past the head (row_id {})",
                self.pruned_row_id, self.head_row_id
            )));
        }
        if self.pruned_row_id >= self.first_row_id && self.pruned_hash.is_none() {
            return Err(tampered(format!(
                "audit_chain.pruned_hash is NULL, but the pruned rows (up to row_id {}) were chained (from row_id {})",
                self.pruned_row_id, self.first_row_id
            )));
        }
        let chained = self.head_row_id >= self.first_row_id;
        if chained != self.head_hash.is_some() {
            return Err(tampered(format!(
                "audit_chain.head_hash is {} but the head (row_id {}) is {} the chain's first row_id {}",
                if chained { "NULL" } else { "set" },
                self.head_row_id,
                if chained { "at or after" } else { "before" },
                self.first_row_id
            )));
        }
        Ok(())
    }
}

/// A stored hash column: NULL, or a BLOB of exactly 32 bytes; `Err` for anything
/// else (the writer never stores anything else).
pub(super) fn hash_value(value: ValueRef<'_>) -> Result<Option<Hash>, ()> {
    match value {
        ValueRef::Null => Ok(None),
        ValueRef::Blob(bytes) => Hash::try_from(bytes).map(Some).map_err(|_| ()),
        _ => Err(()),
    }
}

/// A stored value in a message, briefly.
pub(super) fn describe(value: ValueRef<'_>) -> String {
    match value {
        ValueRef::Null => "NULL".into(),
        ValueRef::Integer(i) => format!("the integer {i}"),
        ValueRef::Real(f) => format!("the real {f}"),
        ValueRef::Text(t) => format!("the text {:?}", String::from_utf8_lossy(t)),
        ValueRef::Blob(b) => format!("a {}-byte blob", b.len()),
    }
}

/// A hash recorded outside the store for one row: `ROW_ID:HASH`, as `eventgate
/// audit head` prints it. Verification then proves the chain up to that row is the
/// one that was recorded, which a chain recomputed after an edit cannot fake.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Anchor {
    pub row_id: i64,
    pub hash: Hash,
}

impl FromStr for Anchor {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let (row_id, hash) = text.split_once(':').ok_or_else(|| {
            format!("{text:?} is not ROW_ID:HASH (as `eventgate audit head` prints it)")
        })?;
        let row_id = row_id
            .trim()
            .parse::<i64>()
            .ok()
            .filter(|id| *id > 0)
            .ok_or_else(|| format!("{row_id:?} is not a row_id (a positive integer)"))?;
        Ok(Anchor {
            row_id,
            hash: chain::parse_hex(hash)?,
        })
    }
}

impl std::fmt::Display for Anchor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.row_id, chain::hex(&self.hash))
    }
}
