//! Checking a proof file ([`super::proof_file`]) with nothing but keys: the tree
//! heads' signatures (the log's key, and witnesses' cosignatures when asked), then
//! the proof itself.

use thiserror::Error;

use super::cosignature::{WitnessKey, cosignatures};
use super::proof::{check_record, check_tree};
use super::proof_file::ProofFile;
use super::tree_head::TreeHead;
use super::{TlogError, leaf_hash};
use crate::note::{NoteError, Verifier};

/// What a valid proof showed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Shown {
    /// `record` is leaf `index` of the tree head.
    Included {
        index: u64,
        record: Vec<u8>,
        head: Checked,
    },
    /// The old tree head is a prefix of the new one.
    Consistent { old: Checked, new: Checked },
}

/// One tree head whose signature checked out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Checked {
    pub head: TreeHead,
    pub text: String,
    pub signed_by: Vec<String>,
    /// Witnesses whose cosignature verified, with their times.
    pub witnessed: Vec<(String, u64)>,
}

#[derive(Debug, Error)]
pub(crate) enum CheckError {
    /// The proof or a signature is wrong: evidence of tampering (exit 1).
    #[error("the {which}tree head's signature does not verify: {source}")]
    Forged {
        which: &'static str,
        #[source]
        source: NoteError,
    },
    #[error("the {which}tree head carries a cosignature by {witness} that does not verify")]
    BadCosignature {
        which: &'static str,
        witness: String,
    },
    #[error("{0}")]
    Failed(#[from] TlogError),
    #[error(
        "the two tree heads are of different logs ({old:?} and {new:?}): a consistency proof relates two heads of one log"
    )]
    OtherLog { old: String, new: String },
    #[error(
        "the newer tree head ({new} leaves) is smaller than the older ({old}): the log went back"
    )]
    RolledBack { old: u64, new: u64 },
    #[error(
        "the {which}tree head is cosigned by {found} of the given witnesses ({names}), and at least {needed} are required"
    )]
    NotWitnessed {
        which: &'static str,
        found: usize,
        needed: usize,
        names: String,
    },
    /// The input or the keys cannot be used (exit 2).
    #[error("the {which}tree head cannot be used: {source}")]
    Unusable {
        which: &'static str,
        #[source]
        source: NoteError,
    },
    #[error("the {which}tree head is not a tlog checkpoint: {problem}")]
    NotATreeHead {
        which: &'static str,
        problem: String,
    },
}

impl CheckError {
    /// Whether the error is evidence against the log (exit 1), not unusable input.
    pub(crate) fn is_tampering(&self) -> bool {
        !matches!(
            self,
            CheckError::Unusable { .. } | CheckError::NotATreeHead { .. }
        )
    }
}

/// `which` is `"older "` or `"newer "` with its space, or empty for an inclusion
/// proof's only head, so that messages read "the tree head" then.
fn open(
    which: &'static str,
    note: &str,
    keys: &[Verifier],
    witnesses: &[WitnessKey],
    min_witnesses: usize,
) -> Result<Checked, CheckError> {
    let opened = crate::note::open(note, keys).map_err(|source| match source {
        NoteError::BadSignature { .. } => CheckError::Forged { which, source },
        source => CheckError::Unusable { which, source },
    })?;
    let head = TreeHead::parse(&opened.text)
        .map_err(|problem| CheckError::NotATreeHead { which, problem })?;
    let super::cosignature::Cosignatures {
        good: witnessed,
        bad,
    } = cosignatures(note, witnesses).map_err(|source| CheckError::Unusable { which, source })?;
    if let Some(witness) = bad.into_iter().next() {
        return Err(CheckError::BadCosignature { which, witness });
    }
    if witnessed.len() < min_witnesses {
        return Err(CheckError::NotWitnessed {
            which,
            found: witnessed.len(),
            needed: min_witnesses,
            names: witnesses
                .iter()
                .map(WitnessKey::name)
                .collect::<Vec<_>>()
                .join(", "),
        });
    }
    Ok(Checked {
        head,
        text: opened.text,
        signed_by: opened.signed_by,
        witnessed,
    })
}

/// Checks a proof: the signatures first, then the hashes.
pub(crate) fn check(
    file: &ProofFile,
    keys: &[Verifier],
    witnesses: &[WitnessKey],
    min_witnesses: usize,
) -> Result<Shown, CheckError> {
    match file {
        ProofFile::Inclusion {
            index,
            record,
            proof,
            note,
        } => {
            let head = open("", note, keys, witnesses, min_witnesses)?;
            check_record(
                proof,
                head.head.size,
                &head.head.root,
                *index,
                &leaf_hash(record),
            )?;
            Ok(Shown::Included {
                index: *index,
                record: record.clone(),
                head,
            })
        }
        ProofFile::Consistency { proof, old, new } => {
            let old = open("older ", old, keys, witnesses, 0)?;
            let new = open("newer ", new, keys, witnesses, min_witnesses)?;
            if old.head.origin != new.head.origin {
                return Err(CheckError::OtherLog {
                    old: old.head.origin,
                    new: new.head.origin,
                });
            }
            if new.head.size < old.head.size {
                return Err(CheckError::RolledBack {
                    old: old.head.size,
                    new: new.head.size,
                });
            }
            if old.head.size > 0 {
                check_tree(
                    proof,
                    new.head.size,
                    &new.head.root,
                    old.head.size,
                    &old.head.root,
                )?;
            } else if !proof.is_empty() {
                return Err(TlogError::ProofFailed("the proof has hashes to spare").into());
            }
            Ok(Shown::Consistent { old, new })
        }
    }
}
