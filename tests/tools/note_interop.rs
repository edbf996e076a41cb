//! Signed notes against an implementation eventgate shares no code with: Go's
//! `golang.org/x/mod/sumdb/note` (Debian's golang-go and golang-golang-x-mod-dev,
//! built offline from /usr/share/gocode). Go opens what eventgate signs with the key
//! `audit keygen` made, and refuses it altered or signed by another key of the name;
//! eventgate opens what Go signs, loads Go's signer key, and signs Go's text into
//! the very bytes Go wrote (Ed25519 is deterministic).

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;

use eventgate::internal::note::{NoteError, Signer, Verifier, load_key, open};
use support::*;

const GO_PROGRAM: &str = r#"package main

import (
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/mod/sumdb/note"
)

func fail(code int, err error) {
	fmt.Fprintf(os.Stderr, "%T: %v\n", err, err)
	os.Exit(code)
}

func main() {
	switch os.Args[1] {
	case "open": // open VERIFIER_KEY_FILE NOTE_FILE: prints NAME+HASH, then the text
		vkey, err := os.ReadFile(os.Args[2])
		if err != nil {
			fail(2, err)
		}
		verifier, err := note.NewVerifier(strings.TrimSpace(string(vkey)))
		if err != nil {
			fail(2, err)
		}
		msg, err := os.ReadFile(os.Args[3])
		if err != nil {
			fail(2, err)
		}
		n, err := note.Open(msg, note.VerifierList(verifier))
		if err != nil {
			fail(3, err)
		}
		fmt.Printf("%s+%08x\n%s", n.Sigs[0].Name, n.Sigs[0].Hash, n.Text)
	case "sign": // sign NAME TEXT_FILE DIR: writes DIR/signer, DIR/verifier, DIR/note
		skey, vkey, err := note.GenerateKey(rand.Reader, os.Args[2])
		if err != nil {
			fail(2, err)
		}
		text, err := os.ReadFile(os.Args[3])
		if err != nil {
			fail(2, err)
		}
		signer, err := note.NewSigner(skey)
		if err != nil {
			fail(2, err)
		}
		msg, err := note.Sign(&note.Note{Text: string(text)}, signer)
		if err != nil {
			fail(2, err)
		}
		for name, data := range map[string]string{"signer": skey + "\n", "verifier": vkey + "\n", "note": string(msg)} {
			if err := os.WriteFile(filepath.Join(os.Args[4], name), []byte(data), 0o600); err != nil {
				fail(2, err)
			}
		}
	}
}
"#;

/// The Go program, built once per test in `dir` without the network.
struct GoNote {
    binary: PathBuf,
}

impl GoNote {
    fn build(dir: &Path) -> GoNote {
        let source = dir.join("main.go");
        std::fs::write(&source, GO_PROGRAM).expect("write main.go");
        let binary = dir.join("gonote");
        let out = Command::new("go")
            .args(["build", "-o", path_str(&binary), path_str(&source)])
            .current_dir(dir)
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
            "go build of the sumdb/note program failed (is golang-golang-x-mod-dev \
             installed?): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        GoNote { binary }
    }

    /// Go's `note.Open` of `note` with the verifier key `verifier`: its first
    /// signature's NAME+HASH and the text, or the exit code and error.
    fn open(&self, dir: &Path, verifier: &str, note: &[u8]) -> Result<String, (i32, String)> {
        let (key, file) = (dir.join("vkey"), dir.join("note"));
        std::fs::write(&key, verifier).expect("write");
        std::fs::write(&file, note).expect("write");
        let out = Command::new(&self.binary)
            .args(["open", path_str(&key), path_str(&file)])
            .output()
            .expect("run the Go program");
        match out.status.success() {
            true => Ok(String::from_utf8(out.stdout).expect("UTF-8")),
            false => Err((
                out.status.code().unwrap_or(-1),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )),
        }
    }
}

/// A checkpoint-like text: lines, a blank line of its own, non-ASCII.
const TEXT: &str = "eventgate.audit.checkpoint/v1\nnode-1 — größe\n\nrow_id 1234\nhash 28d7341687641114e4c15f82ddff5204f79f849d7e21ccbe2b32365dbf004c69\n";

#[test]
fn go_opens_what_eventgate_signs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let go = GoNote::build(dir.path());
    // The key as an operator makes it: `audit keygen`, its printed verifier key.
    let key = dir.path().join("node.key");
    let verifier = eventgate_stdout(&[
        "audit",
        "keygen",
        "audit.example/node-1",
        "--out",
        path_str(&key),
    ]);
    let signer = load_key(&key).expect("load the key");
    let note = signer.sign(TEXT).expect("sign");

    let opened = go.open(dir.path(), &verifier, note.as_bytes());
    let expected = format!("audit.example/node-1+{:08x}\n{TEXT}", signer.key_id());
    assert_eq!(opened, Ok(expected), "Go's note.Open");

    // Go checks what it opens: one byte of the text changed fails its signature check.
    let altered = note.replacen("1234", "1235", 1);
    let (code, error) = go
        .open(dir.path(), &verifier, altered.as_bytes())
        .unwrap_err();
    assert_eq!(code, 3, "{error}");
    assert!(error.contains("InvalidSignatureError"), "{error}");
    // Another key of the same name: Go ignores its signature, as eventgate does.
    let other = Signer::generate("audit.example/node-1").expect("key");
    let by_other = other.sign(TEXT).expect("sign");
    let (code, error) = go
        .open(dir.path(), &verifier, by_other.as_bytes())
        .unwrap_err();
    assert_eq!(code, 3, "{error}");
    assert!(error.contains("UnverifiedNoteError"), "{error}");
    let ours = Verifier::from_text(&verifier).expect("verifier");
    assert!(matches!(
        open(&by_other, &[ours]),
        Err(NoteError::UnknownKey { .. })
    ));
}

#[test]
fn eventgate_opens_what_go_signs_and_loads_gos_keys() {
    let dir = tempfile::tempdir().expect("tempdir");
    let go = GoNote::build(dir.path());
    let text_file = dir.path().join("text");
    std::fs::write(&text_file, TEXT).expect("write");
    let out = Command::new(&go.binary)
        .args([
            "sign",
            "witness.example/w1",
            path_str(&text_file),
            path_str(dir.path()),
        ])
        .output()
        .expect("run the Go program");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let read = |name: &str| std::fs::read_to_string(dir.path().join(name)).expect("read");
    let (go_signer, go_verifier, go_note) = (read("signer"), read("verifier"), read("note"));

    let verifier = Verifier::from_text(&go_verifier).expect("Go's verifier key");
    assert_eq!(verifier.name(), "witness.example/w1");
    let opened = open(&go_note, std::slice::from_ref(&verifier)).expect("open Go's note");
    assert_eq!(opened.text, TEXT);
    assert_eq!(opened.signed_by, ["witness.example/w1"]);

    // Go's signer key is ours to load (from the file Go wrote, mode 0600) and gives
    // the same verifier key, text for text, and the same note, byte for byte.
    let signer = Signer::from_text(&go_signer).expect("Go's signer key");
    assert_eq!(signer.to_text(), go_signer.trim_end());
    assert_eq!(signer.verifier(), verifier);
    assert_eq!(signer.verifier().to_text(), go_verifier.trim_end());
    assert_eq!(signer.sign(TEXT).expect("sign"), go_note);
    let loaded = load_key(&dir.path().join("signer")).expect("load Go's key file");
    assert_eq!(loaded.verifier(), verifier);

    // And Go's note changed by a byte: a bad signature by that known key.
    let altered = go_note.replacen("row_id", "row_ie", 1);
    assert!(matches!(
        open(&altered, &[verifier]),
        Err(NoteError::BadSignature { name }) if name == "witness.example/w1"
    ));
}
