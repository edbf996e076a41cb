//! A checkpoint of the audit store's hash chain head: the text a signed note carries.
//!
//! ```text
//! eventgate audit checkpoint v1
//! node web-1
//! store 5f0c1b8e2d6a4c3f9e7b1a2d3c4e5f60
//! row 183467
//! seq 190021
//! hash 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
//! pruned 0
//! time 2026-11-27T03:00:00.123456789Z
//! prev 3a7bd3e2360a3d29eea436fcfb7e44c735d117c42d1c1835420b6b9942dd4f1b
//! ```
//!
//! One `key value` per line, in this order, every line present: the note format
//! forbids empty lines in the text, so an absent value is `-` (`seq` and `hash`
//! before anything was chained, `prev` for a store's first checkpoint). `hash` is the
//! chain's hash of row `row`; `prev` is the SHA-256 of the previous checkpoint's whole
//! signed note, so checkpoints form a chain of their own and one left out of what
//! was shipped shows.

use std::time::SystemTime;

use rusqlite::{Connection, OptionalExtension};
use sha2::{Digest, Sha256};
use thiserror::Error;

use super::chain::{HASH_LEN, Hash, hex, parse_hex};

/// The first line of every checkpoint's text: what it is, and its version.
pub(crate) const HEADER: &str = "eventgate audit checkpoint v1";

/// The topic checkpoints are published on, in namespace `eventgate`.
pub(crate) const TOPIC: &str = "/eventgate/audit/checkpoint";
pub(crate) const TYPE: &str = "eventgate.events.v1.AuditCheckpoint";

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Checkpoint {
    pub node: String,
    pub store: String,
    /// The last chained row (0 before any).
    pub row_id: i64,
    pub seq: Option<i64>,
    pub hash: Option<Hash>,
    pub pruned_rows: i64,
    pub time: SystemTime,
    /// SHA-256 of the previous checkpoint's whole signed note.
    pub prev: Option<Hash>,
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum CheckpointError {
    #[error("not an eventgate checkpoint: the text does not start with {HEADER:?}")]
    NotACheckpoint,
    #[error("line {line} of the checkpoint should be `{key} ...`: {found:?}")]
    Line {
        line: usize,
        key: &'static str,
        found: String,
    },
    #[error("line {line} of the checkpoint: {problem}")]
    Value { line: usize, problem: String },
    #[error("the checkpoint has more than its {} lines", KEYS.len() + 1)]
    TooLong,
}

/// The keys after the header line, in order.
const KEYS: [&str; 8] = [
    "node", "store", "row", "seq", "hash", "pruned", "time", "prev",
];

impl Checkpoint {
    /// The note text (every line ends in a newline, as the note format wants).
    pub(crate) fn to_text(&self) -> String {
        let opt_int = |v: Option<i64>| v.map_or("-".to_owned(), |v| v.to_string());
        let opt_hash = |h: &Option<Hash>| h.as_ref().map_or("-".to_owned(), |h| hex(h));
        let time = chrono::DateTime::<chrono::Utc>::from(self.time)
            .to_rfc3339_opts(chrono::SecondsFormat::Nanos, true);
        format!(
            "{HEADER}\nnode {}\nstore {}\nrow {}\nseq {}\nhash {}\npruned {}\ntime {time}\nprev {}\n",
            self.node,
            self.store,
            self.row_id,
            opt_int(self.seq),
            opt_hash(&self.hash),
            self.pruned_rows,
            opt_hash(&self.prev),
        )
    }

    /// Reads a checkpoint's text back (a note's text, as `note::open` returns it).
    pub(crate) fn parse(text: &str) -> Result<Checkpoint, CheckpointError> {
        let mut lines = text.lines();
        if lines.next() != Some(HEADER) {
            return Err(CheckpointError::NotACheckpoint);
        }
        let mut values = [""; KEYS.len()];
        for (i, key) in KEYS.iter().enumerate() {
            let found = lines.next().unwrap_or_default();
            let line = i + 2;
            match found.split_once(' ') {
                Some((k, value)) if k == *key && !value.is_empty() => values[i] = value,
                _ => {
                    return Err(CheckpointError::Line {
                        line,
                        key,
                        found: found.chars().take(80).collect(),
                    });
                }
            }
        }
        if lines.next().is_some() {
            return Err(CheckpointError::TooLong);
        }
        let value = |i: usize, problem: String| CheckpointError::Value {
            line: i + 2,
            problem,
        };
        let int = |i: usize| {
            values[i]
                .parse::<i64>()
                .map_err(|e| value(i, format!("{} {:?}: {e}", KEYS[i], values[i])))
        };
        let opt_int = |i: usize| match values[i] {
            "-" => Ok(None),
            _ => int(i).map(Some),
        };
        let opt_hash = |i: usize| match values[i] {
            "-" => Ok(None),
            text => parse_hex(text)
                .map(Some)
                .map_err(|e| value(i, format!("{}: {e}", KEYS[i]))),
        };
        let time = chrono::DateTime::parse_from_rfc3339(values[6])
            .map_err(|e| value(6, format!("time {:?}: {e}", values[6])))?;
        Ok(Checkpoint {
            node: values[0].to_owned(),
            store: values[1].to_owned(),
            row_id: int(2)?,
            seq: opt_int(3)?,
            hash: opt_hash(4)?,
            pruned_rows: int(5)?,
            time: time.with_timezone(&chrono::Utc).into(),
            prev: opt_hash(7)?,
        })
    }
}

/// The SHA-256 of a whole signed note: what the next checkpoint's `prev` names.
pub(crate) fn note_hash(note: &str) -> Hash {
    let mut hash = [0u8; HASH_LEN];
    hash.copy_from_slice(&Sha256::digest(note.as_bytes()));
    hash
}

/// The store's id and its chain head as the writer left them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Head {
    pub store: String,
    pub row_id: i64,
    pub seq: Option<i64>,
    pub hash: Option<Hash>,
    pub pruned_rows: i64,
}

/// Reads the head in one statement, so it is one consistent snapshot of the table
/// the writer updates with every batch.
pub(crate) fn head(conn: &Connection) -> rusqlite::Result<Head> {
    conn.query_row(
        "SELECT s.store_id, c.head_row_id, c.head_seq, c.head_hash, c.pruned_rows \
         FROM audit_chain c, audit_store s WHERE c.id = 1 AND s.id = 1",
        [],
        |row| {
            let hash: Option<Vec<u8>> = row.get(3)?;
            Ok(Head {
                store: row.get(0)?,
                row_id: row.get(1)?,
                seq: row.get(2)?,
                hash: hash.and_then(|h| Hash::try_from(h.as_slice()).ok()),
                pruned_rows: row.get(4)?,
            })
        },
    )
}

/// The newest checkpoint note of `store` kept in the store itself (checkpoints are
/// stored as the events they are published as).
pub(crate) fn newest_note(conn: &Connection, store: &str) -> rusqlite::Result<Option<String>> {
    conn.query_row(
        "SELECT json_extract(event, '$.note') FROM events \
         WHERE topic = ?1 AND namespace = 'eventgate' AND json_extract(event, '$.store') = ?2 \
         ORDER BY row_id DESC LIMIT 1",
        rusqlite::params![TOPIC, store],
        |row| row.get::<_, Option<String>>(0),
    )
    .optional()
    .map(Option::flatten)
}

#[cfg(test)]
#[path = "checkpoint_tests.rs"]
mod tests;
