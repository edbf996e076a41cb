//! The walk over every row: hashes, links, row_ids, then the end against the head.

use rusqlite::Connection;
use rusqlite::types::ValueRef;

use super::classify::{self, Broken, Link, Next, Origin};
use super::state::{self, hash_value};
use super::{Anchor, ChainState, Kind, Problem, Report, RowRef, VerifyError};
use super::{HASH, PREV_HASH, ROWS, checkpoint_ref, here, row_ref, values};
use crate::store::chain::{self, Hash};

pub(super) struct Walk<'a> {
    conn: &'a Connection,
    state: &'a ChainState,
    anchors: &'a [Anchor],
    report: &'a mut Report,
    /// The last row (or the chain's start) that everything so far links up to.
    last: Link,
    hasher: chain::RowHasher,
    /// Reconciled rows a repeat may yet name (see [`Repeats`]).
    repeats: Repeats,
}

/// The rule for rows marked `origin = repeat`: each repeats one reconciled row told
/// before it, of the same source, namespace, topic and object (the container, image
/// or namespace its event names). Where retention deleted rows, a repeat's
/// reconciled row may be gone with them: the rule is then not applied.
#[derive(Default)]
struct Repeats {
    told: std::collections::HashMap<(String, String, String, String), u64>,
    checked: bool,
}

/// Where [`ROWS`]'s values (after row_id) hold what the rule reads.
const NAMESPACE: usize = 4;
const TOPIC: usize = 5;
const EVENT: usize = 8;
const SOURCE: usize = 9;
const ORIGIN: usize = 14;

impl Repeats {
    /// Notes a row; what is wrong with it, for a repeat without its reconciled row.
    fn row(&mut self, values: &[ValueRef<'_>]) -> Option<String> {
        let text = |i: usize| values.get(i).and_then(|v| v.as_str().ok()).unwrap_or("");
        let origin = text(ORIGIN);
        if origin != "reconciled" && origin != "repeat" {
            return None;
        }
        let object = serde_json::from_str::<serde_json::Value>(text(EVENT))
            .ok()
            .and_then(|payload| {
                ["container_id", "id", "name"]
                    .iter()
                    .find_map(|f| payload.get(*f)?.as_str().map(str::to_owned))
            })
            .unwrap_or_default();
        let key = (
            text(SOURCE).to_owned(),
            text(NAMESPACE).to_owned(),
            text(TOPIC).to_owned(),
            object,
        );
        if origin == "reconciled" {
            *self.told.entry(key).or_default() += 1;
            return None;
        }
        match self.told.get_mut(&key) {
            Some(n) if *n > 0 => {
                *n -= 1;
                None
            }
            _ if !self.checked => None,
            _ => Some(format!(
                "it is marked as repeating a reconciled event, but no reconciled {} of {:?} from {} comes before it unclaimed",
                key.2, key.3, key.0
            )),
        }
    }
}

impl<'a> Walk<'a> {
    pub(super) fn new(
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
        // Retention deletes rows legitimately: an anchor on a row it took cannot be
        // checked either way. (One before the chain's start is tampering: see run.)
        if let Some(anchor) = anchors
            .iter()
            .find(|a| a.row_id >= state.first_row_id && a.row_id < state.pruned_row_id)
        {
            return Err(VerifyError::Anchor {
                anchor: *anchor,
                why: format!(
                    "row_id {} was deleted by retention (the checkpoint is row_id {}); record a newer head",
                    anchor.row_id, state.pruned_row_id
                ),
            });
        }
        Ok(Walk {
            conn,
            state,
            anchors,
            report,
            last,
            hasher: chain::RowHasher::default(),
            repeats: Repeats {
                checked: state.pruned_row_id < state.first_row_id,
                ..Repeats::default()
            },
        })
    }

    pub(super) fn run(mut self) -> rusqlite::Result<Option<Problem>> {
        // first_row_id is set once, by the migration: a row that had a hash when its
        // anchor was recorded cannot have become a legacy row since.
        let state = self.state;
        if let Some(anchor) = self.anchors.iter().find(|a| a.row_id < state.first_row_id) {
            self.report.rewritten = Some(*anchor);
            return Ok(Some(Problem {
                kind: Kind::Rewritten,
                row: row_ref(self.conn, anchor.row_id)?,
                what: format!(
                    "a hash was recorded for row_id {}, but audit_chain.first_row_id now says the chain begins at row_id {}: the chain's start was moved",
                    anchor.row_id, state.first_row_id
                ),
            }));
        }
        let (start, start_hash) = (self.last.row_id, self.last.hash);
        if let Some(problem) = self.anchor(start, &start_hash, None) {
            return Ok(Some(problem));
        }
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
            let (prev, hash) = (row.get_ref(PREV_HASH)?, row.get_ref(HASH)?);
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
                if let Some(what) = self.repeats.row(&values) {
                    return problem(Kind::Unfounded, what);
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

    /// Compares a row's hash with every anchor recorded for it (the anchors are
    /// sorted by row_id: found by binary search, as there may be one per checkpoint).
    fn anchor(&mut self, row_id: i64, hash: &Hash, at: Option<RowRef>) -> Option<Problem> {
        let from = self.anchors.partition_point(|a| a.row_id < row_id);
        let recorded = &self.anchors[from..];
        let count = recorded.iter().take_while(|a| a.row_id == row_id).count();
        let recorded = &recorded[..count];
        let Some(anchor) = recorded.iter().find(|a| a.hash != *hash) else {
            self.report.anchors.extend_from_slice(recorded);
            return None;
        };
        self.report.rewritten = Some(*anchor);
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
            self.report.rewritten = Some(*anchor);
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
