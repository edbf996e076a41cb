//! A signed checkpoint as `audit verify` found it in the archive.

use crate::store::chain::Hash;
use crate::store::checkpoint::Checkpoint;

/// A checkpoint signed by one of the given keys, and where its note was.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Signed {
    /// The input's line the note begins on (its JSON line), from 1.
    pub line: u64,
    pub checkpoint: Checkpoint,
    /// SHA-256 of the whole note: what the next checkpoint's `prev` names.
    pub note_hash: Hash,
    /// The given keys whose signatures verified.
    pub signed_by: Vec<String>,
    /// The whole note, for its witnesses' cosignatures.
    pub note: String,
}
