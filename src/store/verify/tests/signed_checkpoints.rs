//! Verification against signed checkpoints: stores written by the store's own
//! writer, checkpoints of their head signed as the gateway signs them, and then the
//! attacks keyless verification cannot see (an edit with every hash and the head
//! recomputed, rows cut off the end, rows inserted) and those on the notes
//! themselves.

use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};

use base64::Engine;
use rusqlite::Connection;

use super::*;
use crate::note::{Signer, Verifier};
use crate::store::checkpoint::{self, Checkpoint, TOPIC, note_hash};
use crate::store::verify::checkpoints::{CheckpointsError, Verified, verify_checkpoints};
use crate::store::verify::shipped::{self, Format};

/// A checkpoint of the store's head now, signed by `signer`, naming `prev`.
fn sign(path: &Path, signer: &Signer, prev: Option<&str>) -> String {
    let conn = Connection::open(path).unwrap();
    let head = checkpoint::head(&conn).unwrap();
    let text = Checkpoint {
        node: "node-1".into(),
        store: head.store,
        row_id: head.row_id,
        seq: head.seq,
        hash: head.hash,
        pruned_rows: head.pruned_rows,
        // Distinct and increasing with the head, as the signer's clock would be.
        time: UNIX_EPOCH + Duration::from_secs(1_800_000_000 + head.row_id.unsigned_abs()),
        prev: prev.map(note_hash),
        tree: None,
    }
    .to_text();
    signer.sign(&text).unwrap()
}

/// Ten events, with checkpoints signed after rows 5 and 10 (the second naming the
/// first).
fn signed_store(signer: &Signer) -> (TempStore, Vec<String>) {
    let store = TempStore::new();
    write(store.path(), 1..=5);
    let first = sign(store.path(), signer, None);
    write(store.path(), 6..=10);
    let second = sign(store.path(), signer, Some(&first));
    (store, vec![first, second])
}

fn key() -> Signer {
    Signer::generate("node-1").unwrap()
}

/// The notes as a text file: separated by blank lines.
fn as_text(notes: &[String]) -> String {
    notes.join("\n")
}

/// The notes as the file forwarder writes them, between other events.
fn as_json_lines(notes: &[String]) -> String {
    let mut text = String::from(
        "{\"event\":{\"container_id\":\"c1\"},\"namespace\":\"default\",\"topic\":\"/tasks/exit\"}\n",
    );
    for note in notes {
        let line = serde_json::json!({
            "event": {"note": note, "node": "node-1", "forwarder": "audit"},
            "namespace": "eventgate",
            "topic": TOPIC,
            "seq": 12,
        });
        text.push_str(&format!("{line}\n"));
        text.push_str("{\"event\":null,\"namespace\":\"default\",\"topic\":\"/tasks/start\"}\n");
    }
    text
}

/// The notes as `tests/support/consume.py` prints Kafka messages: the value as base64.
fn as_consumer_records(notes: &[String]) -> String {
    notes
        .iter()
        .enumerate()
        .map(|(offset, note)| {
            let value = serde_json::json!({"event": {"note": note}, "topic": TOPIC}).to_string();
            let record = serde_json::json!({
                "partition": 0,
                "offset": offset,
                "key": null,
                "headers": [],
                "value": base64::engine::general_purpose::STANDARD.encode(value),
            });
            format!("{record}\n")
        })
        .collect()
}

/// The notes as `kcat -J` prints Kafka messages: the value as JSON text, beside the
/// Kafka topic's own name.
fn as_kcat_records(notes: &[String]) -> String {
    notes
        .iter()
        .map(|note| {
            let value = serde_json::json!({"event": {"note": note}, "topic": TOPIC}).to_string();
            let record = serde_json::json!({
                "topic": "audit-checkpoints",
                "partition": 0,
                "offset": 3,
                "payload": value,
            });
            format!("{record}\n")
        })
        .collect()
}

fn check_input(path: &Path, input: &str, keys: &[Verifier]) -> Result<Verified, VerifyError> {
    let shipped = shipped::read(input.as_bytes(), "shipped.txt", keys).unwrap();
    verify_checkpoints(path, &[], shipped, &Default::default())
}

fn check(path: &Path, notes: &[String], keys: &[Verifier]) -> Result<Verified, VerifyError> {
    check_input(path, &as_text(notes), keys)
}

fn found(path: &Path, notes: &[String], keys: &[Verifier]) -> Problem {
    let verified = check(path, notes, keys).unwrap();
    verified.report.problem.expect("a problem")
}

fn checkpoints_error(result: Result<Verified, VerifyError>) -> CheckpointsError {
    match result {
        Err(VerifyError::Checkpoints(error)) => error,
        Err(other) => panic!("not a checkpoints error: {other}"),
        Ok(verified) => panic!("verified: {:?}", verified.report.problem),
    }
}

/// What an attacker who knows the format does after an edit: every hash from there
/// on recomputed, and the head too.
fn edit_and_rehash(path: &Path, row_id: i64) {
    sql(
        path,
        &format!(
            "UPDATE events SET event = json_set(event, '$.exit_status', 0) WHERE row_id = {row_id}"
        ),
    );
    rehash_from(path, row_id);
}

#[test]
fn an_intact_store_verifies_against_its_checkpoints_in_every_format_and_order() {
    let signer = key();
    let (store, notes) = signed_store(&signer);
    let keys = [signer.verifier()];
    let reversed: Vec<String> = notes.iter().rev().cloned().collect();
    for (input, format) in [
        (as_text(&notes), Format::Notes),
        (as_text(&reversed), Format::Notes),
        (as_json_lines(&notes), Format::JsonLines),
        (as_json_lines(&reversed), Format::JsonLines),
        (as_consumer_records(&notes), Format::JsonLines),
        (as_kcat_records(&notes), Format::JsonLines),
        // A byte order mark before the first note or the first line, as an editor
        // saving the file may put there.
        (format!("\u{feff}{}", as_text(&notes)), Format::Notes),
        (
            format!("\u{feff}{}", as_consumer_records(&notes)),
            Format::JsonLines,
        ),
    ] {
        let verified = check_input(store.path(), &input, &keys).unwrap();
        assert_eq!(verified.report.problem, None, "{input}");
        assert_eq!(verified.shipped.format, format);
        assert_eq!((verified.of_store, verified.checked), (2, 2));
        assert_eq!(verified.report.verified, 10);
        let newest = verified.newest.expect("a newest checkpoint");
        assert_eq!(newest.checkpoint.row_id, 10);
        assert_eq!(newest.signed_by, ["node-1"]);
        assert_eq!((verified.links.linked, verified.links.first), (1, 1));
        assert_eq!((verified.links.missing, verified.links.forks), (0, 0));
    }
    // The file forwarder's other events are counted, not read as notes.
    let verified = check_input(store.path(), &as_json_lines(&notes), &keys).unwrap();
    assert_eq!(verified.shipped.other_lines, 3);
    // The same note given twice is checked once.
    let twice = [notes.clone(), notes.clone()].concat();
    let verified = check(store.path(), &twice, &keys).unwrap();
    assert_eq!((verified.checked, verified.shipped.duplicates), (2, 2));
    // Only the later one given: its predecessor is missing, which is no tampering.
    let verified = check(store.path(), &notes[1..], &keys).unwrap();
    assert_eq!(verified.report.problem, None);
    assert_eq!(verified.links.missing, 1);
}

#[test]
fn an_edit_with_the_chain_recomputed_fools_the_chain_but_not_a_checkpoint() {
    let signer = key();
    let keys = [signer.verifier()];
    // Row 7 edited: the checkpoint of row 10 no longer matches, the one of row 5 does.
    let (store, notes) = signed_store(&signer);
    edit_and_rehash(store.path(), 7);
    intact(store.path());
    let problem = found(store.path(), &notes, &keys);
    assert_at(&problem, Kind::Rewritten, 10, 10);
    for says in [
        "the checkpoint signed at 2027-01-15T08:00:10.000000000Z by node-1 for row_id 10",
        "line 13 of shipped.txt",
        "after row_id 5",
    ] {
        assert!(problem.what.contains(says), "{says}: {problem}");
    }
    // Row 3: caught at the first checkpoint after it, whatever the notes' order.
    let (store, notes) = signed_store(&signer);
    edit_and_rehash(store.path(), 3);
    intact(store.path());
    let reversed: Vec<String> = notes.iter().rev().cloned().collect();
    for notes in [&notes, &reversed] {
        let problem = found(store.path(), notes, &keys);
        assert_at(&problem, Kind::Rewritten, 5, 5);
        assert!(!problem.what.contains("after row_id"), "{problem}");
    }
}

#[test]
fn rows_cut_off_the_end_with_the_head_rewritten_are_a_rollback() {
    let signer = key();
    let keys = [signer.verifier()];
    let (store, notes) = signed_store(&signer);
    sql(
        store.path(),
        "DELETE FROM events WHERE row_id > 8;
         UPDATE audit_chain SET head_row_id = 8, head_seq = 8,
             head_hash = (SELECT hash FROM events WHERE row_id = 8);",
    );
    intact(store.path());
    let problem = found(store.path(), &notes, &keys);
    assert_at(&problem, Kind::RolledBack, 8, 8);
    for says in [
        "for row_id 10",
        "row_id 9 to 10 (2 rows) were cut off the end",
    ] {
        assert!(problem.what.contains(says), "{says}: {problem}");
    }

    // Everything cut: the store's chain is empty, the rollback still shows.
    let (store, notes) = signed_store(&signer);
    sql(
        store.path(),
        "DELETE FROM events;
         UPDATE audit_chain SET head_row_id = 0, head_seq = NULL, head_hash = NULL;",
    );
    intact(store.path());
    let problem = found(store.path(), &notes, &keys);
    assert_eq!(problem.kind, Kind::RolledBack, "{problem}");
    assert!(
        problem.what.contains("row_id 1 to 10 (10 rows)"),
        "{problem}"
    );
}

#[test]
fn a_head_that_went_back_between_linked_checkpoints_is_a_rollback() {
    // The gateway kept signing after the cut: its next checkpoint, of the shorter
    // chain, names the one before it.
    let signer = key();
    let keys = [signer.verifier()];
    let (store, mut notes) = signed_store(&signer);
    sql(
        store.path(),
        "DELETE FROM events WHERE row_id > 8;
         UPDATE audit_chain SET head_row_id = 8, head_seq = 8,
             head_hash = (SELECT hash FROM events WHERE row_id = 8);",
    );
    let after = sign(store.path(), &signer, Some(&notes[1]));
    notes.push(after);
    let problem = found(store.path(), &notes, &keys);
    assert_at(&problem, Kind::RolledBack, 8, 8);
    assert!(
        problem.what.contains("names as the one before it"),
        "{problem}"
    );
}

#[test]
fn rows_inserted_with_the_chain_recomputed_are_caught() {
    let signer = key();
    let keys = [signer.verifier()];
    let (store, notes) = signed_store(&signer);
    // A row made up at row_id 5, the later ones moved up, every hash and the head
    // recomputed.
    sql(
        store.path(),
        "UPDATE events SET row_id = row_id + 1000 WHERE row_id >= 5;
         UPDATE events SET row_id = row_id - 999 WHERE row_id > 1000;
         INSERT INTO events (row_id, seq, id, timestamp, received_at, namespace, topic, type_url,
             payload, event, source, origin)
         SELECT 5, 77, 'made-up', timestamp, received_at, namespace, topic, type_url, payload,
             event, source, origin FROM events WHERE row_id = 6;
         UPDATE audit_chain SET head_row_id = 11, head_seq = 10;",
    );
    rehash_from(store.path(), 5);
    assert_eq!(intact(store.path()).verified, 11);
    let problem = found(store.path(), &notes, &keys);
    assert_at(&problem, Kind::Rewritten, 5, 77);
    assert!(problem.what.contains("for row_id 5"), "{problem}");
}

#[test]
fn an_altered_note_is_a_forged_checkpoint() {
    let signer = key();
    let keys = [signer.verifier()];
    let (store, notes) = signed_store(&signer);
    let hash = notes[1]
        .lines()
        .find_map(|l| l.strip_prefix("hash "))
        .unwrap()
        .to_owned();
    let mut other = hash.clone().into_bytes();
    other[10] = if other[10] == b'0' { b'1' } else { b'0' };
    let other = String::from_utf8(other).unwrap();
    for altered in [
        notes[1].replace("\nrow 10\n", "\nrow 11\n"),
        notes[1].replace(&hash, &other),
    ] {
        let problem = found(store.path(), &[notes[0].clone(), altered], &keys);
        assert_eq!(problem.kind, Kind::Forged, "{problem}");
        assert_eq!(problem.row, None);
        for says in [
            "the note at line 13 of shipped.txt",
            "does not verify",
            "signature by node-1",
        ] {
            assert!(problem.to_string().contains(says), "{says}: {problem}");
        }
    }
    // In the JSON lines of the file forwarder too: one line changed.
    let lines = as_json_lines(&notes).replace("\\nrow 10\\n", "\\nrow 9\\n");
    let verified = check_input(store.path(), &lines, &keys).unwrap();
    let problem = verified.report.problem.expect("forged");
    assert_eq!(problem.kind, Kind::Forged, "{problem}");
    assert!(problem.what.contains("it says: row_id 9"), "{problem}");
}

#[test]
fn notes_of_other_keys_are_skipped_and_none_of_the_given_keys_cannot_verify() {
    let signer = key();
    let other = Signer::generate("somebody-else").unwrap();
    let (store, notes) = signed_store(&signer);
    let error = checkpoints_error(check(store.path(), &notes, &[other.verifier()]));
    assert!(matches!(
        error,
        CheckpointsError::NoneSigned { notes: 2, .. }
    ));
    let text = error.to_string();
    for says in [
        "none of the 2 notes",
        &format!("somebody-else+{:08x}", other.key_id()),
        &format!("node-1+{:08x} (2 notes)", signer.key_id()),
    ] {
        assert!(text.contains(says), "{says}: {text}");
    }
    // Beside notes of a given key, they are counted and named only.
    let text = &notes[1][..notes[1].find("\n\n").unwrap() + 1];
    let theirs = other.sign(text).unwrap();
    let verified = check(
        store.path(),
        &[notes.clone(), vec![theirs]].concat(),
        &[signer.verifier()],
    )
    .unwrap();
    assert_eq!(verified.report.problem, None);
    assert_eq!((verified.checked, verified.shipped.unknown_notes), (2, 1));
    assert!(
        verified
            .shipped
            .unknown
            .contains_key(&format!("somebody-else+{:08x}", other.key_id()))
    );
}

#[test]
fn checkpoints_of_another_store_say_nothing_of_this_one() {
    let signer = key();
    let keys = [signer.verifier()];
    let (store, notes) = signed_store(&signer);
    let (other, theirs) = signed_store(&signer);
    let id = |path: &Path| {
        checkpoint::head(&Connection::open(path).unwrap())
            .unwrap()
            .store
    };
    let error = checkpoints_error(check(store.path(), &theirs, &keys));
    let text = error.to_string();
    assert!(
        text.contains(&format!("store {}", id(store.path()))),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "store {} (node node-1, 2 checkpoints)",
            id(other.path())
        )),
        "{text}"
    );
    // Mixed with this store's (one file forwarder shipping two stores): skipped.
    let verified = check(store.path(), &[notes, theirs].concat(), &keys).unwrap();
    assert_eq!(verified.report.problem, None);
    assert_eq!(verified.checked, 2);
    assert_eq!(
        verified.other_stores.get(&id(other.path())).map(|o| o.0),
        Some(2)
    );
}

#[test]
fn checkpoints_on_rows_retention_deleted_are_counted_as_pruned() {
    let signer = key();
    let keys = [signer.verifier()];
    let store = TempStore::new();
    let path = store.path();
    let mut notes: Vec<String> = Vec::new();
    for (from, to) in [(1, 3), (4, 6), (7, 10)] {
        write(path, from..=to);
        let note = sign(path, &signer, notes.last().map(String::as_str));
        notes.push(note);
    }
    prune(path, 4);
    let verified = check(path, &notes, &keys).unwrap();
    assert_eq!(verified.report.problem, None);
    assert_eq!((verified.checked, verified.pruned), (2, 1));
    // The one exactly at the retention checkpoint is compared with its hash.
    prune(path, 6);
    let verified = check(path, &notes, &keys).unwrap();
    assert_eq!(verified.report.problem, None);
    assert_eq!((verified.checked, verified.pruned), (2, 1));
    sql(path, "UPDATE audit_chain SET pruned_hash = randomblob(32)");
    let problem = found(path, &notes, &keys);
    assert_eq!(problem.kind, Kind::Rewritten, "{problem}");
    assert!(problem.what.contains("for row_id 6"), "{problem}");
}

#[test]
fn a_count_of_pruned_rows_below_a_signed_one_is_a_rewritten_record() {
    let signer = key();
    let keys = [signer.verifier()];
    let store = ten_events();
    prune(store.path(), 4);
    let note = sign(store.path(), &signer, None);
    assert_eq!(
        check(store.path(), std::slice::from_ref(&note), &keys)
            .unwrap()
            .report
            .problem,
        None
    );
    sql(store.path(), "UPDATE audit_chain SET pruned_rows = 1");
    let problem = found(store.path(), &[note], &keys);
    assert_eq!(problem.kind, Kind::ChainTable, "{problem}");
    assert!(problem.what.contains("already counted 4 rows"), "{problem}");
}

#[test]
fn notes_of_either_key_verify_across_a_rotation() {
    let old = key();
    let new = Signer::generate("node-1-2027").unwrap();
    let store = TempStore::new();
    write(store.path(), 1..=5);
    let first = sign(store.path(), &old, None);
    write(store.path(), 6..=10);
    let second = sign(store.path(), &new, Some(&first));
    let notes = [first, second];
    let verified = check(store.path(), &notes, &[old.verifier(), new.verifier()]).unwrap();
    assert_eq!(verified.report.problem, None);
    assert_eq!((verified.checked, verified.links.linked), (2, 1));
    assert_eq!(verified.newest.unwrap().signed_by, ["node-1-2027"]);
    // With the new key alone, the old key's note is skipped (and its successor's
    // predecessor is then not given).
    let verified = check(store.path(), &notes, &[new.verifier()]).unwrap();
    assert_eq!(verified.report.problem, None);
    assert_eq!((verified.checked, verified.shipped.unknown_notes), (1, 1));
    assert_eq!(verified.links.missing, 1);
    // A rewrite is caught whichever key signed the checkpoint after it.
    edit_and_rehash(store.path(), 7);
    let problem = found(store.path(), &notes, &[old.verifier(), new.verifier()]);
    assert_at(&problem, Kind::Rewritten, 10, 10);
    assert!(problem.what.contains("by node-1-2027"), "{problem}");
}

#[test]
fn two_signed_histories_of_one_row_conflict() {
    // Whoever took the key signs the rewritten chain too: both notes verify.
    let signer = key();
    let keys = [signer.verifier()];
    let (store, mut notes) = signed_store(&signer);
    edit_and_rehash(store.path(), 7);
    let forged = sign(store.path(), &signer, Some(&notes[0]));
    notes.push(forged);
    let problem = found(store.path(), &notes, &keys);
    assert_eq!(problem.kind, Kind::Conflicting, "{problem}");
    assert_eq!(problem.row.as_ref().map(|r| r.row_id), Some(10));
    assert!(problem.what.contains("two histories"), "{problem}");
}

#[test]
fn a_store_whose_id_was_removed_is_tampered() {
    let signer = key();
    let (store, notes) = signed_store(&signer);
    sql(store.path(), "DELETE FROM audit_store");
    let problem = found(store.path(), &notes, &[signer.verifier()]);
    assert_eq!(problem.kind, Kind::ChainTable, "{problem}");
    assert!(problem.what.contains("audit_store"), "{problem}");
}

#[test]
fn notes_are_split_after_their_last_signature_line() {
    let signer = key();
    let keys = [signer.verifier()];
    let (store, notes) = signed_store(&signer);
    // No blank line between them, CRLF line ends, no newline at the very end, blank
    // lines before the first: still two notes, the same bytes.
    let crlf = format!("\n\n{}{}", notes[0], notes[1]).replace('\n', "\r\n");
    let crlf = crlf.trim_end().to_owned();
    let verified = check_input(store.path(), &crlf, &keys).unwrap();
    assert_eq!(verified.report.problem, None);
    assert_eq!(verified.checked, 2);
    let lines: Vec<u64> = verified
        .shipped
        .checkpoints
        .iter()
        .map(|s| s.line)
        .collect();
    assert_eq!(lines, [3, 14]);
    // Text before a note's header is part of that note: it no longer verifies.
    let commented = format!("{}# copied on Tuesday\n{}", notes[0], notes[1]);
    let problem = check_input(store.path(), &commented, &keys)
        .unwrap()
        .report
        .problem
        .expect("forged");
    assert_eq!(problem.kind, Kind::Forged, "{problem}");
    assert!(problem.what.contains("line 12 of"), "{problem}");
}

#[test]
fn input_that_holds_no_usable_note_cannot_verify() {
    let signer = key();
    let keys = [signer.verifier()];
    let (store, _) = signed_store(&signer);
    let path = store.path();
    let cases: [(String, &str); 2] = [
        (String::new(), "holds no signed note (it is empty)"),
        (
            "{\"topic\":\"/tasks/exit\"}\n{\"topic\":\"/tasks/start\"}\n".into(),
            "none of its 2 JSON lines has the topic /eventgate/audit/checkpoint",
        ),
    ];
    for (input, says) in cases {
        let error = checkpoints_error(check_input(path, &input, &keys));
        assert!(error.to_string().contains(says), "{says}: {error}");
    }
}

#[test]
fn a_malformed_note_is_tampering_of_the_archive_and_the_good_ones_are_still_used() {
    let signer = key();
    let keys = [signer.verifier()];
    let (store, notes) = signed_store(&signer);
    let path = store.path();
    let cases: [(String, &str); 4] = [
        (
            format!("{}eventgate audit checkpoint v1\nnode x\n", notes[0]),
            "the note at line 12 of shipped.txt cannot be used",
        ),
        (
            format!("{{\"topic\":\"{TOPIC}\",\"event\":{{\"store\":\"x\"}}}}\n"),
            "the note at line 1 of shipped.txt cannot be used",
        ),
        (
            signer.sign("hello\n").unwrap(),
            "signed by node-1, but its text is not an eventgate checkpoint",
        ),
        (
            notes[0].replace("\n\n", "\n"),
            "the note at line 1 of shipped.txt cannot be used",
        ),
    ];
    for (input, says) in cases {
        let verified = check_input(path, &input, &keys).unwrap();
        let problem = verified.report.problem.expect("a problem");
        assert_eq!(problem.kind, Kind::Archive, "{problem}");
        assert!(problem.to_string().contains(says), "{says}: {problem}");
    }
    // With a good note beside it, that one is still checked against the rows.
    let input = format!("{}{}", notes[0], signer.sign("hello\n").unwrap());
    let verified = check_input(path, &input, &keys).unwrap();
    assert!(verified.walked);
    assert_eq!(verified.checked, 1);
    assert_eq!(verified.report.problem.map(|p| p.kind), Some(Kind::Archive));
    // And a store rewritten below it is reported first, the archive too.
    edit_and_rehash(path, 3);
    let verified = check_input(path, &input, &keys).unwrap();
    assert_eq!(
        verified.report.problem.map(|p| p.kind),
        Some(Kind::Rewritten)
    );
    assert_eq!(verified.archive.map(|p| p.kind), Some(Kind::Archive));
}

#[test]
fn input_limits_are_named() {
    let signer = key();
    let keys = [signer.verifier()];
    let (_store, notes) = signed_store(&signer);
    // Bounded: a larger input is refused, naming the limit.
    let text = as_text(&notes);
    let error = shipped::read_at_most(text.as_bytes(), "big.jsonl", &keys, 100).unwrap_err();
    assert!(
        matches!(error, CheckpointsError::TooLarge { .. }),
        "{error}"
    );
    assert!(shipped::read_at_most(text.as_bytes(), "big.jsonl", &keys, text.len() as u64).is_ok());
}
