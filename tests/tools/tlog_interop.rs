//! Proofs against an implementation eventgate shares no code with: Go's
//! `golang.org/x/mod/sumdb/tlog` and `sumdb/note` (Debian's golang-go and
//! golang-golang-x-mod-dev, built offline from /usr/share/gocode). Go reads the proof
//! files `audit prove` writes with its own parser, opens their notes with the key
//! `audit keygen` made and checks them with `tlog.CheckRecord` and `tlog.CheckTree`;
//! Go's `tlog.TreeHash` over the records a gateway stored is the root the gateway
//! signed; and `audit check-proof` checks the proofs Go makes of a log of its own.
//! Each side refuses what was tampered with.

use crate::support;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use support::*;

const GO_PROGRAM: &str = r#"package main

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

const (
	inclusionHeader   = "eventgate inclusion proof v1"
	consistencyHeader = "eventgate consistency proof v1"
)

// Exit 2: the input cannot be read. Exit 3: it was read and does not check out.
func unusable(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "unusable: "+format+"\n", args...)
	os.Exit(2)
}

func rejected(stage string, err error) {
	fmt.Fprintf(os.Stderr, "%s: %T: %v\n", stage, err, err)
	os.Exit(3)
}

func readFile(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		unusable("%v", err)
	}
	return string(data)
}

func writeFile(dir, name, data string) {
	if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
		unusable("%v", err)
	}
}

func readVerifier(path string) note.Verifier {
	verifier, err := note.NewVerifier(strings.TrimSpace(readFile(path)))
	if err != nil {
		unusable("verifier key: %v", err)
	}
	return verifier
}

type head struct {
	origin string
	size   int64
	root   tlog.Hash
}

// openHead checks a note's signature and reads the tree head that C2SP
// tlog-checkpoint puts in the first three lines of its text.
func openHead(msg string, verifier note.Verifier) head {
	n, err := note.Open([]byte(msg), note.VerifierList(verifier))
	if err != nil {
		rejected("note", err)
	}
	lines := strings.SplitN(n.Text, "\n", 4)
	if len(lines) < 4 {
		unusable("the note's text has fewer than three lines: %q", n.Text)
	}
	size, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil {
		unusable("tree size %q: %v", lines[1], err)
	}
	root, err := tlog.ParseHash(lines[2])
	if err != nil {
		unusable("root %q: %v", lines[2], err)
	}
	return head{lines[0], size, root}
}

// splitNotes cuts signed notes written one after another: a note is its text, a
// blank line and its signature lines, so it ends at the last signature line
// following a blank line.
func splitNotes(text string) []string {
	var notes []string
	current := ""
	inSignatures, afterBlank := false, false
	for _, line := range strings.SplitAfter(text, "\n") {
		if line == "" {
			continue
		}
		signature := strings.HasPrefix(line, "\u2014 ")
		if inSignatures && !signature {
			notes = append(notes, current)
			current, inSignatures = "", false
		}
		if afterBlank && signature {
			inSignatures = true
		}
		afterBlank = line == "\n"
		current += line
	}
	if !inSignatures {
		unusable("the last note has no signature line")
	}
	return append(notes, current)
}

type proofFile struct {
	header string
	index  int64
	record []byte
	hashes []tlog.Hash
	notes  []string
}

// parseProof reads the proof file format: a header line, for an inclusion proof
// `index N` and `record BASE64`, the proof's hashes one per line, a blank line,
// then the signed note(s).
func parseProof(text string) proofFile {
	end := strings.Index(text, "\n\n")
	if end < 0 {
		unusable("no blank line after the proof")
	}
	lines := strings.Split(text[:end], "\n")
	p := proofFile{header: lines[0], notes: splitNotes(text[end+2:])}
	rest := lines[1:]
	switch p.header {
	case inclusionHeader:
		if len(rest) < 2 || !strings.HasPrefix(rest[0], "index ") || !strings.HasPrefix(rest[1], "record ") {
			unusable("no index and record lines")
		}
		index, err := strconv.ParseInt(strings.TrimPrefix(rest[0], "index "), 10, 64)
		if err != nil {
			unusable("index: %v", err)
		}
		record, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(rest[1], "record "))
		if err != nil {
			unusable("record: %v", err)
		}
		p.index, p.record, rest = index, record, rest[2:]
		if len(p.notes) != 1 {
			unusable("%d notes in an inclusion proof", len(p.notes))
		}
	case consistencyHeader:
		if len(p.notes) != 2 {
			unusable("%d notes in a consistency proof", len(p.notes))
		}
	default:
		unusable("not a proof file: %q", p.header)
	}
	for _, line := range rest {
		h, err := tlog.ParseHash(line)
		if err != nil {
			unusable("proof hash %q: %v", line, err)
		}
		p.hashes = append(p.hashes, h)
	}
	return p
}

// memoryLog is a log kept as Go's tlog stores it: every stored hash by its index.
type memoryLog map[int64]tlog.Hash

func (m memoryLog) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	for i, index := range indexes {
		h, ok := m[index]
		if !ok {
			return nil, fmt.Errorf("no stored hash %d", index)
		}
		out[i] = h
	}
	return out, nil
}

func (m memoryLog) append(n int64, record []byte) {
	hashes, err := tlog.StoredHashes(n, record, tlog.HashReaderFunc(m.ReadHashes))
	if err != nil {
		unusable("StoredHashes: %v", err)
	}
	for i, h := range hashes {
		m[tlog.StoredHashIndex(0, n)+int64(i)] = h
	}
}

func (m memoryLog) treeHash(size int64) tlog.Hash {
	root, err := tlog.TreeHash(size, tlog.HashReaderFunc(m.ReadHashes))
	if err != nil {
		unusable("TreeHash: %v", err)
	}
	return root
}

func hashLines(hashes []tlog.Hash) string {
	out := ""
	for _, h := range hashes {
		out += h.String() + "\n"
	}
	return out
}

func main() {
	switch os.Args[1] {
	case "check": // check VERIFIER_KEY_FILE PROOF_FILE
		verifier := readVerifier(os.Args[2])
		p := parseProof(readFile(os.Args[3]))
		if p.header == inclusionHeader {
			h := openHead(p.notes[0], verifier)
			if err := tlog.CheckRecord(p.hashes, h.size, h.root, p.index, tlog.RecordHash(p.record)); err != nil {
				rejected("proof", err)
			}
			fmt.Printf("record %d is in %s %d %s\n", p.index, h.origin, h.size, h.root)
			return
		}
		old, new := openHead(p.notes[0], verifier), openHead(p.notes[1], verifier)
		if old.origin != new.origin {
			rejected("origin", fmt.Errorf("%q and %q", old.origin, new.origin))
		}
		if err := tlog.CheckTree(p.hashes, new.size, new.root, old.size, old.root); err != nil {
			rejected("proof", err)
		}
		fmt.Printf("%s %d %s is a prefix of %d %s\n", old.origin, old.size, old.root, new.size, new.root)
	case "tree-hash": // tree-hash VERIFIER_KEY_FILE NOTE_FILE RECORDS_FILE (one base64 record a line)
		h := openHead(readFile(os.Args[3]), readVerifier(os.Args[2]))
		log := memoryLog{}
		n := int64(0)
		for _, line := range strings.Split(strings.TrimSpace(readFile(os.Args[4])), "\n") {
			record, err := base64.StdEncoding.DecodeString(line)
			if err != nil {
				unusable("record %d: %v", n, err)
			}
			log.append(n, record)
			n++
		}
		if n != h.size {
			unusable("%d records for a tree of %d", n, h.size)
		}
		root := log.treeHash(n)
		fmt.Printf("%s\n", root)
		if root != h.root {
			rejected("root", fmt.Errorf("tlog.TreeHash of the %d records is %s, the note signed %s", n, root, h.root))
		}
	case "make-log": // make-log DIR N: a log of N records, its proofs, its verifier key
		dir := os.Args[2]
		size, err := strconv.ParseInt(os.Args[3], 10, 64)
		if err != nil {
			unusable("N: %v", err)
		}
		record := func(i int64) []byte { return []byte(fmt.Sprintf("go record %d", i)) }
		log := memoryLog{}
		for i := int64(0); i < size; i++ {
			log.append(i, record(i))
		}
		skey, vkey, err := note.GenerateKey(rand.Reader, "example.com/go-log")
		if err != nil {
			unusable("%v", err)
		}
		signer, err := note.NewSigner(skey)
		if err != nil {
			unusable("%v", err)
		}
		writeFile(dir, "verifier", vkey+"\n")
		sign := func(n int64) string {
			text := fmt.Sprintf("example.com/go-log\n%d\n%s\n", n, log.treeHash(n))
			msg, err := note.Sign(&note.Note{Text: text}, signer)
			if err != nil {
				unusable("%v", err)
			}
			fmt.Printf("tree %d %s\n", n, log.treeHash(n))
			return string(msg)
		}
		for _, c := range [][2]int64{{0, size}, {size / 2, size}, {size - 1, size}, {5, 40}, {0, 1}} {
			leaf, n := c[0], c[1]
			proof, err := tlog.ProveRecord(n, leaf, tlog.HashReaderFunc(log.ReadHashes))
			if err != nil {
				unusable("ProveRecord: %v", err)
			}
			text := fmt.Sprintf("%s\nindex %d\nrecord %s\n%s\n%s", inclusionHeader, leaf,
				base64.StdEncoding.EncodeToString(record(leaf)), hashLines(proof), sign(n))
			writeFile(dir, fmt.Sprintf("inclusion-%d-%d", leaf, n), text)
		}
		for _, c := range [][2]int64{{40, size}, {1, size}, {64, size}, {size, size}} {
			old, n := c[0], c[1]
			proof, err := tlog.ProveTree(n, old, tlog.HashReaderFunc(log.ReadHashes))
			if err != nil {
				unusable("ProveTree: %v", err)
			}
			text := fmt.Sprintf("%s\n%s\n%s%s", consistencyHeader, hashLines(proof), sign(old), sign(n))
			writeFile(dir, fmt.Sprintf("consistency-%d-%d", old, n), text)
		}
	}
}
"#;

/// The Go program, built in `dir` without the network.
struct GoTlog {
    binary: PathBuf,
    dir: PathBuf,
}

/// What a run of the Go program said.
struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl GoTlog {
    fn build(dir: &Path) -> GoTlog {
        let dir = dir.join("go");
        std::fs::create_dir_all(&dir).expect("mkdir");
        let source = dir.join("main.go");
        std::fs::write(&source, GO_PROGRAM).expect("write main.go");
        let binary = dir.join("gotlog");
        let out = Command::new("go")
            .args(["build", "-o", path_str(&binary), path_str(&source)])
            .current_dir(&dir)
            // GOPATH mode over Debian's packaged sources: no module download, no proxy.
            .env("GO111MODULE", "off")
            .env("GOPATH", "/usr/share/gocode")
            .env("GOCACHE", dir.join("gocache"))
            .env("GOPROXY", "off")
            .env("GOFLAGS", "")
            .output()
            .expect("run go: install golang-go and golang-golang-x-mod-dev (tests/run.sh does)");
        assert!(
            out.status.success(),
            "go build of the sumdb/tlog program failed (is golang-golang-x-mod-dev \
             installed?): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        GoTlog { binary, dir }
    }

    fn run(&self, args: &[&str]) -> Ran {
        let out = Command::new(&self.binary)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run the Go program");
        Ran {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Go's check of a proof file's text with `verifier`.
    fn check(&self, verifier: &str, proof: &str) -> Ran {
        let (key, file) = (self.dir.join("vkey"), self.dir.join("proof"));
        std::fs::write(&key, verifier).expect("write");
        std::fs::write(&file, proof).expect("write");
        self.run(&["check", path_str(&key), path_str(&file)])
    }

    /// Go's `tlog.TreeHash` over `records`, compared with the root `note` signed.
    fn tree_hash(&self, verifier: &str, note: &str, records: &[String]) -> Ran {
        let (key, note_file, records_file) = (
            self.dir.join("vkey"),
            self.dir.join("note"),
            self.dir.join("records"),
        );
        std::fs::write(&key, verifier).expect("write");
        std::fs::write(&note_file, note).expect("write");
        std::fs::write(&records_file, records.join("\n") + "\n").expect("write");
        self.run(&[
            "tree-hash",
            path_str(&key),
            path_str(&note_file),
            path_str(&records_file),
        ])
    }
}

// Tampering, done to a proof file's text the way someone holding it would.

/// The proof part (before the first blank line) and the notes after it.
fn split_proof(proof: &str) -> (&str, &str) {
    proof.split_once("\n\n").expect("a proof file")
}

/// One base64 digit of `line` changed: still base64, another value.
fn other_digit(line: &str) -> String {
    let replacement = if line.starts_with('A') { "B" } else { "A" };
    format!("{replacement}{}", &line[1..])
}

/// The first of the proof's hashes changed.
fn with_hash_changed(proof: &str) -> String {
    let (head, notes) = split_proof(proof);
    let mut lines: Vec<String> = head.split('\n').map(str::to_owned).collect();
    let first = if lines[0].contains("inclusion") { 3 } else { 1 };
    assert!(lines.len() > first, "a proof with hashes: {proof}");
    lines[first] = other_digit(&lines[first]);
    format!("{}\n\n{notes}", lines.join("\n"))
}

/// The record with one byte changed.
fn with_record_changed(proof: &str) -> String {
    let line = proof
        .lines()
        .find_map(|l| l.strip_prefix("record "))
        .expect("a record line");
    let mut record = STANDARD.decode(line).expect("base64");
    let last = record.len() - 1;
    record[last] ^= 1;
    proof.replacen(line, &STANDARD.encode(&record), 1)
}

/// The index moved to the leaf beside it.
fn with_index_changed(proof: &str) -> String {
    let index: u64 = index_of(proof);
    let other = if index > 0 { index - 1 } else { index + 1 };
    proof.replacen(
        &format!("\nindex {index}\n"),
        &format!("\nindex {other}\n"),
        1,
    )
}

fn index_of(proof: &str) -> u64 {
    proof
        .lines()
        .find_map(|l| l.strip_prefix("index "))
        .expect("an index line")
        .parse()
        .expect("a number")
}

/// The (first) note's root changed: its signature no longer covers its text.
fn with_root_changed(proof: &str) -> String {
    let (head, notes) = split_proof(proof);
    let mut lines: Vec<String> = notes.split('\n').map(str::to_owned).collect();
    lines[2] = other_digit(&lines[2]);
    format!("{head}\n\n{}", lines.join("\n"))
}

/// A consistency proof whose older note is `note` instead.
fn with_old_note(proof: &str, old: &str, note: &str) -> String {
    assert!(proof.contains(old));
    proof.replacen(old, note, 1)
}

/// `eventgate ARGS...`: exit code, stdout, stderr.
fn eventgate_run(args: &[&str]) -> (Option<i32>, String, String) {
    let out = eventgate()
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run eventgate");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `audit prove ARGS... --out FILE`, which must succeed: the proof file's text.
fn prove(db: &Path, args: &[&str], out: &Path) -> String {
    let (code, stdout, stderr) = eventgate_run(
        &[
            &["audit", "prove", "--db", path_str(db)],
            args,
            &["--out", path_str(out)],
        ]
        .concat(),
    );
    assert_eq!(code, Some(0), "prove {args:?}: {stdout}{stderr}");
    std::fs::read_to_string(out).expect("the proof file")
}

const CHECKPOINT_TOPIC: &str = "/eventgate/audit/checkpoint";

/// The checkpoint events the file forwarder shipped, in order.
fn shipped_checkpoints(log: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|l| l["topic"] == CHECKPOINT_TOPIC)
        .collect()
}

/// The stored exits: (row_id, seq, id), in order (empty while there is no store).
fn stored_exits(db: &Path) -> Vec<(i64, i64, String)> {
    let Ok(conn) =
        rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
    else {
        return Vec::new();
    };
    conn.prepare("SELECT row_id, seq, id FROM events WHERE topic = '/tasks/exit' ORDER BY row_id")
        .and_then(|mut s| {
            s.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                .collect()
        })
        .unwrap_or_default()
}

/// Publishes exits `from..to` and waits until a shipped checkpoint's tree holds them.
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
    let db = gateway.dir.path().join("data/audit.db");
    let last = wait_for("the exits stored", DEADLINE, || {
        let exits = stored_exits(&db);
        (exits.len() == to).then(|| exits[to - 1].0)
    });
    let log = gateway.dir.path().join("data/events.jsonl");
    wait_for("a checkpoint of the exits shipped", DEADLINE, || {
        shipped_checkpoints(&log)
            .iter()
            .any(|c| c["event"]["tree_size"].as_i64() >= Some(last))
            .then_some(())
    });
}

const EXITS: usize = 30;

#[test]
fn go_checks_what_eventgate_proves_and_recomputes_its_signed_root() {
    let dir = tempfile::tempdir().expect("tempdir");
    let go = GoTlog::build(dir.path());
    let key = dir.path().join("node-7.key");
    let verifier = eventgate_stdout(&["audit", "keygen", "node-7", "--out", path_str(&key)])
        .trim()
        .to_owned();
    let config = dir.path().join("eventgate.toml");
    std::fs::write(
        &config,
        format!(
            "node = \"node-7\"\n[signing]\nkey = {:?}\ninterval = \"1s\"\n\n\
             [[forwarder]]\nname = \"log\"\nkind = \"file\"\npath = \"events.jsonl\"\n\n\
             [[forwarder]]\nname = \"audit\"\nkind = \"sqlite\"\npath = \"audit.db\"\n",
            path_str(&key)
        ),
    )
    .expect("write config");
    let mut gateway = Gateway::start_in(dir, &["--config", path_str(&config)]);
    publish_and_sign(&gateway, 0, 10);
    publish_and_sign(&gateway, 10, EXITS);
    assert!(gateway.terminate().success(), "{}", gateway.stderr_text());

    let dir = gateway.dir.path();
    let db = dir.join("data/audit.db");
    let checkpoints = shipped_checkpoints(&dir.join("data/events.jsonl"));
    let early = checkpoints
        .iter()
        .find(|c| c["event"]["tree_size"].as_u64() > Some(0))
        .expect("a checkpoint of a tree with leaves");
    let last = checkpoints.last().expect("checkpoints");
    let other = checkpoints
        .iter()
        .find(|c| c["event"]["tree_size"] != early["event"]["tree_size"] && *c != last)
        .expect("a third checkpoint, of another size");
    let note = |c: &serde_json::Value| c["event"]["note"].as_str().expect("a note").to_owned();
    let early_json = dir.join("early.json");
    std::fs::write(&early_json, early.to_string()).expect("write");
    let last_note = dir.join("last.note");
    std::fs::write(&last_note, note(last)).expect("write");
    let exits = stored_exits(&db);
    assert_eq!(exits.len(), EXITS);
    let early_size = early["event"]["tree_size"].as_i64().expect("a size");
    let (_, seq, first_id) = exits
        .iter()
        .find(|(row, _, _)| *row <= early_size)
        .expect("an exit the early checkpoint holds")
        .clone();
    let (_, _, late_id) = exits[EXITS - 3].clone();

    // What eventgate proves, Go accepts: with Go's own reading of the file, the head
    // from the note's first lines, `tlog.CheckRecord` and `tlog.CheckTree`.
    let by_seq = prove(
        &db,
        &[
            "--seq",
            &seq.to_string(),
            "--checkpoint",
            path_str(&early_json),
        ],
        &dir.join("seq.proof"),
    );
    let by_id = prove(
        &db,
        &["--id", &late_id, "--checkpoint", path_str(&last_note)],
        &dir.join("id.proof"),
    );
    let consistency = prove(
        &db,
        &[
            "--from",
            path_str(&early_json),
            "--to",
            path_str(&last_note),
        ],
        &dir.join("consistency.proof"),
    );
    let head = |c: &serde_json::Value| {
        format!(
            "{} {} {}",
            c["event"]["origin"].as_str().expect("origin"),
            c["event"]["tree_size"],
            c["event"]["root"].as_str().expect("root")
        )
    };
    assert!(
        head(last).starts_with("node-7/eventgate/"),
        "{}",
        head(last)
    );
    for (proof, checkpoint, id) in [(&by_seq, early, &first_id), (&by_id, last, &late_id)] {
        let ran = go.check(&verifier, proof);
        assert_eq!(ran.code, Some(0), "{}{}\n{proof}", ran.stdout, ran.stderr);
        assert_eq!(
            ran.stdout,
            format!("record {} is in {}\n", index_of(proof), head(checkpoint))
        );
        // The record Go hashed is the event's row: it carries the event's id.
        let record = proof
            .lines()
            .find_map(|l| l.strip_prefix("record "))
            .expect("record");
        let record = STANDARD.decode(record).expect("base64");
        assert!(
            record.windows(id.len()).any(|w| w == id.as_bytes()),
            "the record of {id}"
        );
    }
    let ran = go.check(&verifier, &consistency);
    assert_eq!(ran.code, Some(0), "{}{}", ran.stdout, ran.stderr);
    let (early_head, last_head) = (head(early), head(last));
    let (origin, last_size_root) = last_head.split_once(' ').expect("head");
    assert_eq!(
        ran.stdout,
        format!("{early_head} is a prefix of {last_size_root}\n")
    );
    assert!(early_head.starts_with(origin));

    // ... and refuses each altered: exit 3, at the stage that caught it.
    for (what, proof, stage) in [
        ("a proof hash changed", with_hash_changed(&by_id), "proof: "),
        ("the record changed", with_record_changed(&by_id), "proof: "),
        ("the index changed", with_index_changed(&by_id), "proof: "),
        (
            "the note's root changed",
            with_root_changed(&by_id),
            "note: *note.InvalidSignatureError",
        ),
        (
            "a consistency proof hash changed",
            with_hash_changed(&consistency),
            "proof: ",
        ),
        (
            "the older note swapped for one of another size",
            with_old_note(&consistency, &note(early), &note(other)),
            "proof: ",
        ),
    ] {
        let ran = go.check(&verifier, &proof);
        assert_eq!(ran.code, Some(3), "{what}: {}{}", ran.stdout, ran.stderr);
        assert!(ran.stderr.starts_with(stage), "{what}: {}", ran.stderr);
    }

    // Every leaf of the last checkpoint's tree, as `audit prove` reads it from the
    // store: Go's own tree over those records has the root eventgate signed.
    let size = last["event"]["tree_size"].as_u64().expect("size");
    let first_row: u64 = note(last)
        .lines()
        .find_map(|l| l.strip_prefix("first-row "))
        .expect("first-row")
        .parse()
        .expect("a number");
    let records: Vec<String> = (first_row..first_row + size)
        .map(|row| {
            let proof = prove(
                &db,
                &[
                    "--row",
                    &row.to_string(),
                    "--checkpoint",
                    path_str(&last_note),
                ],
                &dir.join("leaf.proof"),
            );
            assert_eq!(index_of(&proof), row - first_row);
            proof
                .lines()
                .find_map(|l| l.strip_prefix("record "))
                .expect("record")
                .to_owned()
        })
        .collect();
    assert!(records.len() > EXITS, "{} leaves", records.len());
    let ran = go.tree_hash(&verifier, &note(last), &records);
    assert_eq!(ran.code, Some(0), "{}{}", ran.stdout, ran.stderr);
    assert_eq!(
        ran.stdout.trim(),
        last["event"]["root"].as_str().expect("root")
    );
    // The comparison can fail: two leaves swapped make another root.
    let mut swapped = records.clone();
    swapped.swap(3, 4);
    let ran = go.tree_hash(&verifier, &note(last), &swapped);
    assert_eq!(ran.code, Some(3), "{}{}", ran.stdout, ran.stderr);
    assert!(ran.stderr.starts_with("root: "), "{}", ran.stderr);
}

/// Go's log: its size.
const GO_LOG: u64 = 77;

#[test]
fn eventgate_checks_what_go_proves() {
    let dir = tempfile::tempdir().expect("tempdir");
    let go = GoTlog::build(dir.path());
    let log = dir.path().join("log");
    std::fs::create_dir_all(&log).expect("mkdir");
    let ran = go.run(&["make-log", path_str(&log), &GO_LOG.to_string()]);
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    // Go's roots by size, as its `tlog.TreeHash` computed them.
    let roots: HashMap<u64, String> = ran
        .stdout
        .lines()
        .map(|l| {
            let mut words = l.split(' ').skip(1);
            let size = words.next().expect("size").parse().expect("a number");
            (size, words.next().expect("root").to_owned())
        })
        .collect();
    let verifier = std::fs::read_to_string(log.join("verifier"))
        .expect("Go's verifier key")
        .trim()
        .to_owned();
    let check = |file: &Path, key: &str| {
        eventgate_run(&["audit", "check-proof", path_str(file), "--key", key])
    };
    let read = |name: &str| std::fs::read_to_string(log.join(name)).expect("Go's proof file");

    for (leaf, size) in [
        (0, GO_LOG),
        (GO_LOG / 2, GO_LOG),
        (GO_LOG - 1, GO_LOG),
        (5, 40),
        (0, 1),
    ] {
        let file = log.join(format!("inclusion-{leaf}-{size}"));
        let (code, out, err) = check(&file, &verifier);
        assert_eq!(code, Some(0), "{}: {out}{err}", file.display());
        for says in [
            format!("inclusion proof {}: verified\n", file.display()),
            format!("leaf      {leaf} of the tree of {size} leaves\n"),
            format!(
                "record    {} bytes (not an eventgate audit row)\n",
                format!("go record {leaf}").len()
            ),
            format!("tree head example.com/go-log {size} {}\n", roots[&size]),
            "signed by example.com/go-log\n".to_owned(),
        ] {
            assert!(out.contains(&says), "{says}: {out}");
        }
    }
    for (old, new) in [(40, GO_LOG), (1, GO_LOG), (64, GO_LOG), (GO_LOG, GO_LOG)] {
        let file = log.join(format!("consistency-{old}-{new}"));
        let (code, out, err) = check(&file, &verifier);
        assert_eq!(code, Some(0), "{}: {out}{err}", file.display());
        for says in [
            format!("consistency proof {}: verified\n", file.display()),
            format!("the tree of {old} leaves is a prefix of the tree of {new} leaves\n"),
            format!("older     example.com/go-log {old} {}\n", roots[&old]),
            format!("newer     example.com/go-log {new} {}\n", roots[&new]),
        ] {
            assert!(out.contains(&says), "{says}: {out}");
        }
    }

    // Altered, each is refused as evidence (exit 1), naming what failed.
    let inclusion = read(&format!("inclusion-{}-{GO_LOG}", GO_LOG / 2));
    let consistency = read(&format!("consistency-40-{GO_LOG}"));
    let old_note = first_note(split_proof(&consistency).1);
    let note_64 = first_note(split_proof(&read(&format!("consistency-64-{GO_LOG}"))).1);
    let tampered = dir.path().join("tampered");
    for (what, proof, says) in [
        (
            "a proof hash changed",
            with_hash_changed(&inclusion),
            "the proof does not verify: the path from the leaf does not end at the tree head's root",
        ),
        (
            "the record changed",
            with_record_changed(&inclusion),
            "the proof does not verify: the path from the leaf does not end at the tree head's root",
        ),
        (
            "the index changed",
            with_index_changed(&inclusion),
            "the proof does not verify",
        ),
        (
            "the note's root changed",
            with_root_changed(&inclusion),
            "the tree head's signature does not verify",
        ),
        (
            "a consistency proof hash changed",
            with_hash_changed(&consistency),
            "the proof does not verify",
        ),
        (
            "the older note swapped for one of another size",
            with_old_note(&consistency, &old_note, &note_64),
            "the proof does not verify",
        ),
    ] {
        std::fs::write(&tampered, &proof).expect("write");
        let (code, out, err) = check(&tampered, &verifier);
        assert_eq!(code, Some(1), "{what}: {out}{err}");
        assert!(
            out.contains(&format!("proof {}: FAILED\n", tampered.display())) && out.contains(says),
            "{what}: {out}"
        );
    }

    // Checked with another key, even one of the same name: nothing it signed, so
    // nothing shown either way (exit 2).
    let other = eventgate_stdout(&[
        "audit",
        "keygen",
        "example.com/go-log",
        "--out",
        path_str(&dir.path().join("other.key")),
    ]);
    let (code, out, err) = check(&log.join(format!("inclusion-0-{GO_LOG}")), other.trim());
    assert_eq!(code, Some(2), "{out}{err}");
    assert!(out.is_empty(), "{out}");
    assert!(err.contains("cannot be used"), "{err}");
}

/// The first signed note of notes written one after another.
fn first_note(notes: &str) -> String {
    let mut note = String::new();
    let mut signed = false;
    for line in notes.split_inclusive('\n') {
        let signature = line.starts_with("\u{2014} ");
        if signed && !signature {
            break;
        }
        signed |= signature && note.ends_with("\n\n");
        note.push_str(line);
    }
    note
}
