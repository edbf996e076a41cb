//! `eventgate audit prove` and `audit check-proof` as a user meets them: proofs
//! against the checkpoints a real gateway signed and shipped, made from its store and
//! checked with nothing but the verifier key; every refusal of `prove` with its
//! reason (exit 2), and `check-proof`'s verdicts on proofs altered after the fact
//! (exit 1) or that it cannot use (exit 2). Interop with Go's sumdb/tlog:
//! tests/tools/tlog_interop.rs.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Stdio;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use eventgate::internal::note::load_key;
use support::*;

const CHECKPOINT_TOPIC: &str = "/eventgate/audit/checkpoint";

/// What a command said.
struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl std::fmt::Display for Ran {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {:?}\nstdout:\n{}\nstderr:\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// `eventgate ARGS...` with `stdin` as its standard input.
fn run_eventgate(args: &[&str], stdin: &[u8]) -> Ran {
    use std::io::Write;
    let mut child = eventgate()
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run eventgate");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin)
        .expect("write stdin");
    let out = child.wait_with_output().expect("wait");
    Ran {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `audit prove --db DB ARGS...`.
fn prove(db: &Path, args: &[&str]) -> Ran {
    run_eventgate(
        &[&["audit", "prove", "--db", path_str(db)], args].concat(),
        b"",
    )
}

/// `audit prove --db DB ARGS...`, which must succeed: the proof it printed.
fn proven(db: &Path, args: &[&str]) -> String {
    let ran = prove(db, args);
    assert_eq!(ran.code, Some(0), "prove {args:?}: {ran}");
    assert!(ran.stderr.is_empty(), "{ran}");
    ran.stdout
}

/// `prove` refused: exit 2, nothing on stdout, `says` said once on stderr.
fn assert_refused(ran: &Ran, says: &str) {
    assert_eq!(ran.code, Some(2), "{says}: {ran}");
    assert!(ran.stdout.is_empty(), "{ran}");
    assert!(
        ran.stderr.starts_with("error: cannot make the proof: ") && ran.stderr.contains(says),
        "{says}: {ran}"
    );
    assert_eq!(ran.stderr.matches(says).count(), 1, "said once: {ran}");
}

/// `audit check-proof FILE --key KEY`.
fn check_proof(file: &Path, key: &str) -> Ran {
    run_eventgate(&["audit", "check-proof", path_str(file), "--key", key], b"")
}

/// A gateway signing a checkpoint every second with a key of its own (`NODE.key`
/// in its directory), shipping them through the file forwarder to
/// `data/events.jsonl`. Returns it and the verifier key.
fn signing_gateway(node: &str) -> (Gateway, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let key = dir.path().join(format!("{node}.key"));
    let verifier = eventgate_stdout(&["audit", "keygen", node, "--out", path_str(&key)])
        .trim()
        .to_owned();
    let gateway = gateway_signing_with(dir, node, &key);
    (gateway, verifier)
}

fn gateway_signing_with(dir: tempfile::TempDir, node: &str, key: &Path) -> Gateway {
    let config = dir.path().join("eventgate.toml");
    std::fs::write(
        &config,
        format!(
            "node = {node:?}\n[signing]\nkey = {:?}\ninterval = \"1s\"\n\n\
             [[forwarder]]\nname = \"log\"\nkind = \"file\"\npath = \"events.jsonl\"\n\n\
             [[forwarder]]\nname = \"audit\"\nkind = \"sqlite\"\npath = \"audit.db\"\n",
            path_str(key)
        ),
    )
    .expect("write config");
    let config = path_str(&config).to_owned();
    Gateway::start_in(dir, &["--config", &config])
}

fn db_of(gateway: &Gateway) -> PathBuf {
    gateway.dir.path().join("data/audit.db")
}

/// The checkpoint events the file forwarder shipped, in order.
fn shipped(gateway: &Gateway) -> Vec<serde_json::Value> {
    std::fs::read_to_string(gateway.dir.path().join("data/events.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|l| l["topic"] == CHECKPOINT_TOPIC)
        .collect()
}

fn note_of(checkpoint: &serde_json::Value) -> String {
    checkpoint["event"]["note"]
        .as_str()
        .expect("a note")
        .to_owned()
}

fn size_of(checkpoint: &serde_json::Value) -> u64 {
    checkpoint["event"]["tree_size"].as_u64().expect("a size")
}

/// A stored exit.
#[derive(Clone, Debug)]
struct Exit {
    row_id: i64,
    seq: i64,
    id: String,
}

/// The stored exits, in order (none while there is no store).
fn stored_exits(db: &Path) -> Vec<Exit> {
    let Ok(conn) =
        rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
    else {
        return Vec::new();
    };
    conn.prepare("SELECT row_id, seq, id FROM events WHERE topic = '/tasks/exit' ORDER BY row_id")
        .and_then(|mut s| {
            s.query_map([], |r| {
                Ok(Exit {
                    row_id: r.get(0)?,
                    seq: r.get(1)?,
                    id: r.get(2)?,
                })
            })?
            .collect()
        })
        .unwrap_or_default()
}

/// Publishes exits `c{from}..c{to}` (the store then holds `to` exits) and waits
/// until a shipped checkpoint's tree holds them all.
fn publish_and_sign(gateway: &Gateway, from: usize, to: usize) {
    for n in from..to {
        let (ok, err) = publish_json(
            &gateway.address(),
            "default",
            "/tasks/exit",
            "containerd.events.TaskExit",
            &format!("{{\"container_id\":\"c{n}\",\"exit_status\":{n}}}"),
        );
        assert!(ok, "{err}");
    }
    let db = db_of(gateway);
    let last = wait_for("the exits stored", DEADLINE, || {
        let exits = stored_exits(&db);
        (exits.len() == to).then(|| exits[to - 1].row_id)
    });
    wait_for("a checkpoint of the exits shipped", DEADLINE, || {
        shipped(gateway)
            .iter()
            .any(|c| c["event"]["tree_size"].as_i64() >= Some(last))
            .then_some(())
    });
}

/// A gateway that stored 3 exits, shipped a checkpoint of them, stored 3 more and
/// shipped one of those, then stopped.
fn two_rounds(node: &str) -> (Gateway, String) {
    let (mut gateway, verifier) = signing_gateway(node);
    publish_and_sign(&gateway, 0, 3);
    publish_and_sign(&gateway, 3, 6);
    assert!(gateway.terminate().success(), "{}", gateway.stderr_text());
    (gateway, verifier)
}

/// The first shipped checkpoint whose tree holds `row_id`.
fn first_holding(gateway: &Gateway, row_id: i64) -> serde_json::Value {
    shipped(gateway)
        .into_iter()
        .find(|c| c["event"]["tree_size"].as_i64() >= Some(row_id))
        .expect("a checkpoint holding the row")
}

/// The tree size of the newest checkpoint the store keeps as a row.
fn newest_stored_size(db: &Path) -> u64 {
    rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .expect("open")
        .query_row(
            "SELECT json_extract(event, '$.tree_size') FROM events WHERE topic = ?1 \
             ORDER BY row_id DESC LIMIT 1",
            [CHECKPOINT_TOPIC],
            |r| r.get::<_, i64>(0),
        )
        .map(|size| u64::try_from(size).expect("a size"))
        .expect("a stored checkpoint")
}

fn write(path: &Path, text: &str) -> String {
    std::fs::write(path, text).expect("write");
    path_str(path).to_owned()
}

/// A copy of a stopped gateway's store in `to`, to damage.
fn copy_store(db: &Path, to: &Path) -> PathBuf {
    std::fs::create_dir_all(to).expect("mkdir");
    for suffix in ["", "-wal", "-shm"] {
        let from = PathBuf::from(format!("{}{suffix}", db.display()));
        if from.exists() {
            std::fs::copy(&from, to.join(format!("audit.db{suffix}"))).expect("copy");
        }
    }
    to.join("audit.db")
}

#[test]
fn an_event_is_proven_by_row_seq_or_id_against_the_newest_or_a_given_checkpoint() {
    let (gateway, verifier) = two_rounds("node-5");
    let db = db_of(&gateway);
    let dir = gateway.dir.path();
    let exits = stored_exits(&db);
    let exit = exits[1].clone();

    // Against the newest checkpoint the store keeps: the same proof whichever way
    // the event is named, and `check-proof` shows that event in that tree.
    let by_row = proven(&db, &["--row", &exit.row_id.to_string()]);
    assert_eq!(proven(&db, &["--seq", &exit.seq.to_string()]), by_row);
    assert_eq!(proven(&db, &["--id", &exit.id]), by_row);
    assert!(
        by_row.starts_with(&format!(
            "eventgate inclusion proof v1\nindex {}\nrecord ",
            exit.row_id - 1
        )),
        "{by_row}"
    );
    let file = dir.join("c1.proof");
    let ran = prove(
        &db,
        &[
            "--id",
            &exit.id,
            "--out",
            &write(&file, "a file to replace"),
        ],
    );
    assert_eq!(ran.code, Some(0), "{ran}");
    assert!(ran.stdout.is_empty(), "{ran}");
    assert_eq!(ran.stderr, format!("wrote {}\n", file.display()));
    assert_eq!(std::fs::read_to_string(&file).expect("read"), by_row);
    let newest = newest_stored_size(&db);
    let ran = check_proof(&file, &verifier);
    assert_eq!(ran.code, Some(0), "{ran}");
    for says in [
        format!("inclusion proof {}: verified\n", file.display()),
        format!(
            "leaf      {} of the tree of {newest} leaves\n",
            exit.row_id - 1
        ),
        format!("row_id    {}\n", exit.row_id),
        format!("seq       {}\n", exit.seq),
        format!("id        {}\n", exit.id),
        "namespace default\n".to_owned(),
        "topic     /tasks/exit\n".to_owned(),
        "\"container_id\":\"c1\",\"exit_status\":1".to_owned(),
        "tree head node-5/eventgate/".to_owned(),
        "signed by node-5\n".to_owned(),
        "node      node-5, store ".to_owned(),
    ] {
        assert!(ran.stdout.contains(&says), "{says}: {ran}");
    }

    // Against a shipped checkpoint given as a file: the note itself, or the file
    // forwarder's JSON line holding it; both make the proof of that tree.
    let early = first_holding(&gateway, exits[2].row_id);
    let note_file = write(&dir.join("early.note"), &note_of(&early));
    let json_file = write(&dir.join("early.json"), &format!("{early}\n"));
    let by_note = proven(
        &db,
        &["--seq", &exit.seq.to_string(), "--checkpoint", &note_file],
    );
    let by_json = proven(
        &db,
        &[
            "--row",
            &exit.row_id.to_string(),
            "--checkpoint",
            &json_file,
        ],
    );
    assert_eq!(by_note, by_json);
    assert!(by_note.ends_with(&note_of(&early)), "{by_note}");
    let file = dir.join("early.proof");
    write(&file, &by_note);
    let ran = check_proof(&file, &verifier);
    assert_eq!(ran.code, Some(0), "{ran}");
    assert!(
        ran.stdout.contains(&format!(
            "leaf      {} of the tree of {} leaves\n",
            exit.row_id - 1,
            size_of(&early)
        )),
        "{ran}"
    );

    // Refused, exit 2, saying why.
    let later = exits[4].row_id;
    assert_refused(
        &prove(
            &db,
            &["--row", &later.to_string(), "--checkpoint", &json_file],
        ),
        &format!(
            "row_id {later} is not in the checkpoint's tree (rows 1 to {}): it was stored \
             after that checkpoint; use a newer one",
            size_of(&early)
        ),
    );
    assert_refused(
        &prove(&db, &["--id", "no-such-event"]),
        "no event with id no-such-event",
    );
    assert_refused(&prove(&db, &["--seq", "9999"]), "no event with seq 9999");
    // The checkpoint's own row is stored after it was signed.
    let stored_checkpoint: i64 = rusqlite::Connection::open(&db)
        .expect("open")
        .query_row(
            "SELECT max(row_id) FROM events WHERE topic = ?1",
            [CHECKPOINT_TOPIC],
            |r| r.get(0),
        )
        .expect("a stored checkpoint");
    assert_refused(
        &prove(&db, &["--row", &stored_checkpoint.to_string()]),
        "it was stored after that checkpoint",
    );
    // Not a checkpoint: a JSON line of another event, a note of other text.
    let exit_line = std::fs::read_to_string(dir.join("data/events.jsonl"))
        .expect("read")
        .lines()
        .find(|l| l.contains("/tasks/exit"))
        .expect("an exit line")
        .to_owned();
    let ran = prove(
        &db,
        &[
            "--row",
            "1",
            "--checkpoint",
            &write(&dir.join("exit.json"), &exit_line),
        ],
    );
    assert_eq!(ran.code, Some(1), "{ran}");
    assert!(
        ran.stderr.contains("a JSON line without event.note"),
        "{ran}"
    );
    let signer = load_key(&dir.join("node-5.key")).expect("the key");
    let other_text = write(
        &dir.join("other.note"),
        &signer.sign("hello\n").expect("sign"),
    );
    assert_refused(
        &prove(&db, &["--row", "1", "--checkpoint", &other_text]),
        "the checkpoint cannot be used: not an eventgate checkpoint",
    );
    // No store there.
    let ran = prove(&dir.join("nothing.db"), &["--row", "1"]);
    assert_eq!(ran.code, Some(2), "{ran}");
    assert!(
        ran.stderr.contains("no audit store at") && !ran.stderr.contains("checkpoint cannot"),
        "{ran}"
    );
}

#[test]
fn consistency_proofs_and_the_checkpoints_they_refuse() {
    let (gateway, verifier) = two_rounds("node-6");
    let db = db_of(&gateway);
    let dir = gateway.dir.path();
    let exits = stored_exits(&db);
    let early = first_holding(&gateway, exits[2].row_id);
    let late = first_holding(&gateway, exits[5].row_id);
    assert!(size_of(&early) < size_of(&late));
    let early_json = write(&dir.join("early.json"), &format!("{early}\n"));
    let late_note = write(&dir.join("late.note"), &note_of(&late));

    // From the older to the newer, each given; and to the newest the store keeps.
    let proof = proven(&db, &["--from", &early_json, "--to", &late_note]);
    assert!(
        proof.starts_with("eventgate consistency proof v1\n"),
        "{proof}"
    );
    assert!(
        proof.ends_with(&format!("{}{}", note_of(&early), note_of(&late))),
        "{proof}"
    );
    let file = dir.join("consistency.proof");
    write(&file, &proof);
    let ran = check_proof(&file, &verifier);
    assert_eq!(ran.code, Some(0), "{ran}");
    for says in [
        format!("consistency proof {}: verified\n", file.display()),
        format!(
            "the tree of {} leaves is a prefix of the tree of {} leaves\n",
            size_of(&early),
            size_of(&late)
        ),
        format!(
            "older     {} {} {}\n",
            early["event"]["origin"].as_str().expect("origin"),
            size_of(&early),
            early["event"]["root"].as_str().expect("root")
        ),
        format!(
            "newer     {} {} {}\n",
            late["event"]["origin"].as_str().expect("origin"),
            size_of(&late),
            late["event"]["root"].as_str().expect("root")
        ),
    ] {
        assert!(ran.stdout.contains(&says), "{says}: {ran}");
    }
    let to_newest = proven(&db, &["--from", &early_json]);
    write(&file, &to_newest);
    let ran = check_proof(&file, &verifier);
    assert_eq!(ran.code, Some(0), "{ran}");
    assert!(
        ran.stdout.contains(&format!(
            "the tree of {} leaves is a prefix of the tree of {} leaves\n",
            size_of(&early),
            newest_stored_size(&db)
        )),
        "{ran}"
    );

    // The wrong way round: refused, naming the order.
    assert_refused(
        &prove(&db, &["--from", &late_note, "--to", &early_json]),
        &format!(
            "the checkpoint to prove from has {} leaves, more than the {} of the one to prove \
             to: a consistency proof goes from the older checkpoint (--from) to the newer (--to)",
            size_of(&late),
            size_of(&early)
        ),
    );

    // A version 1 checkpoint, signed before stores kept a tree: the same facts in
    // the old text, signed with the gateway's key.
    let late_text = note_of(&late);
    let facts: Vec<&str> = late_text
        .lines()
        .skip_while(|l| *l != "eventgate audit checkpoint v2")
        .skip(1)
        .take_while(|l| !l.is_empty())
        .collect();
    let fact = |key: &str| -> String {
        facts
            .iter()
            .find_map(|l| l.strip_prefix(&format!("{key} ")))
            .unwrap_or_else(|| panic!("{key} in {facts:?}"))
            .to_owned()
    };
    let v1 = format!(
        "eventgate audit checkpoint v1\nnode {}\nstore {}\nrow {}\nseq {}\nhash {}\npruned 0\ntime {}\nprev {}\n",
        fact("node"),
        fact("store"),
        fact("row"),
        fact("seq"),
        fact("hash"),
        fact("time"),
        fact("prev")
    );
    let signer = load_key(&dir.join("node-6.key")).expect("the key");
    let v1_note = write(&dir.join("v1.note"), &signer.sign(&v1).expect("sign"));
    let version_1 = "the checkpoint is a version 1 checkpoint, signed before the store kept a \
                     Merkle tree: nothing can be proven against it; use a newer one";
    assert_refused(
        &prove(&db, &["--row", "1", "--checkpoint", &v1_note]),
        version_1,
    );
    assert_refused(&prove(&db, &["--from", &v1_note]), version_1);

    // A checkpoint of another store, signed by the same key: refused by prove; and
    // swapped into a proof, a checkpoint of another log to check-proof.
    let other_dir = tempfile::tempdir().expect("tempdir");
    let mut other = gateway_signing_with(other_dir, "node-6", &dir.join("node-6.key"));
    wait_for("the other store's checkpoint", DEADLINE, || {
        shipped(&other).first().map(|_| ())
    });
    assert!(other.terminate().success(), "{}", other.stderr_text());
    let theirs = shipped(&other).remove(0);
    let their_store = theirs["event"]["store"].as_str().expect("store").to_owned();
    let our_store = early["event"]["store"].as_str().expect("store").to_owned();
    assert_ne!(their_store, our_store);
    let their_note = write(&dir.join("theirs.note"), &note_of(&theirs));
    assert_refused(
        &prove(&db, &["--row", "1", "--checkpoint", &their_note]),
        &format!(
            "the checkpoint is of store {their_store}, and this store is {our_store}: prove \
             with a checkpoint of this store"
        ),
    );
    assert_refused(
        &prove(&db, &["--from", &their_note]),
        &format!("the checkpoint is of store {their_store}"),
    );
    write(
        &file,
        &proof.replacen(&note_of(&early), &note_of(&theirs), 1),
    );
    let ran = check_proof(&file, &verifier);
    assert_eq!(ran.code, Some(1), "{ran}");
    assert!(
        ran.stdout
            .contains(&format!("proof {}: FAILED\n", file.display()))
            && ran
                .stdout
                .contains("the two tree heads are of different logs"),
        "{ran}"
    );

    // The store's tree hashes changed after the checkpoint was signed: the tree no
    // longer has the signed root, and prove says so rather than make a proof.
    let damaged = copy_store(&db, &dir.join("damaged"));
    {
        let conn = rusqlite::Connection::open(&damaged).expect("open");
        let hashes: Vec<u8> = conn
            .query_row(
                "SELECT hashes FROM audit_tree_hashes WHERE chunk = 0",
                [],
                |r| r.get(0),
            )
            .expect("the first chunk");
        let flipped: Vec<u8> = hashes.iter().map(|b| !b).collect();
        conn.execute(
            "UPDATE audit_tree_hashes SET hashes = ?1 WHERE chunk = 0",
            [flipped],
        )
        .expect("update");
    }
    let ran = prove(&damaged, &["--row", "1", "--checkpoint", &late_note]);
    assert_refused(
        &ran,
        &format!("the store's tree of {} leaves has root ", size_of(&late)),
    );
    assert!(
        ran.stderr.contains(&format!(
            "but the checkpoint signed {}: the store no longer holds the history the \
             checkpoint signed; run `eventgate audit verify`",
            late["event"]["root"].as_str().expect("root")
        )),
        "{ran}"
    );
    assert_refused(
        &prove(&damaged, &["--from", &early_json, "--to", &late_note]),
        "the store no longer holds the history the checkpoint signed",
    );
    // ... and gone: named by the hash that is missing.
    let cut = copy_store(&db, &dir.join("cut"));
    rusqlite::Connection::open(&cut)
        .expect("open")
        .execute("DELETE FROM audit_tree_hashes", [])
        .expect("delete");
    let ran = prove(&cut, &["--row", "1", "--checkpoint", &late_note]);
    assert_refused(&ran, "the store's tree hashes: stored tree hash ");
    assert_eq!(ran.stderr.matches("is missing").count(), 1, "{ran}");
}

#[test]
fn check_proof_refuses_what_was_altered_and_cannot_use_other_keys_or_files() {
    let (gateway, verifier) = two_rounds("node-8");
    let db = db_of(&gateway);
    let dir = gateway.dir.path();
    let exits = stored_exits(&db);
    let early = first_holding(&gateway, exits[2].row_id);
    let late = first_holding(&gateway, exits[5].row_id);
    let early_note = write(&dir.join("early.note"), &note_of(&early));
    let late_note = write(&dir.join("late.note"), &note_of(&late));
    let inclusion = proven(
        &db,
        &[
            "--row",
            &exits[3].row_id.to_string(),
            "--checkpoint",
            &late_note,
        ],
    );
    let consistency = proven(&db, &["--from", &early_note, "--to", &late_note]);

    // From stdin (`-`), as from a file.
    let ran = run_eventgate(
        &["audit", "check-proof", "-", "--key", &verifier],
        inclusion.as_bytes(),
    );
    assert_eq!(ran.code, Some(0), "{ran}");
    assert!(
        ran.stdout.starts_with("inclusion proof -: verified\n"),
        "{ran}"
    );
    assert!(ran.stdout.contains("\"container_id\":\"c3\""), "{ran}");

    // Altered after it was made: FAILED, exit 1, naming what does not hold.
    let record_line = inclusion
        .lines()
        .find_map(|l| l.strip_prefix("record "))
        .expect("record");
    let mut record = STANDARD.decode(record_line).expect("base64");
    let at = record
        .windows(4)
        .position(|w| w == b"\"c3\"")
        .expect("the container id in the record");
    record[at + 2] = b'4';
    let first_hash = inclusion.lines().nth(3).expect("a proof hash").to_owned();
    let other_hash = format!(
        "{}{}",
        if first_hash.starts_with('A') {
            "B"
        } else {
            "A"
        },
        &first_hash[1..]
    );
    let size_line = format!("\n{}\n", size_of(&late));
    let index = exits[3].row_id - 1;
    let file = dir.join("altered.proof");
    for (what, text, says) in [
        (
            "a proof hash changed",
            inclusion.replacen(&first_hash, &other_hash, 1),
            "the proof does not verify: the path from the leaf does not end at the tree head's root",
        ),
        (
            "the event changed (c3 made c4)",
            inclusion.replacen(record_line, &STANDARD.encode(&record), 1),
            "the proof does not verify: the path from the leaf does not end at the tree head's root",
        ),
        (
            "another leaf claimed",
            inclusion.replacen(
                &format!("\nindex {index}\n"),
                &format!("\nindex {}\n", index - 1),
                1,
            ),
            "the proof does not verify",
        ),
        (
            "the note's root changed",
            inclusion.replacen(
                &format!("\n{}\n", late["event"]["root"].as_str().expect("root")),
                &format!("\n{}\n", early["event"]["root"].as_str().expect("root")),
                1,
            ),
            "the tree head's signature does not verify: the signature by node-8 does not \
             verify: the note was changed after it was signed, or it was signed by another key \
             of that name",
        ),
        (
            "the newer note's size changed",
            consistency.replacen(&size_line, &format!("\n{}\n", size_of(&late) + 1), 1),
            "the newer tree head's signature does not verify",
        ),
        (
            "the notes swapped",
            consistency.replacen(
                &format!("{}{}", note_of(&early), note_of(&late)),
                &format!("{}{}", note_of(&late), note_of(&early)),
                1,
            ),
            &format!(
                "the newer tree head ({} leaves) is smaller than the older ({}): the log went back",
                size_of(&early),
                size_of(&late)
            ),
        ),
    ] {
        assert_ne!(text, inclusion, "{what}: nothing changed");
        assert_ne!(text, consistency, "{what}: nothing changed");
        write(&file, &text);
        let ran = check_proof(&file, &verifier);
        assert_eq!(ran.code, Some(1), "{what}: {ran}");
        assert!(
            ran.stdout
                .starts_with(&format!("proof {}: FAILED\n", file.display()))
                && ran.stdout.contains(says),
            "{what}: {says}: {ran}"
        );
    }

    // A row edited in the store after its checkpoint was signed: prove still writes
    // the row as it is now, and the proof fails.
    let edited = copy_store(&db, &dir.join("edited"));
    rusqlite::Connection::open(&edited)
        .expect("open")
        .execute(
            "UPDATE events SET event = json_set(event, '$.exit_status', 0) WHERE row_id = ?1",
            [exits[3].row_id],
        )
        .expect("update");
    write(
        &file,
        &proven(
            &edited,
            &[
                "--row",
                &exits[3].row_id.to_string(),
                "--checkpoint",
                &late_note,
            ],
        ),
    );
    let ran = check_proof(&file, &verifier);
    assert_eq!(ran.code, Some(1), "{ran}");
    assert!(ran.stdout.contains("the proof does not verify"), "{ran}");

    // Cannot be checked, exit 2: a key that signed none of it, a key that is not
    // one, a file that is not a proof.
    write(&file, &inclusion);
    let other = eventgate_stdout(&[
        "audit",
        "keygen",
        "node-8",
        "--out",
        path_str(&dir.join("other.key")),
    ]);
    for (key, says) in [
        (
            other.trim(),
            "error: the tree head cannot be used: no known key signed the note (it is signed by node-8+",
        ),
        ("node-8", "error: --key number 1 cannot be used: "),
    ] {
        let ran = check_proof(&file, key);
        assert_eq!(ran.code, Some(2), "{key}: {ran}");
        assert!(ran.stdout.is_empty(), "{ran}");
        assert!(ran.stderr.starts_with(says), "{says}: {ran}");
    }
    for (text, says) in [
        (
            note_of(&late),
            "not a proof file: the first line is \"node-8/eventgate/",
        ),
        (
            "hello\n".to_owned(),
            "no blank line between the proof and the signed tree head",
        ),
        (
            inclusion.replacen("\nrecord ", "\nrecord !", 1),
            "record: not base64",
        ),
    ] {
        write(&file, &text);
        let ran = check_proof(&file, &verifier);
        assert_eq!(ran.code, Some(2), "{says}: {ran}");
        assert!(ran.stdout.is_empty(), "{ran}");
        assert!(
            ran.stderr
                .starts_with(&format!("error: {}: ", file.display()))
                && ran.stderr.contains(says),
            "{says}: {ran}"
        );
    }
    let ran = check_proof(&dir.join("missing.proof"), &verifier);
    assert_eq!(ran.code, Some(2), "{ran}");
    assert!(ran.stderr.contains("cannot read"), "{ran}");
}

#[test]
fn a_seq_held_by_two_rows_is_refused_and_each_row_proven() {
    // Seqs start again when a gateway's data is replaced: a new gateway on a copy of
    // the store stores its first event with a seq the store already holds.
    let (gateway, verifier) = two_rounds("node-4");
    let next = tempfile::tempdir().expect("tempdir");
    copy_store(&db_of(&gateway), &next.path().join("data"));
    let key = gateway.dir.path().join("node-4.key");
    let mut replaced = gateway_signing_with(next, "node-4", &key);
    publish_and_sign(&replaced, 6, 7);
    assert!(replaced.terminate().success(), "{}", replaced.stderr_text());
    let db = db_of(&replaced);
    let seqs: Vec<(i64, i64)> = rusqlite::Connection::open(&db)
        .expect("open")
        .prepare("SELECT seq, row_id FROM events ORDER BY row_id")
        .and_then(|mut s| s.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect())
        .expect("the rows");
    let (seq, first) = *seqs
        .iter()
        .find(|(seq, row)| seqs.iter().any(|(s, r)| s == seq && r != row))
        .expect("a seq held twice");
    let second = seqs
        .iter()
        .find(|(s, r)| *s == seq && *r != first)
        .expect("its second row")
        .1;
    let rows = format!("{first}, {second}");
    assert_refused(
        &prove(&db, &["--seq", &seq.to_string()]),
        &format!(
            "2 rows have seq {seq} (row_id {rows}; seqs start again when a gateway's data is \
             replaced): prove by --row or --id"
        ),
    );
    let file = replaced.dir.path().join("row.proof");
    for row in [first, second] {
        write(&file, &proven(&db, &["--row", &row.to_string()]));
        let ran = check_proof(&file, &verifier);
        assert_eq!(ran.code, Some(0), "{ran}");
        assert!(
            ran.stdout
                .contains(&format!("row_id    {row}\nseq       {seq}\n")),
            "{ran}"
        );
    }
}
