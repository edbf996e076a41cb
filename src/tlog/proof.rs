//! Inclusion and consistency proofs, RFC 6962's audit path and consistency proof
//! (section 2.1), in the order RFC 6962 and Go's `sumdb/tlog` list them: from the
//! leaf (or the old tree's edge) up. The checkers need nothing but the proof, the
//! tree sizes and the hashes; every recursion halves a range, so depth is at most
//! 64 whatever the input.

use super::stored::{HashReader, max_pow2, subtree_hash, subtree_index};
use super::{Hash, TlogError, node_hash};

/// The most hashes any proof over a tree of at most 2^63 leaves has.
pub(crate) const MAX_PROOF_HASHES: usize = 128;

/// The hashes proving leaf `n` is in the tree of the first `t` leaves.
pub fn prove_record(t: u64, n: u64, reader: &mut dyn HashReader) -> Result<Vec<Hash>, TlogError> {
    if n >= t {
        return Err(TlogError::BadRequest(format!(
            "leaf {n} is not in a tree of {t} leaves"
        )));
    }
    let mut indexes = Vec::new();
    leaf_proof_index(0, t, n, &mut indexes);
    if indexes.is_empty() {
        return Ok(Vec::new());
    }
    let hashes = reader.read_hashes(&indexes)?;
    let (proof, rest) = leaf_proof(0, t, n, &hashes)?;
    debug_assert!(rest.is_empty());
    Ok(proof)
}

fn leaf_proof_index(lo: u64, hi: u64, n: u64, need: &mut Vec<u64>) {
    if lo + 1 == hi {
        return;
    }
    let (k, _) = max_pow2(hi - lo);
    if n < lo + k {
        leaf_proof_index(lo, lo + k, n, need);
        subtree_index(lo + k, hi, need);
    } else {
        subtree_index(lo, lo + k, need);
        leaf_proof_index(lo + k, hi, n, need);
    }
}

fn leaf_proof(
    lo: u64,
    hi: u64,
    n: u64,
    hashes: &[Hash],
) -> Result<(Vec<Hash>, &[Hash]), TlogError> {
    if lo + 1 == hi {
        return Ok((Vec::new(), hashes));
    }
    let (k, _) = max_pow2(hi - lo);
    let (mut proof, sibling, rest) = if n < lo + k {
        let (proof, rest) = leaf_proof(lo, lo + k, n, hashes)?;
        let (sibling, rest) = subtree_hash(lo + k, hi, rest)?;
        (proof, sibling, rest)
    } else {
        let (sibling, rest) = subtree_hash(lo, lo + k, hashes)?;
        let (proof, rest) = leaf_proof(lo + k, hi, n, rest)?;
        (proof, sibling, rest)
    };
    proof.push(sibling);
    Ok((proof, rest))
}

/// Checks that `proof` shows the leaf hash `leaf` at position `n` in the tree of `t`
/// leaves whose root is `root`.
pub fn check_record(
    proof: &[Hash],
    t: u64,
    root: &Hash,
    n: u64,
    leaf: &Hash,
) -> Result<(), TlogError> {
    if n >= t {
        return Err(TlogError::ProofFailed("the leaf is not inside the tree"));
    }
    if proof.len() > MAX_PROOF_HASHES {
        return Err(TlogError::ProofFailed("more hashes than any proof has"));
    }
    match run_record_proof(proof, 0, t, n, leaf)? == *root {
        true => Ok(()),
        false => Err(TlogError::ProofFailed(
            "the path from the leaf does not end at the tree head's root",
        )),
    }
}

fn run_record_proof(
    proof: &[Hash],
    lo: u64,
    hi: u64,
    n: u64,
    leaf: &Hash,
) -> Result<Hash, TlogError> {
    if lo + 1 == hi {
        return match proof.is_empty() {
            true => Ok(*leaf),
            false => Err(TlogError::ProofFailed("the proof has hashes to spare")),
        };
    }
    let Some((last, rest)) = proof.split_last() else {
        return Err(TlogError::ProofFailed("the proof is too short"));
    };
    let (k, _) = max_pow2(hi - lo);
    if n < lo + k {
        Ok(node_hash(
            &run_record_proof(rest, lo, lo + k, n, leaf)?,
            last,
        ))
    } else {
        Ok(node_hash(
            last,
            &run_record_proof(rest, lo + k, hi, n, leaf)?,
        ))
    }
}

/// The hashes proving the tree of the first `n` leaves is a prefix of the tree of
/// the first `t`.
pub fn prove_tree(t: u64, n: u64, reader: &mut dyn HashReader) -> Result<Vec<Hash>, TlogError> {
    if n < 1 || n > t {
        return Err(TlogError::BadRequest(format!(
            "no consistency proof from {n} to {t} leaves: the old size must be 1 to the new"
        )));
    }
    let mut indexes = Vec::new();
    tree_proof_index(0, t, n, &mut indexes);
    if indexes.is_empty() {
        return Ok(Vec::new());
    }
    let hashes = reader.read_hashes(&indexes)?;
    let (proof, _) = tree_proof(0, t, n, &hashes)?;
    Ok(proof)
}

fn tree_proof_index(lo: u64, hi: u64, n: u64, need: &mut Vec<u64>) {
    if n == hi {
        if lo != 0 {
            subtree_index(lo, hi, need);
        }
        return;
    }
    let (k, _) = max_pow2(hi - lo);
    if n <= lo + k {
        tree_proof_index(lo, lo + k, n, need);
        subtree_index(lo + k, hi, need);
    } else {
        subtree_index(lo, lo + k, need);
        tree_proof_index(lo + k, hi, n, need);
    }
}

fn tree_proof(
    lo: u64,
    hi: u64,
    n: u64,
    hashes: &[Hash],
) -> Result<(Vec<Hash>, &[Hash]), TlogError> {
    if n == hi {
        if lo == 0 {
            return Ok((Vec::new(), hashes));
        }
        let (hash, rest) = subtree_hash(lo, hi, hashes)?;
        return Ok((vec![hash], rest));
    }
    let (k, _) = max_pow2(hi - lo);
    let (mut proof, sibling, rest) = if n <= lo + k {
        let (proof, rest) = tree_proof(lo, lo + k, n, hashes)?;
        let (sibling, rest) = subtree_hash(lo + k, hi, rest)?;
        (proof, sibling, rest)
    } else {
        let (sibling, rest) = subtree_hash(lo, lo + k, hashes)?;
        let (proof, rest) = tree_proof(lo + k, hi, n, rest)?;
        (proof, sibling, rest)
    };
    proof.push(sibling);
    Ok((proof, rest))
}

/// Checks that `proof` shows the tree of `n` leaves with root `old` is a prefix of
/// the tree of `t` leaves with root `new`. Equal sizes need an empty proof and equal
/// roots.
pub fn check_tree(proof: &[Hash], t: u64, new: &Hash, n: u64, old: &Hash) -> Result<(), TlogError> {
    if n < 1 || n > t {
        return Err(TlogError::ProofFailed(
            "the old size must be 1 to the new size",
        ));
    }
    if proof.len() > MAX_PROOF_HASHES {
        return Err(TlogError::ProofFailed("more hashes than any proof has"));
    }
    let (old2, new2) = run_tree_proof(proof, 0, t, n, old)?;
    if old2 != *old {
        return Err(TlogError::ProofFailed(
            "the proof does not lead to the old tree head's root",
        ));
    }
    if new2 != *new {
        return Err(TlogError::ProofFailed(
            "the proof does not lead to the new tree head's root",
        ));
    }
    Ok(())
}

fn run_tree_proof(
    proof: &[Hash],
    lo: u64,
    hi: u64,
    n: u64,
    old: &Hash,
) -> Result<(Hash, Hash), TlogError> {
    if n == hi {
        if lo == 0 {
            return match proof.is_empty() {
                true => Ok((*old, *old)),
                false => Err(TlogError::ProofFailed("the proof has hashes to spare")),
            };
        }
        return match proof {
            [one] => Ok((*one, *one)),
            _ => Err(TlogError::ProofFailed(
                "the proof has the wrong number of hashes",
            )),
        };
    }
    let Some((last, rest)) = proof.split_last() else {
        return Err(TlogError::ProofFailed("the proof is too short"));
    };
    let (k, _) = max_pow2(hi - lo);
    if n <= lo + k {
        let (oh, th) = run_tree_proof(rest, lo, lo + k, n, old)?;
        Ok((oh, node_hash(&th, last)))
    } else {
        let (oh, th) = run_tree_proof(rest, lo + k, hi, n, old)?;
        Ok((node_hash(last, &oh), node_hash(last, &th)))
    }
}
