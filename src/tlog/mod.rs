//! A transparency log over the audit store's rows: the Merkle tree of RFC 6962
//! (and RFC 9162, C2SP tlog-checkpoint), laid out for storage as Go's
//! `golang.org/x/mod/sumdb/tlog` lays it out, so that the two compute the same
//! hashes, proofs and indexes and each can check what the other made.
//!
//! - A leaf is `SHA-256(0x00 || record)`, an interior node `SHA-256(0x01 || left ||
//!   right)`; the tree over `n` leaves splits at the largest power of two below `n`.
//! - [`stored`]: every leaf and every complete subtree's hash, numbered in the order
//!   they become known (about two per leaf), so appending a leaf costs O(1) amortised
//!   hashes and reads, and any proof is a few dozen lookups by number.
//! - [`proof`]: inclusion proofs (one leaf against a tree head) and consistency
//!   proofs (an older tree head is a prefix of a newer one), made from stored hashes
//!   and checked from nothing but the proof, the leaf and the two heads.
//! - [`tree_head`]: the signed text of a tree head, C2SP's tlog-checkpoint body;
//!   [`cosignature`]: a witness's C2SP tlog-cosignature over one.

pub(crate) mod check;
pub(crate) mod cosignature;
pub(crate) mod proof;
pub(crate) mod proof_file;
pub(crate) mod stored;
pub(crate) mod tree_head;

use sha2::{Digest, Sha256};
use thiserror::Error;

pub const HASH_LEN: usize = 32;

/// One node of the tree.
pub type Hash = [u8; HASH_LEN];

/// The hash of a leaf holding `record`.
pub fn leaf_hash(record: &[u8]) -> Hash {
    let mut sha = Sha256::new();
    sha.update([0u8]);
    sha.update(record);
    sha.finalize().into()
}

/// The hash of an interior node.
pub(crate) fn node_hash(left: &Hash, right: &Hash) -> Hash {
    let mut sha = Sha256::new();
    sha.update([1u8]);
    sha.update(left);
    sha.update(right);
    sha.finalize().into()
}

/// The root of the tree with no leaves, RFC 6962's `MTH({}) = SHA-256()`.
pub(crate) fn empty_root() -> Hash {
    Sha256::digest([]).into()
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum TlogError {
    /// A proof that does not lead from its leaf (or old head) to the head it is
    /// checked against: wrong hashes, too many or too few.
    #[error("the proof does not verify: {0}")]
    ProofFailed(&'static str),
    #[error("{0}")]
    BadRequest(String),
    /// The stored hashes a proof or a new leaf needs are not there (the tree's table
    /// was cut or edited): names the first missing index.
    #[error("stored tree hash {index} is missing")]
    Missing { index: u64 },
    #[error("reading stored tree hashes: {0}")]
    Read(String),
}

#[cfg(test)]
mod tests;
