//! `audit verify --key --checkpoints`: the store checked against signed checkpoints
//! of its chain head that were shipped off the host.
//!
//! Whoever can write the store can recompute every hash after an edit; a checkpoint
//! signed by eventgate's key and kept elsewhere cannot be recomputed. Each one of
//! this store becomes an anchor (its row must still have its hash) for the same walk
//! as keyless verification, and the newest must not be past the chain's end. Around
//! that: notes that do not verify (forged), two signed histories of one row
//! (conflicting), a head or a count of pruned rows that went down between a
//! checkpoint and the one it names as its predecessor, and a count of pruned rows in
//! `audit_chain` below one already signed.
//!
//! Checkpoints whose row retention has since deleted are counted as pruned, not
//! checked (the one exactly at the retention checkpoint is compared with
//! `pruned_hash`). What is found does not depend on the order of the notes: each is
//! judged against the store and against the set of all the others.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

use rusqlite::types::ValueRef;
use rusqlite::{Connection, OptionalExtension};
use thiserror::Error;

use super::shipped::{self, MAX_NOTES, RejectedNote, Shipped, Signed};
use super::state::describe;
use super::{Anchor, ChainState, Kind, Plan, Problem, Report, VerifyError, row_ref, short};
use crate::store::chain::{Hash, hex};
use crate::store::checkpoint::{Checkpoint, TOPIC};

/// Why the given checkpoints could not be used: verification could not be done
/// (exit 2), which is not the same as tampering found.
#[derive(Debug, Error)]
pub enum CheckpointsError {
    /// Never quotes the key: a signer key given by mistake is the secret.
    #[error("--key number {number} cannot be used")]
    Key {
        number: usize,
        #[source]
        source: crate::note::NoteError,
    },
    /// Never quotes the key, as for `--key`.
    #[error("--witness-key number {number} cannot be used")]
    WitnessKey {
        number: usize,
        #[source]
        source: crate::note::NoteError,
    },
    #[error("cannot read the checkpoints from {input}")]
    Read {
        input: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{input} is larger than {} MiB; give the checkpoints alone (`grep -F {TOPIC} FILE | eventgate audit verify ... --checkpoints -`), or those of a shorter time",
        max_bytes >> 20
    )]
    TooLarge { input: String, max_bytes: u64 },
    #[error("{input} holds more than {MAX_NOTES} notes; give those of a shorter time")]
    TooManyNotes { input: String },
    #[error("the note at {at} cannot be used")]
    Unusable {
        at: String,
        #[source]
        source: RejectedNote,
    },
    #[error("{input} holds no signed note ({what})")]
    NoNotes { input: String, what: String },
    #[error(
        "none of the {notes} notes in {input} is signed by the given keys ({keys}); they are signed by {signers}"
    )]
    NoneSigned {
        input: String,
        notes: u64,
        keys: String,
        signers: String,
    },
    #[error(
        "none of the {count} checkpoints signed by the given keys is of this store (store {store}): they are of {others}. A checkpoint of another store says nothing of this one: was the store made anew, or its id in audit_store changed?"
    )]
    OtherStore {
        store: String,
        count: usize,
        others: String,
    },
}

/// What checking against the checkpoints found.
#[derive(Debug)]
pub(crate) struct Verified {
    /// The walk's report; its `problem` is the first problem of all.
    pub report: Report,
    /// Whether the rows were walked (not when the checkpoints alone showed tampering).
    pub walked: bool,
    pub shipped: Shipped,
    /// This store's id (`None` when the check stopped before reading it).
    pub store: Option<String>,
    /// Distinct checkpoints of this store.
    pub of_store: usize,
    /// Those whose row was found with their hash.
    pub checked: usize,
    /// Those whose row retention deleted since (not checked).
    pub pruned: usize,
    /// Those signed before any row was chained (nothing to check).
    pub unchecked: usize,
    /// This store's checkpoint with the highest row (the latest of those).
    pub newest: Option<Signed>,
    /// Checkpoints of other stores: store id, count and a node that signed them.
    pub other_stores: BTreeMap<String, (usize, String)>,
    pub links: Links,
    /// What the tree pass checked.
    pub tree: super::tree::TreeReport,
    /// What was found of witnesses and time.
    pub witnessed: super::witnessed::Witnessed,
    /// A problem of the archive itself (forged or malformed lines, notes of a
    /// replaced key), reported whatever else is found: the good checkpoints are still
    /// used.
    pub archive: Option<Problem>,
    /// Another store of this store's node and forwarder whose checkpoints came after
    /// this store's: the store was succeeded by it (id, first time it signed).
    pub succeeded_by: Option<(String, std::time::SystemTime)>,
}

/// How the checkpoints of this store link up through `prev`: information, not
/// tampering (a file rotated away holds a predecessor, and a checkpoint signed but
/// not taken by the exchange leaves a sibling).
#[derive(Debug, Default)]
pub(crate) struct Links {
    /// Checkpoints whose predecessor was given.
    pub linked: usize,
    /// A store's first checkpoints (no predecessor).
    pub first: usize,
    /// Checkpoints whose predecessor was not given, and the lowest of them.
    pub missing: usize,
    pub first_missing: Option<(i64, std::time::SystemTime)>,
    /// Notes named as the predecessor by more than one checkpoint.
    pub forks: usize,
}

/// Verifies the store at `path` against the checkpoints `shipped` holds and the
/// `anchors` given. Blocking. Read the checkpoints before calling: the store is read
/// after them, so none of them can be newer than what is walked.
pub(crate) fn verify_checkpoints(
    path: &Path,
    anchors: &[Anchor],
    shipped: Shipped,
    options: &super::witnessed::Options,
) -> Result<Verified, VerifyError> {
    // A forged or malformed note is tampering of the archive, reported whatever else
    // is found; the good checkpoints are still used.
    let archive = archive_problem(&shipped);
    if shipped.checkpoints.is_empty() && archive.is_none() {
        return Err(nothing_signed(&shipped).into());
    }
    let mut found = Found {
        archive,
        ..Found::default()
    };
    let found_cell = std::cell::RefCell::new(&mut found);
    let report = super::verify_then(
        path,
        |conn, state| {
            found_cell
                .borrow_mut()
                .plan(conn, state, anchors, &shipped, path)
        },
        |conn, state, report| {
            found_cell
                .borrow_mut()
                .after(conn, state, report, &shipped, options, path)
        },
    )?;
    Ok(found.finish(report, shipped))
}

/// The archive's own problem: the first forged note, else the first note of a key
/// that bears a given key's name, else the first malformed note.
pub(crate) fn archive_problem(shipped: &Shipped) -> Option<Problem> {
    if let Some(forged) = &shipped.forged {
        return Some(forged_problem(shipped, forged));
    }
    if let Some((line, signer)) = &shipped.impostor {
        return Some(Problem {
            kind: Kind::Forged,
            row: None,
            what: format!(
                "the note at {} is signed by {signer}, a key with a given key's name but another key id ({} such notes): the signing key was replaced, and what it signs proves nothing",
                shipped.at(*line),
                shipped.impostor_notes
            ),
        });
    }
    shipped.malformed.as_ref().map(|rejected| Problem {
        kind: Kind::Archive,
        row: None,
        what: format!(
            "the note at {} cannot be used: {} ({} such notes): the archive holds lines eventgate never ships there",
            shipped.at(rejected.line),
            crate::errors::chain(&rejected.reason),
            shipped.malformed_notes
        ),
    })
}

fn nothing_signed(shipped: &Shipped) -> CheckpointsError {
    if shipped.notes == 0 {
        let what = match shipped.format {
            shipped::Format::JsonLines => format!(
                "none of its {} JSON lines has the topic {TOPIC}",
                shipped.other_lines
            ),
            shipped::Format::Notes => "it is empty".to_owned(),
        };
        return CheckpointsError::NoNotes {
            input: shipped.input.clone(),
            what,
        };
    }
    let signers: Vec<String> = shipped
        .unknown
        .iter()
        .map(|(signer, notes)| format!("{signer} ({})", count(*notes, "note")))
        .collect();
    CheckpointsError::NoneSigned {
        input: shipped.input.clone(),
        notes: shipped.notes - shipped.duplicates,
        keys: shipped.keys.join(", "),
        signers: signers.join(", "),
    }
}

/// What the plan found, kept for the summary.
#[derive(Default)]
struct Found {
    store: Option<String>,
    walked: bool,
    /// This store's checkpoints, sorted by row_id, time, note hash.
    mine: Vec<Signed>,
    pruned: usize,
    unchecked: usize,
    other_stores: BTreeMap<String, (usize, String)>,
    links: Links,
    /// The checkpoint with the highest row past the chain's head, if any.
    beyond: Option<Signed>,
    tree: super::tree::TreeReport,
    witnessed: super::witnessed::Witnessed,
    archive: Option<Problem>,
    succeeded_by: Option<(String, std::time::SystemTime)>,
}

impl Found {
    fn plan(
        &mut self,
        conn: &Connection,
        state: &ChainState,
        anchors: &[Anchor],
        shipped: &Shipped,
        path: &Path,
    ) -> Result<Plan, VerifyError> {
        let sqlite = |what| super::sqlite_error(path, what);
        let stop = |problem: Problem| -> Result<Plan, VerifyError> {
            Ok(Plan {
                anchors: Vec::new(),
                problem: Some(problem),
            })
        };
        let store = match store_id(conn).map_err(sqlite("reading audit_store"))? {
            Ok(store) => store,
            Err(problem) => return stop(problem),
        };
        for signed in &shipped.checkpoints {
            let checkpoint = &signed.checkpoint;
            if checkpoint.store == store {
                self.mine.push(signed.clone());
            } else {
                let other = self
                    .other_stores
                    .entry(checkpoint.store.clone())
                    .or_insert((0, checkpoint.node.clone()));
                other.0 += 1;
            }
        }
        self.store = Some(store.clone());
        if let Some(problem) = replaced(conn, shipped, &store, &self.mine, &mut self.succeeded_by)
            .map_err(sqlite("reading the store's own checkpoints"))?
        {
            return stop(problem);
        }
        if self.mine.is_empty() && shipped.checkpoints.is_empty() {
            // Only the archive's problem: it is the verdict.
            if let Some(problem) = self.archive.clone() {
                return stop(problem);
            }
        }
        if self.mine.is_empty() {
            return Err(CheckpointsError::OtherStore {
                store,
                count: shipped.checkpoints.len(),
                others: others(&self.other_stores),
            }
            .into());
        }
        // One order for everything that follows, whatever the input's.
        self.mine.sort_by(|a, b| {
            let key = |s: &Signed| (s.checkpoint.row_id, s.checkpoint.time, s.note_hash);
            key(a).cmp(&key(b))
        });
        let named = |signed: &Signed| describe_checkpoint(shipped, signed);
        let row = |row_id| row_ref(conn, row_id).map_err(sqlite("reading a row"));

        // Two signed histories of one row.
        if let Some(pair) = self.mine.windows(2).find(|p| {
            p[0].checkpoint.row_id == p[1].checkpoint.row_id
                && p[0].checkpoint.hash != p[1].checkpoint.hash
        }) {
            let (a, b) = (&pair[0], &pair[1]);
            let show = |h: &Option<Hash>| h.map_or("none".to_owned(), |h| hex(&h));
            return stop(Problem {
                kind: Kind::Conflicting,
                row: row(a.checkpoint.row_id)?,
                what: format!(
                    "{} records its hash as {}, and {} as {}: the signing key signed two histories of this store (someone else used it, as anyone with root on the host can)",
                    named(a),
                    show(&a.checkpoint.hash),
                    named(b),
                    show(&b.checkpoint.hash)
                ),
            });
        }

        if let Some(problem) = self.link(shipped, &row)? {
            return stop(problem);
        }

        // Retention only ever adds to the count of rows it deleted.
        if let Some(signed) = self
            .mine
            .iter()
            .find(|s| s.checkpoint.pruned_rows > state.pruned_rows)
        {
            return stop(Problem {
                kind: Kind::ChainTable,
                row: None,
                what: format!(
                    "audit_chain.pruned_rows is {}, but {} already counted {} deleted by retention: the record of retention was rewritten",
                    state.pruned_rows,
                    named(signed),
                    count(signed.checkpoint.pruned_rows.unsigned_abs(), "row")
                ),
            });
        }

        let mut planned: Vec<Anchor> = anchors.to_vec();
        for signed in &self.mine {
            let checkpoint = &signed.checkpoint;
            let Some(hash) = checkpoint.hash else {
                // Signed before any row was chained: the head then was before the
                // chain's first row, which is fixed when the chain begins.
                if checkpoint.row_id >= state.first_row_id {
                    return stop(Problem {
                        kind: Kind::ChainTable,
                        row: row(checkpoint.row_id)?,
                        what: format!(
                            "{} has no hash: nothing was chained up to its row then, but audit_chain.first_row_id {} now says the chain begins at or before it: the chain's start was moved",
                            named(signed),
                            state.first_row_id
                        ),
                    });
                }
                self.unchecked += 1;
                continue;
            };
            if checkpoint.row_id > state.head_row_id {
                self.beyond = Some(signed.clone());
            } else if checkpoint.row_id >= state.first_row_id
                && checkpoint.row_id < state.pruned_row_id
            {
                self.pruned += 1;
            } else {
                // Including a row before the chain's first, which the walk reports
                // as the chain's start moved, and the retention checkpoint's row,
                // compared with pruned_hash.
                planned.push(Anchor {
                    row_id: checkpoint.row_id,
                    hash,
                });
            }
        }
        self.walked = true;
        Ok(Plan {
            anchors: planned,
            problem: None,
        })
    }

    /// The `prev` links: counted, and a head or pruned count that went down from a
    /// checkpoint's predecessor to it reported.
    fn link(
        &mut self,
        shipped: &Shipped,
        row: &dyn Fn(i64) -> Result<Option<super::RowRef>, VerifyError>,
    ) -> Result<Option<Problem>, VerifyError> {
        let by_hash: HashMap<Hash, &Signed> = self.mine.iter().map(|s| (s.note_hash, s)).collect();
        let mut successors: HashMap<Hash, usize> = HashMap::new();
        let mut went_back = None;
        for signed in &self.mine {
            let Some(prev) = signed.checkpoint.prev else {
                self.links.first += 1;
                continue;
            };
            *successors.entry(prev).or_default() += 1;
            let Some(before) = by_hash.get(&prev) else {
                self.links.missing += 1;
                if self.links.first_missing.is_none() {
                    self.links.first_missing =
                        Some((signed.checkpoint.row_id, signed.checkpoint.time));
                }
                continue;
            };
            self.links.linked += 1;
            let (now, then) = (&signed.checkpoint, &before.checkpoint);
            if went_back.is_none()
                && (then.row_id > now.row_id || then.pruned_rows > now.pruned_rows)
            {
                went_back = Some((signed, *before));
            }
        }
        self.links.forks = successors.values().filter(|n| **n > 1).count();
        let Some((signed, before)) = went_back else {
            return Ok(None);
        };
        let (now, then) = (&signed.checkpoint, &before.checkpoint);
        let named = |s: &Signed| describe_checkpoint(shipped, s);
        Ok(Some(match then.row_id > now.row_id {
            true => Problem {
                kind: Kind::RolledBack,
                row: row(now.row_id)?,
                what: format!(
                    "{} names as the one before it {}, which recorded the head at row_id {}: the chain's head went back between the two (rows cut off the end, or the store restored from an older copy)",
                    named(signed),
                    named(before),
                    then.row_id
                ),
            },
            false => Problem {
                kind: Kind::ChainTable,
                row: None,
                what: format!(
                    "{} counts {} deleted by retention, but the one before it, {}, already counted {}: the record of retention was rewritten between the two",
                    named(signed),
                    count(now.pruned_rows.unsigned_abs(), "row"),
                    named(before),
                    then.pruned_rows
                ),
            },
        }))
    }

    /// The checks that need the chain verified first: the tree, retention, time and
    /// witnesses.
    fn after(
        &mut self,
        conn: &Connection,
        state: &ChainState,
        report: &mut Report,
        shipped: &Shipped,
        options: &super::witnessed::Options,
        path: &Path,
    ) -> Result<(), VerifyError> {
        // A checkpoint past the chain's end is the verdict (rolled back), reported by
        // `finish`; the tree then ends past the chain too.
        if !self.walked || self.beyond.is_some() {
            return Ok(());
        }
        let sqlite = |what| super::sqlite_error(path, what);
        let named = |signed: &Signed| describe_checkpoint(shipped, signed);
        match super::tree::check(conn, state, &self.mine, &named)
            .map_err(sqlite("reading the Merkle tree"))?
        {
            Ok(tree) => self.tree = tree,
            Err(problem) => {
                report.problem = Some(problem);
                return Ok(());
            }
        }
        if let Some(tree) = self.tree.state
            && let Some(problem) =
                super::policy::check(conn, state, &tree, &self.mine, options.now, &named)
                    .map_err(sqlite("reading the retention boundary"))?
        {
            report.problem = Some(problem);
            return Ok(());
        }
        match super::witnessed::check(&self.mine, options, &named) {
            Ok(witnessed) => self.witnessed = witnessed,
            Err(problem) => report.problem = Some(problem),
        }
        Ok(())
    }

    fn finish(self, mut report: Report, shipped: Shipped) -> Verified {
        let matched: HashSet<(i64, Hash)> =
            report.anchors.iter().map(|a| (a.row_id, a.hash)).collect();
        let checked = self
            .mine
            .iter()
            .filter(|s| {
                s.checkpoint
                    .hash
                    .is_some_and(|hash| matched.contains(&(s.checkpoint.row_id, hash)))
            })
            .count();
        if report.problem.is_none()
            && let (Some(beyond), Some(state)) = (&self.beyond, &report.state)
        {
            report.problem = Some(rolled_back(&shipped, beyond, state, &report));
        }
        let by = report.rewritten.and_then(|a| self.recorded_by(&a));
        if let (Some(problem), Some(by)) = (&mut report.problem, by)
            && problem.kind == Kind::Rewritten
        {
            // The highest row still matching its record bounds where the change is.
            let at = problem.row.as_ref().map(|r| r.row_id);
            let since = report
                .anchors
                .iter()
                .map(|a| a.row_id)
                .filter(|r| at.is_some_and(|at| *r < at))
                .max();
            problem.what = format!(
                "{}; that record is {}: rows up to here were changed after it was signed{}",
                problem.what,
                describe_checkpoint(&shipped, by),
                since.map_or(String::new(), |r| format!(
                    " (after row_id {r}, whose recorded hash still matches)"
                ))
            );
        }
        let newest = self.mine.last().cloned();
        // Nothing else wrong: the archive's own problem is the verdict.
        let archive = self.archive;
        if report.problem.is_none() {
            report.problem = archive.clone();
        }
        Verified {
            tree: self.tree,
            witnessed: self.witnessed,
            archive,
            succeeded_by: self.succeeded_by,
            walked: self.walked,
            store: self.store,
            of_store: self.mine.len(),
            checked,
            pruned: self.pruned,
            unchecked: self.unchecked,
            newest,
            other_stores: self.other_stores,
            links: self.links,
            report,
            shipped,
        }
    }

    /// The checkpoint that recorded `anchor`, the earliest signed if several did.
    fn recorded_by(&self, anchor: &Anchor) -> Option<&Signed> {
        self.mine
            .iter()
            .filter(|s| {
                s.checkpoint.row_id == anchor.row_id && s.checkpoint.hash == Some(anchor.hash)
            })
            .min_by_key(|s| (s.checkpoint.time, s.line))
    }
}

fn rolled_back(shipped: &Shipped, beyond: &Signed, state: &ChainState, report: &Report) -> Problem {
    let checkpoint = &beyond.checkpoint;
    let missing = checkpoint.row_id - state.head_row_id;
    let rows = match missing {
        1 => format!("row_id {}", checkpoint.row_id),
        _ => format!("row_id {} to {}", state.head_row_id + 1, checkpoint.row_id),
    };
    let end = match &report.head {
        Some(_) => format!(
            "the chain ends here, at the head audit_chain records (row_id {})",
            state.head_row_id
        ),
        None => format!(
            "the chain holds no row (audit_chain records its head at row_id {})",
            state.head_row_id
        ),
    };
    Problem {
        kind: Kind::RolledBack,
        row: report.head.clone(),
        what: format!(
            "{end}, but {} records the head at row_id {} (seq {}, hash {}...): {} ({}) were cut off the end and audit_chain rewritten, or the store was restored from an older copy",
            describe_checkpoint(shipped, beyond),
            checkpoint.row_id,
            checkpoint.seq.map_or("?".to_owned(), |s| s.to_string()),
            checkpoint.hash.map_or("none".to_owned(), |h| short(&h)),
            rows,
            count(missing.unsigned_abs(), "row"),
        ),
    }
}

fn forged_problem(shipped: &Shipped, forged: &shipped::Rejected) -> Problem {
    let claim = forged.claim.as_ref().map_or(String::new(), |c| {
        format!(
            " (it says: row_id {} of store {}, signed at {})",
            c.row_id,
            c.store,
            time(c)
        )
    });
    let more = match shipped.forged_notes {
        1 => String::new(),
        n => format!(" ({n} notes do not verify; this is the first)"),
    };
    Problem {
        kind: Kind::Forged,
        row: None,
        what: format!(
            "the note at {}{claim} does not verify: {}{more}",
            shipped.at(forged.line),
            forged.reason
        ),
    }
}

/// `the checkpoint signed at TIME by KEY for row_id R (line L of INPUT)`.
pub(crate) fn describe_checkpoint(shipped: &Shipped, signed: &Signed) -> String {
    format!(
        "the checkpoint signed at {} by {} for row_id {} ({})",
        time(&signed.checkpoint),
        signed.signed_by.join(" and "),
        signed.checkpoint.row_id,
        shipped.at(signed.line)
    )
}

/// A checkpoint's time as it is written in its text.
pub(crate) fn time(checkpoint: &Checkpoint) -> String {
    chrono::DateTime::<chrono::Utc>::from(checkpoint.time)
        .to_rfc3339_opts(chrono::SecondsFormat::Nanos, true)
}

/// The store's id and the newest checkpoint note it keeps (the checkpoints are stored
/// as the events they are published as; a note read from the store is only as good
/// as the store), for `audit head`. Blocking.
pub(crate) fn newest_note(path: &Path) -> Result<(String, Option<String>), VerifyError> {
    let conn = super::open(path)?;
    let sqlite = |what| super::sqlite_error(path, what);
    let store = crate::store::checkpoint::head(&conn)
        .map_err(sqlite("reading the store's id"))?
        .store;
    let note = crate::store::checkpoint::newest_note(&conn, &store)
        .map_err(sqlite("reading the newest checkpoint"))?;
    Ok((store, note))
}

/// `Ok(Err(problem))`: the table naming the store is gone or holds what eventgate
/// never writes.
fn store_id(conn: &Connection) -> rusqlite::Result<Result<String, Problem>> {
    let tampered = |what: String| {
        Err(Problem {
            kind: Kind::ChainTable,
            row: None,
            what,
        })
    };
    let exists: bool = conn.query_row(
        "SELECT count(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = 'audit_store'",
        [],
        |r| r.get(0),
    )?;
    if !exists {
        return Ok(tampered(
            "the audit_store table (the store's id, which checkpoints name) is missing".into(),
        ));
    }
    let id = conn
        .query_row("SELECT store_id FROM audit_store WHERE id = 1", [], |r| {
            r.get::<_, rusqlite::types::Value>(0)
        })
        .optional()?;
    Ok(match id {
        None => tampered("the audit_store table has lost its row (the store's id)".into()),
        Some(rusqlite::types::Value::Text(id)) => Ok(id),
        Some(other) => tampered(format!(
            "audit_store.store_id holds {}, not text",
            describe(ValueRef::from(&other))
        )),
    })
}

fn others(stores: &BTreeMap<String, (usize, String)>) -> String {
    const SHOWN: usize = 3;
    let mut text: Vec<String> = stores
        .iter()
        .take(SHOWN)
        .map(|(store, (n, node))| {
            format!(
                "store {store} (node {node}, {})",
                count(*n as u64, "checkpoint")
            )
        })
        .collect();
    if stores.len() > SHOWN {
        text.push(format!(
            "{} more",
            count((stores.len() - SHOWN) as u64, "store")
        ));
    }
    text.join(", ")
}

pub(crate) fn count(n: u64, what: &str) -> String {
    match n {
        1 => format!("1 {what}"),
        n => format!("{n} {what}s"),
    }
}

/// Checkpoints of another store of this store's node and forwarder. Signed before
/// this store was made, they are the history of a store this one replaced, which is
/// gone: tampering. Signed after, this store was succeeded by that one (noted).
fn replaced(
    conn: &Connection,
    shipped: &Shipped,
    store: &str,
    mine: &[Signed],
    succeeded_by: &mut Option<(String, std::time::SystemTime)>,
) -> rusqlite::Result<Option<Problem>> {
    // Which node and forwarder this store is: from its own checkpoints, else from
    // the ones it keeps, else from its rows' node.
    let mut identity: Vec<(String, Option<String>)> = mine
        .iter()
        .filter_map(|s| {
            let tree = s.checkpoint.tree.as_ref()?;
            Some((s.checkpoint.node.clone(), Some(tree.forwarder.clone())))
        })
        .collect();
    if identity.is_empty() {
        let kept: Option<(Option<String>, Option<String>)> = conn
            .query_row(
                "SELECT json_extract(event, '$.node'), json_extract(event, '$.forwarder') FROM events \
                 WHERE namespace = 'eventgate' AND topic = ?1 AND json_extract(event, '$.store') = ?2 \
                 ORDER BY row_id DESC LIMIT 1",
                rusqlite::params![TOPIC, store],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?;
        match kept {
            Some((Some(node), forwarder)) => identity.push((node, forwarder)),
            _ => {
                let node: Option<String> = conn
                    .query_row(
                        "SELECT node FROM events WHERE node IS NOT NULL ORDER BY row_id DESC LIMIT 1",
                        [],
                        |r| r.get(0),
                    )
                    .optional()?;
                identity.extend(node.map(|n| (n, None)));
            }
        }
    }
    identity.sort();
    identity.dedup();
    let same = |signed: &Signed| {
        let Some(tree) = signed.checkpoint.tree.as_ref() else {
            return false;
        };
        signed.checkpoint.store != store
            && identity.iter().any(|(node, forwarder)| {
                *node == signed.checkpoint.node
                    && forwarder.as_ref().is_none_or(|f| *f == tree.forwarder)
            })
    };
    let others: Vec<&Signed> = shipped.checkpoints.iter().filter(|s| same(s)).collect();
    if others.is_empty() {
        return Ok(None);
    }
    let created: Option<String> = conn
        .query_row("SELECT created_at FROM audit_store WHERE id = 1", [], |r| {
            r.get(0)
        })
        .optional()?;
    let created = created
        .and_then(|c| chrono::DateTime::parse_from_rfc3339(&c).ok())
        .map(|t| std::time::SystemTime::from(t.with_timezone(&chrono::Utc)))
        .or_else(|| mine.iter().map(|s| s.checkpoint.time).min());
    let Some(created) = created else {
        return Ok(None);
    };
    let (before, after): (Vec<&Signed>, Vec<&Signed>) =
        others.iter().partition(|s| s.checkpoint.time < created);
    if let Some(first) = after.iter().min_by_key(|s| s.checkpoint.time) {
        *succeeded_by = Some((first.checkpoint.store.clone(), first.checkpoint.time));
    }
    let Some(newest) = before
        .iter()
        .max_by_key(|s| (s.checkpoint.time, s.checkpoint.row_id))
    else {
        return Ok(None);
    };
    let oldest = before
        .iter()
        .map(|s| s.checkpoint.time)
        .min()
        .unwrap_or(newest.checkpoint.time);
    let when = |t: std::time::SystemTime| {
        chrono::DateTime::<chrono::Utc>::from(t).to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    };
    let forwarder = newest
        .checkpoint
        .tree
        .as_ref()
        .map_or(String::new(), |t| format!(" forwarder {}", t.forwarder));
    Ok(Some(Problem {
        kind: Kind::Replaced,
        row: None,
        what: format!(
            "the checkpoints hold {} of store {} of node {}'s{forwarder}, signed from {} to {} (the newest, {}, for a tree of {} leaves), before this store ({store}) was made at {}: the store was replaced (deleted and made anew, or swapped for another file), and the history those checkpoints signed is not here",
            count(before.len() as u64, "checkpoint"),
            newest.checkpoint.store,
            newest.checkpoint.node,
            when(oldest),
            when(newest.checkpoint.time),
            describe_checkpoint(shipped, newest),
            newest.checkpoint.tree.as_ref().map_or(0, |t| t.size),
            when(created)
        ),
    }))
}
