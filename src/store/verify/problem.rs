//! What verification found wrong, and where.

use std::fmt;

/// The kinds of tampering verification tells apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A row's content (or its own `prev_hash`) no longer matches its hash.
    Modified,
    /// Rows are missing: a link skips over them, the chain ends before its recorded
    /// head, or the first row does not link to the chain's start.
    Deleted,
    /// A row that is not part of the chain sits among its rows.
    Inserted,
    /// Two neighbouring rows are intact but in each other's places.
    Reordered,
    /// The `audit_chain` table holds values the writer never writes.
    ChainTable,
    /// The chain is consistent, but a row's hash is not the one recorded for it
    /// elsewhere (`--anchor`, a signed checkpoint): the chain was recomputed after
    /// an edit.
    Rewritten,
    /// A signed checkpoint records a head past the chain's end: rows were cut off
    /// the end and `audit_chain` rewritten to match (or the store was restored from
    /// an older copy).
    RolledBack,
    /// A note that claims a given key's signature that does not verify: it was
    /// changed after it was signed.
    Forged,
    /// Two notes signed by the given keys record different hashes for one row: the
    /// signing key signed two histories.
    Conflicting,
    /// The Merkle tree's tables hold what the rows do not give.
    TreeTable,
    /// Checkpoints of this store's node and forwarder name another store: the store
    /// was replaced (deleted and made anew, or swapped for another file).
    Replaced,
    /// Rows were deleted that the retention policy the checkpoints state does not
    /// allow deleting.
    Retention,
    /// The newest checkpoint is older than `--max-age`: checkpoints stopped arriving.
    Stale,
    /// A checkpoint is not cosigned by enough of the given witnesses.
    NotWitnessed,
    /// A checkpoint's time disagrees with its witnesses' or goes back from the one
    /// it names as its predecessor.
    BackDated,
    /// The archive of checkpoints holds lines that are not what eventgate ships.
    Archive,
    /// A row marked as repeating a reconciled event (`origin = repeat`) has no
    /// reconciled row of the same source, namespace, topic and object before it that
    /// another repeat did not claim: the mark would leave a change out of the counts.
    Unfounded,
}

impl Kind {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Kind::Modified => "modified",
            Kind::Deleted => "deleted",
            Kind::Inserted => "inserted",
            Kind::Reordered => "reordered",
            Kind::ChainTable => "audit_chain tampered",
            Kind::Rewritten => "rewritten",
            Kind::RolledBack => "rolled back",
            Kind::Forged => "forged checkpoint",
            Kind::Conflicting => "conflicting checkpoints",
            Kind::TreeTable => "tree tampered",
            Kind::Replaced => "replaced",
            Kind::Retention => "retention not allowed",
            Kind::Stale => "stale",
            Kind::NotWitnessed => "not witnessed",
            Kind::BackDated => "back-dated",
            Kind::Archive => "archive tampered",
            Kind::Unfounded => "unfounded repeat",
        }
    }
}

/// A row named in a report: its row_id, seq and time (the event's timestamp, or
/// when it was received if it has none), as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RowRef {
    pub row_id: i64,
    pub seq: Option<i64>,
    pub time: Option<String>,
}

impl fmt::Display for RowRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "row_id {}", self.row_id)?;
        match &self.seq {
            Some(seq) => write!(f, " (seq {seq}")?,
            None => write!(f, " (seq ?")?,
        }
        match &self.time {
            Some(time) => write!(f, ", {time})"),
            None => write!(f, ")"),
        }
    }
}

/// The first problem found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Problem {
    pub kind: Kind,
    /// The row the problem is reported at, when there is one.
    pub row: Option<RowRef>,
    pub what: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.row {
            Some(row) => write!(f, "{}: {row}: {}", self.kind.label(), self.what),
            None => write!(f, "{}: {}", self.kind.label(), self.what),
        }
    }
}
