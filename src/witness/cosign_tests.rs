//! One witness in process, from request bytes to cosignature: what is cosigned
//! verifies with the witness's key and is recorded; each refusal leaves the record
//! as it was; forks signed by the log are kept as evidence.

use super::*;
use crate::note::Signer;
use crate::tlog::cosignature::{WitnessKey, cosignatures};
use crate::tlog::proof::prove_tree;
use crate::tlog::stored::Frontier;
use crate::tlog::tree_head::TreeHead;
use crate::tlog::{Hash, leaf_hash};

const ORIGIN: &str = "web-1/eventgate/0a1b2c3d4e5f60718293a4b5c6d7e8f9";
const NOW: u64 = 1_780_000_000;

struct Fixture {
    _dir: tempfile::TempDir,
    witness: Witness,
    key: WitnessKey,
    log: Signer,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let log = Signer::from_seed("audit.example.com/web-1", &[5; 32]);
    let rotated = Signer::from_seed("audit.example.com/web-1-2026", &[6; 32]);
    let cosigner = Cosigner::generate("witness.example.com/w1").unwrap();
    let key = cosigner.witness_key();
    let logs = vec![Log {
        origin: ORIGIN.to_owned(),
        keys: vec![log.verifier(), rotated.verifier()],
    }];
    let state = State::open(&dir.path().join("witness.db")).unwrap();
    Fixture {
        _dir: dir,
        witness: Witness::new(cosigner, logs, state),
        key,
        log,
    }
}

/// The first `n` leaves of the log named `tag`: root and stored hashes.
fn tree(tag: &str, n: u64) -> (Hash, Vec<Hash>) {
    let mut frontier = Frontier::default();
    let mut stored = Vec::new();
    for i in 0..n {
        frontier.append(leaf_hash(format!("{tag} {i}").as_bytes()), &mut stored);
    }
    (frontier.root(), stored)
}

fn note(signer: &Signer, origin: &str, size: u64, root: &Hash) -> String {
    let head = TreeHead {
        origin: origin.to_owned(),
        size,
        root: *root,
        extensions: vec!["node web-1".into()],
    };
    signer.sign(&head.to_text()).unwrap()
}

fn status(result: &Result<String, AddError>) -> u16 {
    match result {
        Ok(_) => 200,
        Err(AddError::Refused(refusal)) => refusal.status(),
        Err(AddError::State(error)) => panic!("state error: {error}"),
    }
}

impl Fixture {
    fn submit(&self, old: u64, proof: &[Hash], note: &str) -> Result<String, AddError> {
        let body = protocol::request_body(old, proof, note);
        self.witness.add_checkpoint(body.as_bytes(), NOW)
    }

    fn recorded(&self) -> Option<u64> {
        self.witness.state().head(ORIGIN).unwrap().map(|h| h.size)
    }
}

#[test]
fn consistent_checkpoints_are_cosigned_and_recorded() {
    let f = fixture();
    let (root5, _) = tree("a", 5);
    let first = note(&f.log, ORIGIN, 5, &root5);
    let lines = f.submit(0, &[], &first).unwrap();
    // The answer is the witness's cosignature line, and it verifies on the note.
    assert_eq!(lines.lines().count(), 1, "{lines}");
    let crate::tlog::cosignature::Cosignatures { good, bad } =
        cosignatures(&format!("{first}{lines}"), std::slice::from_ref(&f.key)).unwrap();
    assert_eq!(good, vec![(f.key.name().to_owned(), NOW)]);
    assert!(bad.is_empty());
    assert_eq!(f.recorded(), Some(5));

    let (root9, mut stored9) = tree("a", 9);
    let proof = prove_tree(9, 5, &mut stored9).unwrap();
    let second = note(&f.log, ORIGIN, 9, &root9);
    let lines = f.submit(5, &proof, &second).unwrap();
    let crate::tlog::cosignature::Cosignatures { good, .. } =
        cosignatures(&format!("{second}{lines}"), std::slice::from_ref(&f.key)).unwrap();
    assert_eq!(good.len(), 1);
    let head = f.witness.state().head(ORIGIN).unwrap().unwrap();
    assert_eq!(
        (head.size, head.root, head.note, head.cosigned_at),
        (9, root9, second, NOW)
    );

    // Signed with the rotated key the log also has: accepted the same.
    let rotated = Signer::from_seed("audit.example.com/web-1-2026", &[6; 32]);
    assert_eq!(
        status(&f.submit(9, &[], &note(&rotated, ORIGIN, 9, &root9))),
        200
    );
}

#[test]
fn refusals_leave_the_recorded_head_as_it_was() {
    let f = fixture();
    let (root5, _) = tree("a", 5);
    f.submit(0, &[], &note(&f.log, ORIGIN, 5, &root5)).unwrap();
    let recorded = f.witness.state().head(ORIGIN).unwrap();

    let stranger = Signer::from_seed("audit.example.com/web-1", &[8; 32]);
    let (root9, mut stored9) = tree("a", 9);
    let proof = prove_tree(9, 5, &mut stored9).unwrap();
    let good = note(&f.log, ORIGIN, 9, &root9);
    // The text changed after signing: a bad signature by a known key.
    let tampered = good.replacen("node web-1", "node web-2", 1);
    let (fork_root, mut fork_stored) = tree("b", 9);
    let fork_proof = prove_tree(9, 5, &mut fork_stored).unwrap();
    let cases: Vec<(u64, Vec<Hash>, String, u16)> = vec![
        (
            5,
            proof.clone(),
            note(&f.log, "other/origin", 9, &root9),
            404,
        ),
        (5, proof.clone(), note(&stranger, ORIGIN, 9, &root9), 403),
        (5, proof.clone(), tampered, 403),
        (0, vec![], good.clone(), 409),
        (7, proof.clone(), good.clone(), 409),
        (9, vec![], note(&f.log, ORIGIN, 5, &root5), 400),
        (5, fork_proof, note(&f.log, ORIGIN, 9, &fork_root), 422),
        (5, vec![], note(&f.log, ORIGIN, 5, &tree("b", 5).0), 409),
    ];
    for (old, proof, note, expected) in cases {
        let result = f.submit(old, &proof, &note);
        assert_eq!(status(&result), expected, "{note}: {result:?}");
        assert_eq!(f.witness.state().head(ORIGIN).unwrap(), recorded);
    }
    // Malformed: 400, and nothing recorded either.
    let result = f.witness.add_checkpoint(b"old 5\n\nnot a note", NOW);
    assert_eq!(status(&result), 400);
    // The two forks, and only they, were kept as evidence.
    assert_eq!(f.witness.state().forks(ORIGIN).unwrap(), 2);
    // What was refused changes nothing for the right next checkpoint.
    assert_eq!(status(&f.submit(5, &proof, &good)), 200);
    assert_eq!(f.recorded(), Some(9));
}
