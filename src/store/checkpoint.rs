//! A checkpoint of the audit store: the text a signed note carries.
//!
//! Since the store keeps a Merkle tree ([`super::tree`]), a checkpoint is a C2SP
//! tlog-checkpoint (version 2): origin `<node>/eventgate/<store>`, the tree's size and
//! root, then eventgate's own facts as extension lines, every one present, in order:
//!
//! ```text
//! web-1/eventgate/5f0c1b8e2d6a4c3f9e7b1a2d3c4e5f60
//! 183467
//! n9qbO7NRgk0G2b1n6U9dVVn6Hk0n0p4nVSoc8ih5w4M=
//! eventgate audit checkpoint v2
//! node web-1
//! store 5f0c1b8e2d6a4c3f9e7b1a2d3c4e5f60
//! forwarder audit
//! first-row 1
//! row 183467
//! seq 190021
//! hash 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
//! pruned 1200 1200 0c1d...
//! retention max_age=2592000s
//! time 2026-11-27T03:00:00.123456789Z
//! prev 3a7bd3e2360a3d29eea436fcfb7e44c735d117c42d1c1835420b6b9942dd4f1b
//! ```
//!
//! `first-row` is the row of leaf 0, so leaf `i` is row `first-row + i` and `row` is
//! `first-row + size - 1`; `row`, `seq` and `hash` are the hash chain's head as in
//! version 1, so a version 2 checkpoint anchors the chain exactly as a version 1 one
//! did; `pruned` is the rows retention deleted so far, the last of them (the
//! retention boundary) and its chain hash; `retention` the policy in force when it
//! was signed (`none`, or `max_age=<seconds>s` and/or `max_rows=<n>`), so a deletion
//! the policy does not allow shows.
//!
//! Version 1, signed before the tree existed, is still read:
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
use super::retention::Policy;
use crate::tlog::tree_head::TreeHead;

/// The first line of every version 1 checkpoint's text.
pub(crate) const HEADER: &str = "eventgate audit checkpoint v1";

/// The first extension line of a version 2 checkpoint.
pub(crate) const HEADER_V2: &str = "eventgate audit checkpoint v2";

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
    /// The tree head and retention facts of a version 2 checkpoint; `None` for
    /// version 1.
    pub tree: Option<TreeFacts>,
}

/// What a version 2 checkpoint adds to version 1's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TreeFacts {
    pub forwarder: String,
    pub size: u64,
    pub root: crate::tlog::Hash,
    /// The row of leaf 0.
    pub first_row_id: i64,
    /// The last row retention deleted (0: none) and its chain hash.
    pub pruned_row_id: i64,
    pub pruned_hash: Option<Hash>,
    /// The retention policy in force; `None`: every row is kept.
    pub retention: Option<Policy>,
}

/// The log's origin: node and store together, so a new store is a new log.
pub(crate) fn origin(node: &str, store: &str) -> String {
    format!("{node}/eventgate/{store}")
}

/// A policy as the `retention` line writes it.
pub(crate) fn policy_text(policy: Option<&Policy>) -> String {
    let Some(policy) = policy else {
        return "none".to_owned();
    };
    let mut parts = Vec::new();
    if let Some(age) = policy.max_age {
        parts.push(format!("max_age={}s", age.as_secs()));
    }
    if let Some(rows) = policy.max_rows {
        parts.push(format!("max_rows={rows}"));
    }
    parts.join(" ")
}

fn parse_policy(text: &str) -> Result<Option<Policy>, String> {
    if text == "none" {
        return Ok(None);
    }
    let mut policy = Policy {
        max_age: None,
        max_rows: None,
    };
    for part in text.split(' ') {
        match part.split_once('=') {
            Some(("max_age", v)) if policy.max_age.is_none() => {
                let secs = v
                    .strip_suffix('s')
                    .and_then(|v| v.parse::<u64>().ok())
                    .ok_or_else(|| format!("max_age {v:?} is not <seconds>s"))?;
                policy.max_age = Some(std::time::Duration::from_secs(secs));
            }
            Some(("max_rows", v)) if policy.max_rows.is_none() => {
                policy.max_rows = Some(
                    v.parse::<u64>()
                        .map_err(|_| format!("max_rows {v:?} is not a number"))?,
                );
            }
            _ => {
                return Err(format!(
                    "{part:?} is not max_age=<seconds>s or max_rows=<n>"
                ));
            }
        }
    }
    match policy.max_age.is_none() && policy.max_rows.is_none() {
        true => Err("an empty retention policy".to_owned()),
        false => Ok(Some(policy)),
    }
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
    #[error("not a tree head: {0}")]
    TreeHead(String),
    #[error("the tree head's {what} disagrees with its extension lines: {problem}")]
    Inconsistent { what: &'static str, problem: String },
}

/// The keys after [`HEADER_V2`], in order.
const KEYS_V2: [&str; 11] = [
    "node",
    "store",
    "forwarder",
    "first-row",
    "row",
    "seq",
    "hash",
    "pruned",
    "retention",
    "time",
    "prev",
];

/// The keys after the header line, in order.
const KEYS: [&str; 8] = [
    "node", "store", "row", "seq", "hash", "pruned", "time", "prev",
];

impl Checkpoint {
    /// The note text (every line ends in a newline, as the note format wants):
    /// version 2 with tree facts, version 1 without.
    pub(crate) fn to_text(&self) -> String {
        match &self.tree {
            Some(tree) => self.to_text_v2(tree),
            None => self.to_text_v1(),
        }
    }

    fn to_text_v2(&self, tree: &TreeFacts) -> String {
        let opt_int = |v: Option<i64>| v.map_or("-".to_owned(), |v| v.to_string());
        let opt_hash = |h: &Option<Hash>| h.as_ref().map_or("-".to_owned(), |h| hex(h));
        let time = chrono::DateTime::<chrono::Utc>::from(self.time)
            .to_rfc3339_opts(chrono::SecondsFormat::Nanos, true);
        let values = [
            self.node.clone(),
            self.store.clone(),
            tree.forwarder.clone(),
            tree.first_row_id.to_string(),
            self.row_id.to_string(),
            opt_int(self.seq),
            opt_hash(&self.hash),
            format!(
                "{} {} {}",
                self.pruned_rows,
                tree.pruned_row_id,
                opt_hash(&tree.pruned_hash)
            ),
            policy_text(tree.retention.as_ref()),
            time,
            opt_hash(&self.prev),
        ];
        let mut extensions = vec![HEADER_V2.to_owned()];
        extensions.extend(
            KEYS_V2
                .iter()
                .zip(values)
                .map(|(key, value)| format!("{key} {value}")),
        );
        TreeHead {
            origin: origin(&self.node, &self.store),
            size: tree.size,
            root: tree.root,
            extensions,
        }
        .to_text()
    }

    fn to_text_v1(&self) -> String {
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

    /// Reads a checkpoint's text back (a note's text, as `note::open` returns it),
    /// of either version.
    pub(crate) fn parse(text: &str) -> Result<Checkpoint, CheckpointError> {
        if text.starts_with(&format!("{HEADER}\n")) || text == HEADER {
            return Self::parse_v1(text);
        }
        Self::parse_v2(text)
    }

    fn parse_v2(text: &str) -> Result<Checkpoint, CheckpointError> {
        let head = TreeHead::parse(text).map_err(|e| match text.lines().nth(3) {
            Some(HEADER_V2) => CheckpointError::TreeHead(e),
            _ => CheckpointError::NotACheckpoint,
        })?;
        let mut lines = head.extensions.iter().map(String::as_str);
        if lines.next() != Some(HEADER_V2) {
            return Err(CheckpointError::NotACheckpoint);
        }
        let mut values = [""; KEYS_V2.len()];
        for (i, key) in KEYS_V2.iter().enumerate() {
            let found = lines.next().unwrap_or_default();
            match found.split_once(' ') {
                Some((k, value)) if k == *key && !value.is_empty() => values[i] = value,
                _ => {
                    return Err(CheckpointError::Line {
                        line: i + 5,
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
            line: i + 5,
            problem,
        };
        let int = |i: usize, v: &str| {
            v.parse::<i64>()
                .map_err(|e| value(i, format!("{} {v:?}: {e}", KEYS_V2[i])))
        };
        let opt_hash = |i: usize, v: &str| match v {
            "-" => Ok(None),
            text => parse_hex(text)
                .map(Some)
                .map_err(|e| value(i, format!("{}: {e}", KEYS_V2[i]))),
        };
        let first_row_id = int(3, values[3])?;
        let row_id = int(4, values[4])?;
        let seq = match values[5] {
            "-" => None,
            v => Some(int(5, v)?),
        };
        let hash = opt_hash(6, values[6])?;
        let pruned: Vec<&str> = values[7].split(' ').collect();
        let [pruned_rows, pruned_row_id, pruned_hash] = pruned[..] else {
            return Err(value(
                7,
                format!("pruned {:?}: expected <rows> <row_id> <hash>", values[7]),
            ));
        };
        let retention = parse_policy(values[8]).map_err(|e| value(8, format!("retention: {e}")))?;
        let time = chrono::DateTime::parse_from_rfc3339(values[9])
            .map_err(|e| value(9, format!("time {:?}: {e}", values[9])))?;
        let checkpoint = Checkpoint {
            node: values[0].to_owned(),
            store: values[1].to_owned(),
            row_id,
            seq,
            hash,
            pruned_rows: int(7, pruned_rows)?,
            time: time.with_timezone(&chrono::Utc).into(),
            prev: opt_hash(10, values[10])?,
            tree: Some(TreeFacts {
                forwarder: values[2].to_owned(),
                size: head.size,
                root: head.root,
                first_row_id,
                pruned_row_id: int(7, pruned_row_id)?,
                pruned_hash: opt_hash(7, pruned_hash)?,
                retention,
            }),
        };
        let expected = origin(&checkpoint.node, &checkpoint.store);
        if head.origin != expected {
            return Err(CheckpointError::Inconsistent {
                what: "origin",
                problem: format!("{:?}, but node and store make {expected:?}", head.origin),
            });
        }
        let last = i64::try_from(head.size)
            .ok()
            .and_then(|size| first_row_id.checked_add(size))
            .map(|end| end - 1);
        if last != Some(row_id) {
            return Err(CheckpointError::Inconsistent {
                what: "size",
                problem: format!(
                    "{} leaves from first-row {first_row_id} end at another row than row {row_id}",
                    head.size
                ),
            });
        }
        Ok(checkpoint)
    }

    fn parse_v1(text: &str) -> Result<Checkpoint, CheckpointError> {
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
            tree: None,
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
    pub pruned_row_id: i64,
    pub pruned_hash: Option<Hash>,
    /// The tree's first row, size and root; `None` for a store of an older schema.
    pub tree: Option<(i64, u64, crate::tlog::Hash)>,
}

/// Reads the head in one read transaction, so the chain and the tree are one
/// consistent snapshot of what the writer commits with every batch.
pub(crate) fn head(conn: &Connection) -> rusqlite::Result<Head> {
    let tx = conn.unchecked_transaction()?;
    let mut head = tx.query_row(
        "SELECT s.store_id, c.head_row_id, c.head_seq, c.head_hash, c.pruned_rows, \
         c.pruned_row_id, c.pruned_hash \
         FROM audit_chain c, audit_store s WHERE c.id = 1 AND s.id = 1",
        [],
        |row| {
            let hash = |i| -> rusqlite::Result<Option<Hash>> {
                let hash: Option<Vec<u8>> = row.get(i)?;
                Ok(hash.and_then(|h| Hash::try_from(h.as_slice()).ok()))
            };
            Ok(Head {
                store: row.get(0)?,
                row_id: row.get(1)?,
                seq: row.get(2)?,
                hash: hash(3)?,
                pruned_rows: row.get(4)?,
                pruned_row_id: row.get(5)?,
                pruned_hash: hash(6)?,
                tree: None,
            })
        },
    )?;
    let has_tree: bool = tx.query_row(
        "SELECT count(*) > 0 FROM sqlite_schema WHERE type = 'table' AND name = 'audit_tree'",
        [],
        |r| r.get(0),
    )?;
    if has_tree && let Some(state) = super::tree::state(&tx)? {
        // A tree behind its chain (edited by hand) is signed as it is: verify
        // reports the difference.
        let root = super::tree::root(&tx, state.size).map_err(|e| {
            rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CORRUPT),
                Some(format!("the audit store's Merkle tree: {e}")),
            )
        })?;
        head.tree = Some((state.first_row_id, state.size, root));
    }
    tx.finish()?;
    Ok(head)
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
