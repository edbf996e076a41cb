//! The stored-hash layout: every hash the tree will ever need, numbered in the order
//! it becomes known. Appending leaf `n` stores its leaf hash, then the hash of every
//! complete subtree it closes (one per trailing 1 bit of `n`), so on average two
//! hashes per leaf; nothing stored ever changes. The numbering is Go's
//! `sumdb/tlog` `StoredHashIndex`, so an index means the same hash in both.

use super::{Hash, TlogError, node_hash};

/// The stored index of the `n`th hash at `level` (level 0: leaves; level L: the
/// subtree of leaves `[n << L, (n + 1) << L)`).
pub(crate) fn stored_hash_index(level: u32, n: u64) -> u64 {
    // Level L's n'th hash is written right after level L+1's 2n+1'th hash, so walk
    // down to the level-0 leaf that completes it, then add the levels back.
    let mut n = n;
    for _ in 0..level {
        n = 2 * n + 1;
    }
    // Level 0's n'th hash comes after n + n/2 + n/4 + ... hashes.
    let mut index = 0;
    while n > 0 {
        index += n;
        n >>= 1;
    }
    index + u64::from(level)
}

/// The inverse of [`stored_hash_index`]: which level and position a stored index is.
pub(crate) fn split_stored_hash_index(index: u64) -> (u32, u64) {
    // stored_hash_index(0, n) < 2n, so the leaf we want is at least index / 2.
    let mut n = index / 2;
    let mut index_n = stored_hash_index(0, n);
    loop {
        // Leaf n + 1 adds 1 + trailing_ones(n + 1)... hashes after leaf n's.
        let next = index_n + 1 + u64::from((n + 1).trailing_zeros());
        if next > index {
            break;
        }
        n += 1;
        index_n = next;
    }
    let level = u32::try_from(index - index_n).unwrap_or(u32::MAX);
    (level, n >> level)
}

/// How many hashes a tree of `n` leaves has stored.
pub fn stored_hash_count(n: u64) -> u64 {
    if n == 0 {
        return 0;
    }
    let mut count = stored_hash_index(0, n - 1) + 1;
    let mut i = n - 1;
    while i & 1 != 0 {
        count += 1;
        i >>= 1;
    }
    count
}

/// Where stored hashes are read from (the store's table, a proof's cache, memory).
pub trait HashReader {
    /// The hashes at `indexes`, in that order; a missing one is an error.
    fn read_hashes(&mut self, indexes: &[u64]) -> Result<Vec<Hash>, TlogError>;
}

impl HashReader for Vec<Hash> {
    fn read_hashes(&mut self, indexes: &[u64]) -> Result<Vec<Hash>, TlogError> {
        indexes
            .iter()
            .map(|&index| {
                usize::try_from(index)
                    .ok()
                    .and_then(|i| self.get(i).copied())
                    .ok_or(TlogError::Missing { index })
            })
            .collect()
    }
}

/// The largest power of two smaller than `n` (n >= 2), and its log.
pub(super) fn max_pow2(n: u64) -> (u64, u32) {
    let mut level = 0;
    while level < 63 && (1u64 << (level + 1)) < n {
        level += 1;
    }
    (1 << level, level)
}

/// Appends to `need` the stored indexes of the complete subtrees that make up the
/// leaves `[lo, hi)`, largest (leftmost) first.
pub(super) fn subtree_index(mut lo: u64, hi: u64, need: &mut Vec<u64>) {
    while lo < hi {
        let (k, level) = max_pow2(hi - lo + 1);
        need.push(stored_hash_index(level, lo >> level));
        lo += k;
    }
}

/// The hash of the leaves `[lo, hi)` from the front of `hashes` (what
/// [`subtree_index`] asked for); the rest is returned.
pub(super) fn subtree_hash(
    mut lo: u64,
    hi: u64,
    hashes: &[Hash],
) -> Result<(Hash, &[Hash]), TlogError> {
    let mut parts = 0;
    while lo < hi {
        let (k, _) = max_pow2(hi - lo + 1);
        parts += 1;
        lo += k;
    }
    if parts == 0 || hashes.len() < parts {
        return Err(TlogError::BadRequest(
            "too few hashes for a subtree".to_owned(),
        ));
    }
    let mut hash = hashes[parts - 1];
    for left in hashes[..parts - 1].iter().rev() {
        hash = node_hash(left, &hash);
    }
    Ok((hash, &hashes[parts..]))
}

/// The root of the tree of the first `n` leaves.
pub fn tree_hash(n: u64, reader: &mut dyn HashReader) -> Result<Hash, TlogError> {
    if n == 0 {
        return Ok(super::empty_root());
    }
    let mut indexes = Vec::new();
    subtree_index(0, n, &mut indexes);
    let hashes = reader.read_hashes(&indexes)?;
    Ok(subtree_hash(0, n, &hashes)?.0)
}

/// The right edge of a tree of `n` leaves: the roots of its complete subtrees,
/// largest first, with their stored indexes. Everything appending needs, so a
/// writer reads it once per batch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Frontier {
    size: u64,
    /// (level, hash), largest subtree first.
    edge: Vec<(u32, Hash)>,
}

impl Frontier {
    /// Reads the edge of the tree of `n` leaves.
    pub fn read(n: u64, reader: &mut dyn HashReader) -> Result<Frontier, TlogError> {
        let mut indexes = Vec::new();
        subtree_index(0, n, &mut indexes);
        let hashes = reader.read_hashes(&indexes)?;
        let edge = indexes
            .iter()
            .zip(hashes)
            .map(|(&index, hash)| (split_stored_hash_index(index).0, hash))
            .collect();
        Ok(Frontier { size: n, edge })
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    /// Appends one leaf: pushes onto `out` the hashes to store at indexes
    /// `stored_hash_count(size)` on (the leaf's, then each subtree it closes).
    pub fn append(&mut self, leaf: Hash, out: &mut Vec<Hash>) {
        out.push(leaf);
        let mut hash = leaf;
        let mut level = 0;
        while let Some(&(top, left)) = self.edge.last() {
            if top != level {
                break;
            }
            self.edge.pop();
            hash = node_hash(&left, &hash);
            level += 1;
            out.push(hash);
        }
        self.edge.push((level, hash));
        self.size += 1;
    }

    /// The root of the tree so far.
    pub fn root(&self) -> Hash {
        let mut parts = self.edge.iter().rev();
        let Some(&(_, mut hash)) = parts.next() else {
            return super::empty_root();
        };
        for (_, left) in parts {
            hash = node_hash(left, &hash);
        }
        hash
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_inverts_index() {
        for index in 0..5000u64 {
            let (level, n) = split_stored_hash_index(index);
            assert_eq!(stored_hash_index(level, n), index, "index {index}");
        }
    }

    #[test]
    fn counts_follow_appends() {
        let mut frontier = Frontier::default();
        let mut stored = Vec::new();
        for n in 0..300u64 {
            assert_eq!(stored.len() as u64, stored_hash_count(n));
            frontier.append(super::super::leaf_hash(&n.to_be_bytes()), &mut stored);
        }
    }
}
