//! Retention against the policy the checkpoints state: rows may be gone only where a
//! signed policy deleted them. Each version 2 checkpoint signs the retention boundary
//! (the last deleted row) and the policy in force; between two checkpoints that both
//! say `retention none` the boundary may not move, nor after the newest when it says
//! so. Where a policy is stated, the boundary row itself is checked: its record (kept
//! in `audit_chain.pruned_record`) is proven against a signed tree head, and its
//! received time and position must be what the policy deletes (older than `max_age`
//! at the time, or beyond the newest `max_rows`).

use rusqlite::{Connection, OptionalExtension};

use super::signed::Signed;
use super::{ChainState, Kind, Problem};
use crate::store::chain::{COLUMNS, decode_record};
use crate::store::checkpoint::{Checkpoint, policy_text};
use crate::store::tree::{SqlHashes, TreeState};
use crate::tlog::leaf_hash;
use crate::tlog::proof::{check_record, prove_record};

fn problem(what: String) -> Problem {
    Problem {
        kind: Kind::Retention,
        row: None,
        what,
    }
}

/// Checks the store's deletions against `mine` (this store's checkpoints, any
/// order). `now` bounds deletions no checkpoint signed yet.
pub(crate) fn check(
    conn: &Connection,
    state: &ChainState,
    tree: &TreeState,
    mine: &[Signed],
    now: std::time::SystemTime,
    named: &dyn Fn(&Signed) -> String,
) -> rusqlite::Result<Option<Problem>> {
    let mut signed: Vec<&Signed> = mine
        .iter()
        .filter(|s| s.checkpoint.tree.is_some())
        .collect();
    if signed.is_empty() {
        return Ok(None);
    }
    signed.sort_by_key(|s| (s.checkpoint.time, s.checkpoint.row_id, s.note_hash));
    let facts = |s: &Signed| s.checkpoint.tree.clone();
    let boundary = |s: &Signed| facts(s).map_or(0, |t| t.pruned_row_id);
    let none = |s: &Signed| facts(s).is_some_and(|t| t.retention.is_none());
    // Deletions before the first checkpoint, and between two.
    let mut before: Option<&Signed> = None;
    for s in &signed {
        let from = before.map_or(0, &boundary);
        if boundary(s) > from && none(s) && before.is_none_or(&none) {
            return Ok(Some(problem(format!(
                "row_id {} to {} were deleted {}, and {} says retention none{}",
                from + 1,
                boundary(s),
                match before {
                    Some(b) => format!("between {} and it", named(b)),
                    None => "before it".to_owned(),
                },
                named(s),
                match before {
                    Some(_) => ", as did the one before",
                    None => "",
                }
            ))));
        }
        before = Some(s);
    }
    let newest = signed[signed.len() - 1];
    if state.pruned_row_id > boundary(newest) && none(newest) {
        return Ok(Some(problem(format!(
            "row_id {} to {} were deleted after the newest checkpoint, {}, which says retention none: rows were deleted the way retention deletes them, without a retention policy",
            boundary(newest) + 1,
            state.pruned_row_id,
            named(newest)
        ))));
    }
    boundary_row(conn, state, tree, &signed, now, named)
}

/// The last deleted row against the policy in force when it was deleted.
fn boundary_row(
    conn: &Connection,
    state: &ChainState,
    tree: &TreeState,
    signed: &[&Signed],
    now: std::time::SystemTime,
    named: &dyn Fn(&Signed) -> String,
) -> rusqlite::Result<Option<Problem>> {
    let row_id = state.pruned_row_id;
    let Some(index) = row_id
        .checked_sub(tree.first_row_id)
        .and_then(|i| u64::try_from(i).ok())
    else {
        // Deleted before the tree began: nothing of it to prove.
        return Ok(None);
    };
    let record: Option<Vec<u8>> = conn
        .query_row(
            "SELECT pruned_record FROM audit_chain WHERE id = 1",
            [],
            |r| r.get(0),
        )
        .optional()?
        .flatten();
    let Some(record) = record else {
        return Ok(Some(problem(format!(
            "retention deleted up to row_id {row_id} but audit_chain.pruned_record is empty: the record of the last deleted row, which retention keeps, was removed"
        ))));
    };
    // A signed head that holds the row, to prove the record against.
    let Some(head) = signed
        .iter()
        .find(|s| s.checkpoint.tree.as_ref().is_some_and(|t| t.size > index))
    else {
        return Ok(None);
    };
    let Some(facts) = head.checkpoint.tree.as_ref() else {
        return Ok(None);
    };
    let proven = prove_record(facts.size, index, &mut SqlHashes::new(conn))
        .ok()
        .is_some_and(|proof| {
            check_record(&proof, facts.size, &facts.root, index, &leaf_hash(&record)).is_ok()
        });
    if !proven {
        return Ok(Some(problem(format!(
            "audit_chain.pruned_record is not the record of row_id {row_id} that {} signed: the record of the last deleted row was replaced",
            named(head)
        ))));
    }
    let received = decode_record(&record).and_then(|values| {
        let at = COLUMNS.iter().position(|c| *c == "received_at")?;
        match values.get(at)? {
            rusqlite::types::Value::Text(t) => Some(t.clone()),
            _ => None,
        }
    });
    let Some(received) = received else {
        return Ok(None);
    };
    // The policy in force: that of the first checkpoint that signed this boundary or
    // a later one, at its time; none yet: the newest's, now.
    let (judge, at, head_row) = match signed.iter().find(|s| {
        s.checkpoint
            .tree
            .as_ref()
            .is_some_and(|t| t.pruned_row_id >= row_id)
    }) {
        Some(s) => (Some(*s), s.checkpoint.time, s.checkpoint.row_id),
        None => (None, now, state.head_row_id),
    };
    let policy_of = |c: &Checkpoint| c.tree.as_ref().and_then(|t| t.retention);
    let newest = signed[signed.len() - 1];
    let policy = match judge {
        Some(s) => policy_of(&s.checkpoint),
        None => policy_of(&newest.checkpoint),
    };
    let Some(policy) = policy else {
        // A deletion under no policy was reported above.
        return Ok(None);
    };
    let old_enough = policy.max_age.is_some_and(|age| {
        at.checked_sub(age)
            .map(|cutoff| crate::proto::rfc3339_nanos(&prost_types::Timestamp::from(cutoff)))
            .is_some_and(|cutoff| received < cutoff)
    });
    let beyond_rows = policy.max_rows.is_some_and(|keep| {
        head_row.saturating_sub(row_id) >= i64::try_from(keep).unwrap_or(i64::MAX)
    });
    if old_enough || beyond_rows {
        return Ok(None);
    }
    let when = match judge {
        Some(s) => format!("{} signed this boundary", named(s)),
        None => "now (no checkpoint has signed this boundary yet)".to_owned(),
    };
    Ok(Some(Problem {
        kind: Kind::Retention,
        row: None,
        what: format!(
            "retention deleted up to row_id {row_id}, received at {received}, but the policy in force ({}) keeps that row: {when}, when {} rows followed it; more was deleted than the signed policy allows",
            policy_text(Some(&policy)),
            head_row.saturating_sub(row_id)
        ),
    }))
}
