//! The tree against RFC 6962's own recursive definitions (section 2.1), computed
//! the slow way from the leaves: roots, audit paths and consistency proofs for every
//! size and position up to a few dozen leaves, where every split of the recursion
//! occurs.

use super::proof::{check_record, check_tree, prove_record, prove_tree};
use super::stored::{Frontier, stored_hash_count, tree_hash};
use super::tree_head::TreeHead;
use super::{Hash, empty_root, leaf_hash, node_hash};

fn leaves(n: usize) -> Vec<Hash> {
    (0..n)
        .map(|i| leaf_hash(format!("record {i}").as_bytes()))
        .collect()
}

/// The largest power of two smaller than n.
fn split(n: usize) -> usize {
    let mut k = 1;
    while k * 2 < n {
        k *= 2;
    }
    k
}

fn mth(d: &[Hash]) -> Hash {
    match d.len() {
        0 => empty_root(),
        1 => d[0],
        n => {
            let k = split(n);
            node_hash(&mth(&d[..k]), &mth(&d[k..]))
        }
    }
}

fn path(m: usize, d: &[Hash]) -> Vec<Hash> {
    let n = d.len();
    if n == 1 {
        return Vec::new();
    }
    let k = split(n);
    if m < k {
        let mut p = path(m, &d[..k]);
        p.push(mth(&d[k..]));
        p
    } else {
        let mut p = path(m - k, &d[k..]);
        p.push(mth(&d[..k]));
        p
    }
}

fn subproof(m: usize, d: &[Hash], b: bool) -> Vec<Hash> {
    let n = d.len();
    if m == n {
        return if b { Vec::new() } else { vec![mth(d)] };
    }
    let k = split(n);
    if m <= k {
        let mut p = subproof(m, &d[..k], b);
        p.push(mth(&d[k..]));
        p
    } else {
        let mut p = subproof(m - k, &d[k..], false);
        p.push(mth(&d[..k]));
        p
    }
}

/// Builds the stored hashes of `d` by appending one leaf at a time.
fn stored(d: &[Hash]) -> Vec<Hash> {
    let mut frontier = Frontier::default();
    let mut out = Vec::new();
    for leaf in d {
        frontier.append(*leaf, &mut out);
        assert_eq!(frontier.root(), mth(&d[..frontier.size() as usize]));
    }
    out
}

#[test]
fn roots_paths_and_consistency_match_rfc_6962() {
    let d = leaves(70);
    let mut hashes = stored(&d);
    assert_eq!(hashes.len() as u64, stored_hash_count(70));
    for t in 1..=70usize {
        let root = mth(&d[..t]);
        assert_eq!(
            tree_hash(t as u64, &mut hashes).unwrap(),
            root,
            "root of {t}"
        );
        let frontier = Frontier::read(t as u64, &mut hashes).unwrap();
        assert_eq!(frontier.root(), root);
        for n in 0..t {
            let proof = prove_record(t as u64, n as u64, &mut hashes).unwrap();
            assert_eq!(proof, path(n, &d[..t]), "path {n} of {t}");
            check_record(&proof, t as u64, &root, n as u64, &d[n]).unwrap();
        }
        for m in 1..=t {
            let proof = prove_tree(t as u64, m as u64, &mut hashes).unwrap();
            assert_eq!(proof, subproof(m, &d[..t], true), "consistency {m} to {t}");
            check_tree(&proof, t as u64, &root, m as u64, &mth(&d[..m])).unwrap();
        }
    }
}

#[test]
fn altered_proofs_fail() {
    let d = leaves(37);
    let mut hashes = stored(&d);
    let root = mth(&d);
    let proof = prove_record(37, 12, &mut hashes).unwrap();
    // Every hash of the proof matters, and so do the position and the sizes.
    for i in 0..proof.len() {
        let mut bad = proof.clone();
        bad[i][0] ^= 1;
        assert!(check_record(&bad, 37, &root, 12, &d[12]).is_err());
    }
    assert!(check_record(&proof, 37, &root, 13, &d[12]).is_err());
    // Sizes whose tree has another shape at this leaf (36 or 64 would have the same shape: the size is bound only through the shape).
    assert!(check_record(&proof, 16, &root, 12, &d[12]).is_err());
    assert!(check_record(&proof[1..], 37, &root, 12, &d[12]).is_err());
    let mut longer = proof.clone();
    longer.push(root);
    assert!(check_record(&longer, 37, &root, 12, &d[12]).is_err());
    assert!(check_record(&proof, 37, &root, 37, &d[12]).is_err());

    let old = mth(&d[..20]);
    let proof = prove_tree(37, 20, &mut hashes).unwrap();
    check_tree(&proof, 37, &root, 20, &old).unwrap();
    for i in 0..proof.len() {
        let mut bad = proof.clone();
        bad[i][5] ^= 0x80;
        assert!(check_tree(&bad, 37, &root, 20, &old).is_err());
    }
    // A fork: another history of the same size is not consistent.
    let mut forked = d[..20].to_vec();
    forked[3] = leaf_hash(b"rewritten");
    assert!(check_tree(&proof, 37, &root, 20, &mth(&forked)).is_err());
    assert!(check_tree(&proof, 37, &root, 21, &old).is_err());
    assert!(check_tree(&[], 37, &root, 0, &old).is_err());
    assert!(check_tree(&[], 20, &old, 20, &old).is_ok());
    assert!(check_tree(&[], 20, &root, 20, &old).is_err());
}

#[test]
fn missing_stored_hashes_are_named() {
    let d = leaves(10);
    let mut hashes = stored(&d);
    hashes.truncate(5);
    assert!(matches!(
        prove_record(10, 9, &mut hashes),
        Err(super::TlogError::Missing { .. })
    ));
}

#[test]
fn tree_heads_round_trip_and_refuse_bad_text() {
    let head = TreeHead {
        origin: "web-1/eventgate/abc".into(),
        size: 12,
        root: leaf_hash(b"x"),
        extensions: vec!["node web-1".into(), "time 2026-01-01T00:00:00Z".into()],
    };
    let text = head.to_text();
    assert_eq!(TreeHead::parse(&text).unwrap(), head);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[1], "12");
    for bad in [
        "",
        "origin\n",
        "origin\n012\nAAAA\n",
        "origin\n-1\n47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=\n",
        "origin\n1\nnot base64\n",
        "origin\n1\nAAAA\n",
        "\n1\n47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=\n",
        "origin\n1\n47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=\n\nx\n",
        "origin\n1\n47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=",
    ] {
        assert!(TreeHead::parse(bad).is_err(), "{bad:?}");
    }
    assert!(TreeHead::parse("origin\n0\n47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=\n").is_ok());
}

#[test]
fn cosignatures_verify_and_refuse_changes() {
    use super::cosignature::{Checked, Cosigner, WitnessKey, cosignatures};
    let witness = Cosigner::generate("witness.example/w1").unwrap();
    let key = WitnessKey::from_text(&witness.witness_key().to_text()).unwrap();
    assert_eq!(key, witness.witness_key());
    let log = crate::note::Signer::generate("log.example/l").unwrap();
    let text = "log.example/l\n3\n47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=\n";
    let note = log.sign(text).unwrap() + &witness.cosign(text, 1_700_000_000);
    let super::cosignature::Cosignatures { good, bad } =
        cosignatures(&note, std::slice::from_ref(&key)).unwrap();
    assert_eq!(good, vec![("witness.example/w1".to_owned(), 1_700_000_000)]);
    assert!(bad.is_empty());
    // The log's own key still opens the note: the cosignature is a line it ignores.
    crate::note::open(&note, &[log.verifier()]).unwrap();
    // The same line on another text does not verify.
    let other = "log.example/l\n4\n47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=\n";
    let moved = log.sign(other).unwrap() + &witness.cosign(text, 1_700_000_000);
    let super::cosignature::Cosignatures { good, bad } =
        cosignatures(&moved, std::slice::from_ref(&key)).unwrap();
    assert!(good.is_empty());
    assert_eq!(bad, vec!["witness.example/w1".to_owned()]);
    // A log key is no witness key: the type byte differs.
    assert!(WitnessKey::from_text(&log.verifier().to_text()).is_err());
    let (_, lines) = crate::note::split(&note).unwrap();
    assert_eq!(key.check(text, &lines[0]), Checked::Other);
}

#[test]
fn a_witness_key_name_follows_the_rules_of_a_log_key_name() {
    use super::cosignature::Cosigner;
    for (name, problem) in [
        ("a+b", "'+'"),
        ("a b", "whitespace"),
        ("", "empty"),
        (&"n".repeat(257), "256 bytes"),
    ] {
        let error = Cosigner::generate(name).unwrap_err().to_string();
        assert!(error.contains(problem), "{name:?}: {error}");
    }
}
