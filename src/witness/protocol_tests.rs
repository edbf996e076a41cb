//! The request as a witness parses it (every malformed shape refused with a message
//! naming what is wrong), the judgement against a recorded head with the status
//! code the spec gives each case, and the answers as a log reads them.

use super::*;
use crate::note::Signer;
use crate::tlog::leaf_hash;
use crate::tlog::proof::prove_tree;
use crate::tlog::stored::Frontier;

const ORIGIN: &str = "web-1/eventgate/5f0c1b8e2d6a4c3f9e7b1a2d3c4e5f60";

/// A log of `n` leaves kept in memory: its stored hashes and its root.
struct Tree {
    frontier: Frontier,
    stored: Vec<Hash>,
}

impl Tree {
    fn new(tag: &str, n: u64) -> Tree {
        let mut tree = Tree {
            frontier: Frontier::default(),
            stored: Vec::new(),
        };
        for i in 0..n {
            tree.frontier
                .append(leaf_hash(format!("{tag} {i}").as_bytes()), &mut tree.stored);
        }
        tree
    }

    fn root(&self) -> Hash {
        self.frontier.root()
    }

    fn proof(&mut self, old: u64) -> Vec<Hash> {
        prove_tree(self.frontier.size(), old, &mut self.stored).unwrap()
    }
}

fn signer() -> Signer {
    Signer::from_seed("log.example/a", &[3; 32])
}

fn checkpoint(size: u64, root: &Hash) -> String {
    let head = TreeHead {
        origin: ORIGIN.into(),
        size,
        root: *root,
        extensions: vec!["node web-1".into()],
    };
    signer().sign(&head.to_text()).unwrap()
}

fn request(old: u64, proof: &[Hash], size: u64, root: &Hash) -> AddCheckpoint {
    parse_request(request_body(old, proof, &checkpoint(size, root)).as_bytes()).unwrap()
}

#[test]
fn a_request_written_by_the_log_parses_back_as_written() {
    let mut tree = Tree::new("a", 13);
    let proof = tree.proof(5);
    let note = checkpoint(13, &tree.root());
    let body = request_body(5, &proof, &note);
    assert!(body.starts_with("old 5\n"), "{body}");
    let parsed = parse_request(body.as_bytes()).unwrap();
    assert_eq!(parsed.old, 5);
    assert_eq!(parsed.proof, proof);
    assert_eq!(parsed.note, note);
    assert_eq!(parsed.head.origin, ORIGIN);
    assert_eq!(parsed.head.size, 13);
    assert_eq!(parsed.head.root, tree.root());
    assert!(note.starts_with(&parsed.text));
    assert_eq!(parsed.text, parsed.head.to_text());

    // The spec's example shape: no proof from size 0, and the largest proof allowed.
    let first = parse_request(request_body(0, &[], &note).as_bytes()).unwrap();
    assert!(first.proof.is_empty());
    let many = vec![[7u8; 32]; MAX_PROOF_LINES];
    assert_eq!(
        parse_request(request_body(1, &many, &note).as_bytes())
            .unwrap()
            .proof
            .len(),
        MAX_PROOF_LINES
    );
}

#[test]
fn every_malformed_shape_is_refused_naming_what_is_wrong() {
    let root = [9u8; 32];
    let note = checkpoint(10, &root);
    let hash = encode_hash(&[1; 32]);
    let sixty_four: String = (0..64).map(|_| format!("{hash}\n")).collect();
    let huge_size = checkpoint(u64::MAX, &root);
    let unsigned = TreeHead {
        origin: ORIGIN.into(),
        size: 10,
        root,
        extensions: vec![],
    }
    .to_text();
    let bad_text = signer().sign(&format!("{ORIGIN}\nten\n{hash}\n")).unwrap();
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (vec![b'a'; MAX_BODY_BYTES + 1], "more than the 65536"),
        (b"old 1\n\xff\n\n".to_vec(), "not UTF-8"),
        // Without its empty line, the checkpoint's first lines are read as hashes.
        (
            format!("old 0\n{note}").into_bytes(),
            "line 2, a consistency proof hash",
        ),
        (format!("old 0\n{hash}").into_bytes(), "no empty line"),
        (
            format!("new 5\n\n{note}").into_bytes(),
            "line 1 must be `old SIZE`",
        ),
        (
            format!("old\n\n{note}").into_bytes(),
            "line 1 must be `old SIZE`",
        ),
        (
            format!("\n\n{note}").into_bytes(),
            "line 1 must be `old SIZE`",
        ),
        (format!("old 05\n\n{note}").into_bytes(), "leading zeros"),
        (
            format!("old -1\n\n{note}").into_bytes(),
            "line 1, the old size",
        ),
        (
            format!("old 5\r\n\n{note}").into_bytes(),
            "line 1, the old size",
        ),
        (
            format!("old  5\n\n{note}").into_bytes(),
            "line 1, the old size",
        ),
        (
            format!("old 18446744073709551616\n\n{note}").into_bytes(),
            "line 1, the old size",
        ),
        (
            format!("old 9223372036854775808\n\n{note}").into_bytes(),
            "2^63-1",
        ),
        (
            format!("old 5\n{sixty_four}\n{note}").into_bytes(),
            "64 consistency proof lines, more than the 63",
        ),
        (
            format!("old 5\n{hash}\nnot base64!\n\n{note}").into_bytes(),
            "line 3, a consistency proof hash",
        ),
        (
            format!(
                "old 5\n{}\n\n{note}",
                encode_hash(&[1; 32])[..40].to_owned() + "AA=="
            )
            .into_bytes(),
            "line 2, a consistency proof hash",
        ),
        (
            format!("old 0\n{hash}\n\n{note}").into_bytes(),
            "the proof from the empty tree is empty",
        ),
        (
            format!("old 0\n\n{unsigned}").into_bytes(),
            "not a signed note",
        ),
        (
            format!("old 0\n\n{unsigned}\n\u{2014} log.example/a\n").into_bytes(),
            "not a signed note",
        ),
        (
            format!("old 0\n\n{}", note.trim_end_matches('\n')).into_bytes(),
            "not a signed note",
        ),
        (
            format!("old 0\n\n{bad_text}").into_bytes(),
            "the checkpoint's text is not a tree head: line 2",
        ),
        (
            format!("old 0\n\n{huge_size}").into_bytes(),
            "the checkpoint's size 18446744073709551615",
        ),
    ];
    for (body, expected) in cases {
        let shown = String::from_utf8_lossy(&body[..body.len().min(120)]).into_owned();
        match parse_request(&body) {
            Ok(parsed) => panic!("{shown:?} parsed: {parsed:?}"),
            Err(Malformed(message)) => {
                assert!(message.contains(expected), "{shown:?}: {message}");
                // Every malformed request is a 400.
                assert_eq!(Refusal::BadRequest(message).status(), 400);
            }
        }
    }
}

/// The outcome of judging as a status code, with the 409's body.
fn verdict(recorded: Option<(u64, &Hash)>, request: &AddCheckpoint) -> (u16, Option<u64>) {
    match judge(recorded, request) {
        Ok(()) => (200, None),
        Err(Refusal::Conflict { recorded, .. }) => (409, Some(recorded)),
        Err(other) => (other.status(), None),
    }
}

#[test]
fn each_case_of_the_spec_gets_its_status_code() {
    let mut tree = Tree::new("a", 8);
    let root8 = tree.root();
    let root5 = Tree::new("a", 5).root();
    let root3 = Tree::new("a", 3).root();
    let proof_5_8 = tree.proof(5);
    let mut other = Tree::new("b", 8);
    let other_proof = other.proof(5);

    // Nothing recorded: a first checkpoint with old 0 is cosigned, any other old size
    // is a conflict naming 0.
    assert_eq!(verdict(None, &request(0, &[], 5, &root5)), (200, None));
    assert_eq!(
        verdict(None, &request(3, &[[0; 32]], 5, &root5)),
        (409, Some(0))
    );

    let recorded = Some((5, &root5));
    // A first checkpoint again, once one is recorded: 409 with the recorded size.
    assert_eq!(
        verdict(recorded, &request(0, &[], 8, &root8)),
        (409, Some(5))
    );
    // Extending the recorded tree with the right proof: cosigned.
    assert_eq!(
        verdict(recorded, &request(5, &proof_5_8, 8, &root8)),
        (200, None)
    );
    // A stale old size (the log lost track): 409 with the recorded size.
    assert_eq!(
        verdict(recorded, &request(3, &[], 8, &root8)),
        (409, Some(5))
    );
    // Old past the checkpoint's size: 400, before anything is compared.
    assert_eq!(verdict(recorded, &request(5, &[], 3, &root3)), (400, None));
    assert_eq!(verdict(None, &request(9, &[], 8, &root8)), (400, None));
    // A rollback to an older tree head, sent with its own old size: 409.
    assert_eq!(
        verdict(recorded, &request(3, &[], 3, &root3)),
        (409, Some(5))
    );
    // The same tree head again: cosigned again, with an empty proof only.
    assert_eq!(verdict(recorded, &request(5, &[], 5, &root5)), (200, None));
    assert_eq!(
        verdict(recorded, &request(5, &[root3], 5, &root5)),
        (422, None)
    );
    // Another root for the recorded size: 409, and it is a fork.
    let fork = request(5, &[], 5, &Tree::new("b", 5).root());
    assert_eq!(verdict(recorded, &fork), (409, Some(5)));
    assert!(judge(recorded, &fork).unwrap_err().is_fork());
    // A bigger tree that does not extend the recorded one, with its own valid proof
    // from its own 5 leaves: 422, a fork.
    let forked = request(5, &other_proof, 8, &other.root());
    assert_eq!(verdict(recorded, &forked), (422, None));
    assert!(judge(recorded, &forked).unwrap_err().is_fork());
    // The right tree with a wrong or truncated proof: 422.
    assert_eq!(
        verdict(recorded, &request(5, &other_proof, 8, &root8)),
        (422, None)
    );
    assert_eq!(
        verdict(recorded, &request(5, &proof_5_8[1..], 8, &root8)),
        (422, None)
    );
    // A stale old size is never a fork: only a conflict.
    assert!(
        !judge(recorded, &request(0, &[], 8, &root8))
            .unwrap_err()
            .is_fork()
    );

    // The empty tree: its root is SHA-256(""), and nothing else.
    let empty = empty_root();
    assert_eq!(verdict(None, &request(0, &[], 0, &empty)), (200, None));
    assert_eq!(
        verdict(Some((0, &empty)), &request(0, &[], 0, &empty)),
        (200, None)
    );
    assert_eq!(
        verdict(Some((0, &empty)), &request(0, &[], 5, &root5)),
        (200, None)
    );
    assert_eq!(verdict(None, &request(0, &[], 0, &root5)), (422, None));
}

#[test]
fn a_stale_old_size_is_a_conflict_naming_the_recorded_size() {
    let root5 = Tree::new("a", 5).root();
    let root8 = Tree::new("a", 8).root();
    assert_eq!(
        verdict(Some((5, &root5)), &request(3, &[[1; 32]], 8, &root8)),
        (409, Some(5))
    );
}

#[test]
fn a_log_reads_the_witness_answers() {
    assert_eq!(parse_size_body(b"20852014\n"), Ok(20852014));
    assert_eq!(parse_size_body(b"0\n"), Ok(0));
    for bad in [
        &b"12"[..],
        b"012\n",
        b"-1\n",
        b"",
        b"\n",
        b"1 2\n",
        b"\xff\n",
    ] {
        assert!(parse_size_body(bad).is_err(), "{bad:?}");
    }

    let line = "\u{2014} witness.example/w1 CMp+6LWBU0anHGH5aNDTJkH/gj79sG+T6+iP2ThYN5k=";
    assert_eq!(
        parse_cosignatures(format!("{line}\n{line}\n").as_bytes()),
        Ok(vec![line.to_owned(), line.to_owned()])
    );
    let too_many: String = (0..=MAX_COSIGNATURE_LINES)
        .map(|_| format!("{line}\n"))
        .collect();
    for (bad, expected) in [
        (String::new(), "empty"),
        (line.to_owned(), "does not end in a newline"),
        (format!("{line}\n\n"), "line 2 is not a signature line"),
        ("- w sig\n".to_owned(), "line 1 is not a signature line"),
        ("\u{2014} w\n".to_owned(), "line 1 is not"),
        ("\u{2014}  sig\n".to_owned(), "line 1 is not"),
        (format!("{line}\r\n"), "line 1 is not"),
        (too_many, "more than the 16"),
    ] {
        let error = parse_cosignatures(bad.as_bytes()).unwrap_err();
        assert!(error.contains(expected), "{bad:?}: {error}");
    }
}

/// The fuzz target's seeds are made by tests/fuzz/make_seeds.py with RFC 6962's
/// recursive definitions written again in Python: the trees and proofs it made are
/// judged consistent here, so both sides agree on what a proof is.
#[test]
fn proofs_made_by_another_implementation_are_judged_consistent() {
    let seed = |name: &str| {
        let path = format!(
            "{}/tests/fuzz/seeds/witness/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        parse_request(&std::fs::read(&path).unwrap()).unwrap()
    };
    let (first, proof, same) = (seed("first"), seed("proof"), seed("same"));
    assert_eq!(
        (first.head.size, proof.head.size, same.head.size),
        (5, 13, 13)
    );
    assert_eq!(judge(None, &first), Ok(()));
    assert_eq!(judge(Some((5, &first.head.root)), &proof), Ok(()));
    assert_eq!(judge(Some((13, &proof.head.root)), &same), Ok(()));
    // Our tree of the same leaves has the same roots.
    let mut frontier = Frontier::default();
    let mut stored = Vec::new();
    for i in 0..13 {
        frontier.append(leaf_hash(format!("row {i}").as_bytes()), &mut stored);
        if frontier.size() == 5 {
            assert_eq!(frontier.root(), first.head.root);
        }
    }
    assert_eq!(frontier.root(), proof.head.root);
    assert_eq!(prove_tree(13, 5, &mut stored).unwrap(), proof.proof);
}
