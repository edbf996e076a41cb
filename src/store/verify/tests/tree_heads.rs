//! Verification against version 2 checkpoints (signed tree heads): the Merkle tree,
//! retention against the signed policy, a replaced store, witnesses and time. Each
//! attack is made as a node's root would make it, on a store written by the real
//! writer and pruned by the real retention.

use std::path::Path;
use std::time::{Duration, SystemTime};

use rusqlite::Connection;

use super::*;
use crate::note::{Signer, Verifier};
use crate::store::checkpoint::{self, Checkpoint, TreeFacts, note_hash};
use crate::store::retention::{Policy, prune_step};
use crate::store::verify::checkpoints::{Verified, verify_checkpoints};
use crate::store::verify::shipped;
use crate::store::verify::witnessed::Options;
use crate::tlog::cosignature::Cosigner;

/// A version 2 checkpoint of the store's head now, as the gateway signs it.
fn sign(
    path: &Path,
    signer: &Signer,
    prev: Option<&str>,
    retention: Option<Policy>,
    time: SystemTime,
) -> String {
    let conn = Connection::open(path).unwrap();
    let head = checkpoint::head(&conn).unwrap();
    let (first_row_id, size, root) = head.tree.expect("a tree");
    let text = Checkpoint {
        node: "node-1".into(),
        store: head.store,
        row_id: head.row_id,
        seq: head.seq,
        hash: head.hash,
        pruned_rows: head.pruned_rows,
        time,
        prev: prev.map(note_hash),
        tree: Some(TreeFacts {
            forwarder: "audit".into(),
            size,
            root,
            first_row_id,
            pruned_row_id: head.pruned_row_id,
            pruned_hash: head.pruned_hash,
            retention,
        }),
    }
    .to_text();
    signer.sign(&text).unwrap()
}

fn ago(seconds: u64) -> SystemTime {
    SystemTime::now() - Duration::from_secs(seconds)
}

/// Events received `received_ago` seconds ago.
fn write_received(path: &Path, seqs: std::ops::RangeInclusive<u64>, received_ago: u64) {
    let events: Vec<Event> = seqs
        .map(|seq| {
            testing::event(seq)
                .at(T0 + seq as i64)
                .received_at(ago(received_ago))
                .node("node-1")
                .json(
                    "containerd.events.TaskExit",
                    r#"{"container_id":"c","exit_status":1}"#,
                )
                .build()
        })
        .collect();
    testing::insert(path, &events);
}

fn run(path: &Path, notes: &[String], keys: &[Verifier], options: &Options) -> Verified {
    let shipped = shipped::read(notes.join("\n").as_bytes(), "notes.txt", keys).unwrap();
    verify_checkpoints(path, &[], shipped, options).unwrap()
}

fn verdict(path: &Path, notes: &[String], keys: &[Verifier], options: &Options) -> Option<Problem> {
    run(path, notes, keys, options).report.problem
}

/// Ten rows with a checkpoint after 5 and after 10, retention as given.
fn signed(signer: &Signer, retention: Option<Policy>) -> (TempStore, Vec<String>) {
    let store = TempStore::new();
    write_received(store.path(), 1..=5, 7200);
    let first = sign(store.path(), signer, None, retention, ago(3600));
    write_received(store.path(), 6..=10, 1800);
    let second = sign(store.path(), signer, Some(&first), retention, ago(1800));
    (store, vec![first, second])
}

#[test]
fn an_untouched_store_matches_every_signed_tree_head() {
    let signer = Signer::generate("node-1").unwrap();
    let (store, notes) = signed(&signer, None);
    let verified = run(
        store.path(),
        &notes,
        &[signer.verifier()],
        &Options::default(),
    );
    assert_eq!(verified.report.problem, None);
    assert_eq!(verified.tree.roots, 2);
    assert_eq!(verified.tree.leaves, 10);
}

#[test]
fn an_edited_tree_table_is_caught() {
    let signer = Signer::generate("node-1").unwrap();
    let (store, notes) = signed(&signer, None);
    // One stored hash changed: a leaf's.
    sql(
        store.path(),
        "UPDATE audit_tree_hashes SET hashes = CAST(zeroblob(32) || substr(hashes, 33) AS BLOB) WHERE chunk = 0",
    );
    let problem = verdict(
        store.path(),
        &notes,
        &[signer.verifier()],
        &Options::default(),
    )
    .unwrap();
    assert_eq!(problem.kind, Kind::TreeTable, "{problem}");
    assert!(
        problem.to_string().contains("the leaf of row_id 1"),
        "{problem}"
    );
    // The chunk turned into text: the same, not an error reading it.
    sql(
        store.path(),
        "UPDATE audit_tree_hashes SET hashes = 'x' WHERE chunk = 0",
    );
    let problem = verdict(
        store.path(),
        &notes,
        &[signer.verifier()],
        &Options::default(),
    )
    .unwrap();
    assert_eq!(problem.kind, Kind::TreeTable, "{problem}");
}

#[test]
fn retention_faked_without_a_policy_is_caught() {
    let signer = Signer::generate("node-1").unwrap();
    let (store, notes) = signed(&signer, None);
    // What retention would do: the oldest rows gone, audit_chain's pruned_* set.
    prune(store.path(), 3);
    // Keyless, and against checkpoints that cannot say what was allowed, it passes.
    intact(store.path());
    let problem = verdict(
        store.path(),
        &notes,
        &[signer.verifier()],
        &Options::default(),
    )
    .unwrap();
    assert_eq!(problem.kind, Kind::Retention, "{problem}");
    assert!(
        problem.to_string().contains("which says retention none"),
        "{problem}"
    );
    // A checkpoint signed after it (the gateway kept running) says so too.
    let after = sign(store.path(), &signer, Some(&notes[1]), None, ago(60));
    let problem = verdict(
        store.path(),
        &[notes[0].clone(), notes[1].clone(), after],
        &[signer.verifier()],
        &Options::default(),
    )
    .unwrap();
    assert_eq!(problem.kind, Kind::Retention, "{problem}");
}

#[test]
fn retention_within_its_signed_policy_verifies_and_beyond_it_does_not() {
    let signer = Signer::generate("node-1").unwrap();
    let keep = Policy {
        max_age: None,
        max_rows: Some(6),
    };
    let (store, mut notes) = signed(&signer, Some(keep));
    let mut conn = Connection::open(store.path()).unwrap();
    let step = prune_step(&mut conn, &keep, 10, SystemTime::now(), 100).unwrap();
    assert_eq!(step.deleted, 4);
    notes.push(sign(
        store.path(),
        &signer,
        Some(&notes[1]),
        Some(keep),
        ago(10),
    ));
    let verified = run(
        store.path(),
        &notes,
        &[signer.verifier()],
        &Options::default(),
    );
    assert_eq!(verified.report.problem, None);
    // The heads in the deleted prefix are checked from the hashes retention kept.
    assert_eq!(verified.tree.roots, 3);

    // Deleting more than the policy keeps, with retention's own code: caught.
    let more = Policy {
        max_age: None,
        max_rows: Some(2),
    };
    prune_step(&mut conn, &more, 6, SystemTime::now(), 100).unwrap();
    let problem = verdict(
        store.path(),
        &notes,
        &[signer.verifier()],
        &Options::default(),
    )
    .unwrap();
    assert_eq!(problem.kind, Kind::Retention, "{problem}");
    assert!(problem.to_string().contains("max_rows=6"), "{problem}");
}

#[test]
fn retention_by_age_is_judged_by_the_boundary_rows_proven_received_time() {
    let signer = Signer::generate("node-1").unwrap();
    let hour = Policy {
        max_age: Some(Duration::from_secs(3600)),
        max_rows: None,
    };
    let (store, mut notes) = signed(&signer, Some(hour));
    let mut conn = Connection::open(store.path()).unwrap();
    // Rows 1-5 were received two hours ago: an hour's policy deletes them.
    let step = prune_step(&mut conn, &hour, 10, SystemTime::now(), 100).unwrap();
    assert_eq!(step.deleted, 5);
    notes.push(sign(
        store.path(),
        &signer,
        Some(&notes[1]),
        Some(hour),
        ago(5),
    ));
    assert_eq!(
        verdict(
            store.path(),
            &notes,
            &[signer.verifier()],
            &Options::default()
        ),
        None
    );

    // Rows 6-10 are half an hour old: deleting them is more than the policy allows,
    // even with audit_chain looking as retention leaves it.
    let ten_minutes = Policy {
        max_age: Some(Duration::from_secs(600)),
        max_rows: None,
    };
    prune_step(&mut conn, &ten_minutes, 5, SystemTime::now(), 100).unwrap();
    let problem = verdict(
        store.path(),
        &notes,
        &[signer.verifier()],
        &Options::default(),
    )
    .unwrap();
    assert_eq!(problem.kind, Kind::Retention, "{problem}");
    assert!(problem.to_string().contains("max_age=3600s"), "{problem}");

    // Passing off another row's record as the boundary's is caught by its proof.
    sql(
        store.path(),
        "UPDATE audit_chain SET pruned_record = x'00' WHERE id = 1",
    );
    let problem = verdict(
        store.path(),
        &notes,
        &[signer.verifier()],
        &Options::default(),
    )
    .unwrap();
    assert!(
        problem
            .to_string()
            .contains("pruned_record is not the record"),
        "{problem}"
    );
}

#[test]
fn a_replaced_store_is_caught_and_the_old_one_shows_its_successor() {
    let signer = Signer::generate("node-1").unwrap();
    let (old, mut notes) = signed(&signer, None);
    // The store deleted and made anew: a new store id, the same node and forwarder.
    let new = TempStore::new();
    write_received(new.path(), 1..=3, 10);
    notes.push(sign(new.path(), &signer, None, None, SystemTime::now()));
    let problem = verdict(
        new.path(),
        &notes,
        &[signer.verifier()],
        &Options::default(),
    )
    .unwrap();
    assert_eq!(problem.kind, Kind::Replaced, "{problem}");
    assert!(
        problem.to_string().contains("2 checkpoints of store"),
        "{problem}"
    );
    // With only the old store's checkpoints (the new one signed nothing yet): the
    // same verdict, not "cannot verify".
    let problem = verdict(
        new.path(),
        &notes[..2],
        &[signer.verifier()],
        &Options::default(),
    );
    assert_eq!(problem.map(|p| p.kind), Some(Kind::Replaced));
    // The old store itself is intact, and succeeded.
    let verified = run(
        old.path(),
        &notes,
        &[signer.verifier()],
        &Options::default(),
    );
    assert_eq!(verified.report.problem, None);
    assert!(verified.succeeded_by.is_some());
}

#[test]
fn witnesses_time_and_age() {
    let signer = Signer::generate("node-1").unwrap();
    let witness = Cosigner::generate("witness.example/w1").unwrap();
    let (store, notes) = signed(&signer, None);
    let cosign = |note: &str, at: SystemTime| {
        let text = &note[..=note.rfind("\n\n").unwrap()];
        let secs = at.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs();
        format!("{note}{}", witness.cosign(text, secs))
    };
    let witnessed = Options {
        witnesses: vec![witness.witness_key()],
        min_witnesses: 1,
        ..Options::default()
    };
    // Not cosigned: refused.
    let problem = verdict(store.path(), &notes, &[signer.verifier()], &witnessed).unwrap();
    assert_eq!(problem.kind, Kind::NotWitnessed, "{problem}");
    // Cosigned as the gateway sends it, right after signing.
    let cosigned = vec![notes[0].clone(), cosign(&notes[1], ago(1795))];
    let verified = run(store.path(), &cosigned, &[signer.verifier()], &witnessed);
    assert_eq!(verified.report.problem, None);
    assert_eq!(verified.witnessed.witnessed, 1);
    // A checkpoint whose own time is an hour before its cosignature: back-dated.
    let late = vec![notes[0].clone(), cosign(&notes[1], ago(10))];
    let problem = verdict(store.path(), &late, &[signer.verifier()], &witnessed).unwrap();
    assert_eq!(problem.kind, Kind::BackDated, "{problem}");
    // A cosignature altered after the fact: forged.
    let mut altered = cosign(&notes[1], ago(1795));
    // Inside the signature, past the key id and the time.
    let at = altered.rfind(' ').unwrap() + 30;
    altered.replace_range(
        at..at + 1,
        if &altered[at..at + 1] == "A" {
            "B"
        } else {
            "A"
        },
    );
    let problem = verdict(
        store.path(),
        &[notes[0].clone(), altered],
        &[signer.verifier()],
        &witnessed,
    )
    .unwrap();
    assert_eq!(problem.kind, Kind::Forged, "{problem}");
    // The newest cosigned half an hour ago, and --max-age 10m: stale.
    let stale = Options {
        max_age: Some(Duration::from_secs(600)),
        ..witnessed.clone()
    };
    let problem = verdict(store.path(), &cosigned, &[signer.verifier()], &stale).unwrap();
    assert_eq!(problem.kind, Kind::Stale, "{problem}");
    let fresh = Options {
        max_age: Some(Duration::from_secs(3600)),
        ..witnessed
    };
    assert_eq!(
        verdict(store.path(), &cosigned, &[signer.verifier()], &fresh),
        None
    );
}

#[test]
fn a_replaced_signing_key_is_caught() {
    let signer = Signer::generate("node-1").unwrap();
    let (store, mut notes) = signed(&signer, None);
    // Root made a key of the same name and signs with it from now on.
    let impostor = Signer::generate("node-1").unwrap();
    write_received(store.path(), 11..=12, 5);
    notes.push(sign(store.path(), &impostor, Some(&notes[1]), None, ago(1)));
    let problem = verdict(
        store.path(),
        &notes,
        &[signer.verifier()],
        &Options::default(),
    )
    .unwrap();
    assert_eq!(problem.kind, Kind::Forged, "{problem}");
    assert!(
        problem.to_string().contains("the signing key was replaced"),
        "{problem}"
    );
}

#[test]
fn a_fork_signed_with_the_key_is_caught() {
    let signer = Signer::generate("node-1").unwrap();
    let (store, mut notes) = signed(&signer, None);
    // Another history of the same size, signed with the real key: a tree head the
    // store does not hold.
    let text = notes[1][..=notes[1].rfind("\n\n").unwrap()].to_owned();
    let mut lines: Vec<&str> = text.lines().collect();
    let forked_root = crate::tlog::tree_head::encode_hash(&[7; 32]);
    lines[2] = &forked_root;
    let forked = signer.sign(&(lines.join("\n") + "\n")).unwrap();
    notes.push(forked);
    let problem = verdict(
        store.path(),
        &notes,
        &[signer.verifier()],
        &Options::default(),
    )
    .unwrap();
    assert_eq!(problem.kind, Kind::Rewritten, "{problem}");
    assert!(
        problem
            .to_string()
            .contains("the store's tree of 10 leaves has root"),
        "{problem}"
    );
}

/// A store as version 13 left it: rows, the chain and version 1 checkpoints, no tree.
fn as_version_13(path: &Path) {
    sql(
        path,
        "DROP TABLE audit_tree; DROP TABLE audit_tree_hashes; \
         ALTER TABLE audit_chain DROP COLUMN pruned_record; PRAGMA user_version = 13;",
    );
}

#[test]
fn a_store_of_version_13_gains_its_tree_and_its_old_checkpoints_still_verify() {
    let signer = Signer::generate("node-1").unwrap();
    let store = TempStore::new();
    let v1 = |path: &Path, prev: Option<&str>| {
        let conn = Connection::open(path).unwrap();
        let head = checkpoint::head(&conn).unwrap();
        let text = Checkpoint {
            node: "node-1".into(),
            store: head.store,
            row_id: head.row_id,
            seq: head.seq,
            hash: head.hash,
            pruned_rows: head.pruned_rows,
            time: ago(7200 - head.row_id.unsigned_abs()),
            prev: prev.map(note_hash),
            tree: None,
        }
        .to_text();
        signer.sign(&text).unwrap()
    };
    write_received(store.path(), 1..=150, 9000);
    let first = v1(store.path(), None);
    write_received(store.path(), 151..=300, 8000);
    let second = v1(store.path(), Some(&first));
    as_version_13(store.path());

    // The writer's first open migrates and fills the tree in.
    drop(crate::store::open_writer(store.path(), &Default::default()).unwrap());
    let conn = Connection::open(store.path()).unwrap();
    let tree = crate::store::tree::state(&conn).unwrap().unwrap();
    assert_eq!((tree.first_row_id, tree.size), (1, 300));

    // The old checkpoints verify as they did, and so do new ones over the tree.
    let notes = vec![first, second.clone()];
    let verified = run(
        store.path(),
        &notes,
        &[signer.verifier()],
        &Options::default(),
    );
    assert_eq!(verified.report.problem, None);
    assert_eq!(verified.checked, 2);
    write_received(store.path(), 301..=310, 10);
    let third = sign(store.path(), &signer, Some(&second), None, ago(5));
    let verified = run(
        store.path(),
        &[notes[0].clone(), notes[1].clone(), third],
        &[signer.verifier()],
        &Options::default(),
    );
    assert_eq!(verified.report.problem, None);
    assert_eq!(verified.tree.roots, 1);
    assert_eq!(verified.tree.leaves, 310);
}
