//! `eventgate witness` through the real binary: its key as `witness keygen` writes
//! it, its configuration as `witness check-config` judges it, and `witness serve`
//! over real HTTP against a log built in memory. What the witness cosigns verifies
//! with its key; it never cosigns a tree head that is smaller than, or does not
//! extend, the one it recorded, not even after a restart; each refusal has the
//! status code of C2SP tlog-witness. The log's side, `add_checkpoint`, is used
//! against the same server.

use crate::support;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use eventgate::internal::note::{Signer, load_cosigner, load_key};
use eventgate::internal::tlog::{Frontier, Hash, TreeHead, WitnessKey, leaf_hash, prove_tree};
use eventgate::internal::witness::{WitnessError, add_checkpoint, verify_cosignature};
use support::witness::Witness;
use support::*;

const ORIGIN: &str = "web-1/eventgate/5f0c1b8e2d6a4c3f9e7b1a2d3c4e5f60";
const TIMEOUT: Duration = Duration::from_secs(10);

fn run(cmd: &mut Command) -> (bool, String, String) {
    let out = cmd.stdin(Stdio::null()).output().expect("run eventgate");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).expect("stat").permissions().mode() & 0o7777
}

/// A log kept in memory: its leaves' stored hashes, signed with a key from
/// `audit keygen`.
struct Log {
    signer: Signer,
    origin: String,
    frontier: Frontier,
    stored: Vec<Hash>,
    /// Distinguishes the leaves of two logs grown from the same start.
    tag: String,
}

impl Log {
    fn new(signer: Signer, origin: &str, tag: &str) -> Log {
        Log {
            signer,
            origin: origin.to_owned(),
            frontier: Frontier::default(),
            stored: Vec::new(),
            tag: tag.to_owned(),
        }
    }

    fn grow_to(&mut self, size: u64) {
        while self.frontier.size() < size {
            let n = self.frontier.size();
            let leaf = leaf_hash(format!("{} row {n}", self.tag).as_bytes());
            self.frontier.append(leaf, &mut self.stored);
        }
    }

    fn size(&self) -> u64 {
        self.frontier.size()
    }

    fn root(&self) -> Hash {
        self.frontier.root()
    }

    /// The signed checkpoint of the tree as it is now.
    fn checkpoint(&self) -> String {
        let head = TreeHead {
            origin: self.origin.clone(),
            size: self.size(),
            root: self.root(),
            extensions: vec!["node web-1".into(), format!("time {}", self.size())],
        };
        self.signer.sign(&head.to_text()).expect("sign")
    }

    fn proof_from(&mut self, old: u64) -> Vec<Hash> {
        match old {
            0 => Vec::new(),
            old => prove_tree(self.size(), old, &mut self.stored).expect("proof"),
        }
    }
}

fn body(old: u64, proof: &[Hash], note: &str) -> Vec<u8> {
    let mut body = format!("old {old}\n");
    for hash in proof {
        body.push_str(&STANDARD.encode(hash));
        body.push('\n');
    }
    body.push('\n');
    body.push_str(note);
    body.into_bytes()
}

#[derive(Debug)]
struct Answer {
    status: u16,
    content_type: String,
    body: String,
}

/// One HTTP/1.1 request on a fresh connection.
fn request(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> Answer {
    exchange(addr, method, path, body.len(), body)
}

/// A request whose headers declare `length` bytes of body, of which `body` is sent.
fn exchange(addr: SocketAddr, method: &str, path: &str, length: usize, body: &[u8]) -> Answer {
    let mut stream = std::net::TcpStream::connect(addr).expect("connect to the witness");
    stream.set_read_timeout(Some(DEADLINE)).expect("timeout");
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {length}\r\n\r\n",
    )
    .expect("write headers");
    stream.write_all(body).expect("write the body");
    let mut response = Vec::new();
    stream.read_to_end(&mut response).expect("read the answer");
    let response = String::from_utf8(response).expect("a UTF-8 answer");
    let (head, body) = response.split_once("\r\n\r\n").expect("headers end");
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("status line in {head:?}"));
    let header = |name: &str| {
        head.lines()
            .find_map(|line| {
                let (n, v) = line.split_once(':')?;
                n.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
            })
            .unwrap_or_default()
    };
    let body = match header("transfer-encoding").eq_ignore_ascii_case("chunked") {
        true => dechunk(body),
        false => body.to_owned(),
    };
    Answer {
        status,
        content_type: header("content-type"),
        body,
    }
}

fn add(addr: SocketAddr, old: u64, proof: &[Hash], note: &str) -> Answer {
    request(addr, "POST", "/add-checkpoint", &body(old, proof, note))
}

/// Checks the cosignature line(s) in a 200's body the way an independent verifier
/// would: the Ed25519 signature of `cosignature/v1\ntime T\n` and the note's text,
/// with the public key in the witness's verifier key.
fn assert_cosigned(answer: &Answer, note: &str, witness: &str) -> u64 {
    assert_eq!(answer.status, 200, "{answer:?}");
    let key = WitnessKey::from_text(witness).expect("witness key");
    let lines: Vec<String> = answer.body.lines().map(str::to_owned).collect();
    assert!(answer.body.ends_with('\n'), "{answer:?}");
    let time = verify_cosignature(&key, note, &lines).expect("the cosignature verifies");

    let (name, _, public) = {
        let mut parts = witness.splitn(3, '+');
        (
            parts.next().unwrap(),
            parts.next().unwrap(),
            parts.next().unwrap(),
        )
    };
    let public = STANDARD.decode(public).expect("base64");
    assert_eq!(public[0], 0x04, "a cosignature/v1 key");
    let public: [u8; 32] = public[1..].try_into().expect("32 bytes");
    let line = lines[0]
        .strip_prefix(&format!("\u{2014} {name} "))
        .expect("the witness's name");
    let raw = STANDARD.decode(line).expect("base64 signature");
    assert_eq!(raw.len(), 4 + 8 + 64);
    let stamped = u64::from_be_bytes(raw[4..12].try_into().unwrap());
    assert_eq!(stamped, time);
    let text = &note[..note.rfind("\n\n").expect("a note") + 1];
    let message = format!("cosignature/v1\ntime {stamped}\n{text}");
    let key = ed25519_dalek::VerifyingKey::from_bytes(&public).expect("key");
    let signature = ed25519_dalek::Signature::from_slice(&raw[12..]).expect("signature");
    key.verify_strict(message.as_bytes(), &signature)
        .expect("an Ed25519 signature over cosignature/v1, the time and the text");
    time
}

/// A witness key, a log key and a config naming the log, in `dir`.
struct Setup {
    witness_key: String,
    log_signer: Signer,
    config: PathBuf,
    data: PathBuf,
}

fn setup(dir: &Path) -> Setup {
    let witness_file = dir.join("witness.key");
    let witness_key = eventgate_stdout(&[
        "witness",
        "keygen",
        "witness.example.com/w1",
        "--out",
        path_str(&witness_file),
    ]);
    let log_file = dir.join("log.key");
    let log_key = eventgate_stdout(&[
        "audit",
        "keygen",
        "audit.example.com/web-1",
        "--out",
        path_str(&log_file),
    ]);
    let config = dir.join("witness.toml");
    std::fs::write(
        &config,
        format!(
            "key = {:?}\ndata_dir = {:?}\n\n[[log]]\norigin = {ORIGIN:?}\nkey = {:?}\n",
            path_str(&witness_file),
            // Under a file: a `serve` that should have refused the config cannot
            // start either (tests may run as root, who could create any other path).
            path_str(&log_file.join("state")),
            log_key.trim()
        ),
    )
    .expect("write config");
    Setup {
        witness_key: witness_key.trim().to_owned(),
        log_signer: load_key(&log_file).expect("the log's key"),
        config,
        data: dir.join("state"),
    }
}

#[test]
fn keygen_writes_a_private_cosigner_key_and_prints_its_witness_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let key = dir.path().join("w1.key");
    let (ok, out, err) = run(eventgate().args([
        "witness",
        "keygen",
        "witness.example.com/w1",
        "--out",
        path_str(&key),
    ]));
    assert!(ok, "{err}");
    assert_eq!(mode(&key), 0o600);
    assert_eq!(out.lines().count(), 1, "one line on stdout: {out:?}");
    let witness = WitnessKey::from_text(&out).expect("a witness key");
    assert_eq!(witness.name(), "witness.example.com/w1");
    assert!(err.contains(path_str(&key)), "{err}");
    assert_eq!(
        load_cosigner(&key).expect("loads").witness_key(),
        witness,
        "the file holds the key of the printed witness key"
    );
    // Not a log's key: `audit keygen`'s file is no cosigner key, and the reverse.
    assert!(load_key(&key).is_err());

    // Never overwritten: an error naming the file, the key unchanged, exit 1.
    let before = std::fs::read(&key).expect("read");
    let out = eventgate()
        .args(["witness", "keygen", "other", "--out", path_str(&key)])
        .stdin(Stdio::null())
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(path_str(&key)) && err.contains("already exists"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
    assert_eq!(std::fs::read(&key).expect("read"), before);

    // Without --out: NAME.key in the working directory, slashes made underscores.
    let (ok, out, err) = run(eventgate().current_dir(dir.path()).args([
        "witness",
        "keygen",
        "witness.example.com/w2",
    ]));
    assert!(ok, "{err}");
    let default = dir.path().join("witness.example.com_w2.key");
    assert_eq!(mode(&default), 0o600);
    assert_eq!(
        load_cosigner(&default).expect("loads").witness_key(),
        WitnessKey::from_text(&out).expect("witness key")
    );

    // A name the format cannot carry is refused, and no file is left.
    let (ok, _, err) = run(eventgate()
        .current_dir(dir.path())
        .args(["witness", "keygen", "a+b"]));
    assert!(!ok && err.contains("'+'"), "{err}");
    assert!(!dir.path().join("a+b.key").exists());
}

#[test]
fn check_config_and_serve_refuse_what_they_cannot_use_naming_the_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = setup(dir.path());
    let (ok, out, err) = run(eventgate().args(["witness", "check-config", path_str(&s.config)]));
    assert!(ok, "{err}");
    assert!(
        out.contains(": ok") && out.contains(&s.witness_key),
        "{out}"
    );
    assert!(out.contains(ORIGIN), "{out}");

    let good = std::fs::read_to_string(&s.config).expect("config");
    let witness_file = dir.path().join("witness.key");
    let log_file = dir.path().join("log.key");
    let cases = [
        (format!("{good}lisen = 1\n"), "lisen"),
        (
            good.replace("origin = ", "origin = \"\" #"),
            "`log[0].origin`",
        ),
        (
            good.replace(path_str(&witness_file), path_str(&log_file)),
            "`key`",
        ),
        (
            good.replace(path_str(&witness_file), "/nonexistent.key"),
            "witness keygen",
        ),
    ];
    for (text, expected) in &cases {
        std::fs::write(&s.config, text).expect("write");
        for command in ["check-config", "serve"] {
            let mut cmd = eventgate();
            cmd.args(["witness", command]);
            if command == "serve" {
                cmd.args(["--listen", "127.0.0.1:0", "--config"]);
            }
            let (ok, _, err) = run(cmd.arg(path_str(&s.config)));
            assert!(!ok && err.contains(expected), "{command} {text}: {err}");
        }
    }
    // A key file others can read is refused with the fix.
    std::fs::write(&s.config, &good).expect("write");
    std::fs::set_permissions(&witness_file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let (ok, _, err) = run(eventgate().args(["witness", "check-config", path_str(&s.config)]));
    assert!(!ok && err.contains("chmod 600"), "{err}");
}

#[test]
fn a_witness_cosigns_only_what_extends_the_tree_head_it_recorded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = setup(dir.path());
    let mut witness = Witness::start(&s.config, &s.data);
    let addr = witness.addr;
    let mut log = Log::new(s.log_signer, ORIGIN, "main");

    // The first checkpoint, old 0: cosigned, and the cosignature verifies.
    log.grow_to(5);
    let first = log.checkpoint();
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    let time = assert_cosigned(&add(addr, 0, &[], &first), &first, &s.witness_key);
    assert!(time >= before && time <= before + 60, "{time} vs {before}");

    // A later one with its consistency proof from 5: cosigned.
    log.grow_to(12);
    let proof = log.proof_from(5);
    let second = log.checkpoint();
    assert_cosigned(&add(addr, 5, &proof, &second), &second, &s.witness_key);

    // A stale old size, and a first checkpoint again: 409 with the current size.
    for (old, proof) in [(5, proof.clone()), (0, Vec::new())] {
        let answer = add(addr, old, &proof, &second);
        assert_eq!(answer.status, 409, "{answer:?}");
        assert_eq!(answer.content_type, "text/x.tlog.size");
        assert_eq!(answer.body, "12\n");
    }

    // Forks: the same size with another root (409), and a bigger tree that does not
    // extend the recorded one, with a valid proof of its own from its own 12 leaves
    // (422). Both refused; the witness keeps its head.
    let mut other = Log::new(
        load_key(&dir.path().join("log.key")).expect("key"),
        ORIGIN,
        "fork",
    );
    other.grow_to(12);
    let same_size = add(addr, 12, &[], &other.checkpoint());
    assert_eq!(same_size.status, 409, "{same_size:?}");
    assert_eq!(same_size.body, "12\n");
    other.grow_to(20);
    let forked_proof = other.proof_from(12);
    let bigger = add(addr, 12, &forked_proof, &other.checkpoint());
    assert_eq!(bigger.status, 422, "{bigger:?}");
    // A rollback to the older head: refused whichever old size it is sent with.
    let mut older = Log::new(
        load_key(&dir.path().join("log.key")).expect("key"),
        ORIGIN,
        "main",
    );
    older.grow_to(5);
    assert_eq!(add(addr, 12, &[], &older.checkpoint()).status, 400);
    assert_eq!(add(addr, 5, &[], &older.checkpoint()).status, 409);

    // Unknown origin: 404. Signed by another key: 403. A bad signature by the
    // log's key (text changed after signing): 403.
    let mut stranger = Log::new(
        Signer::generate("audit.example.com/web-1").expect("key"),
        ORIGIN,
        "main",
    );
    stranger.grow_to(20);
    let mut unknown = Log::new(
        load_key(&dir.path().join("log.key")).expect("key"),
        "web-9/eventgate/x",
        "main",
    );
    unknown.grow_to(3);
    assert_eq!(add(addr, 0, &[], &unknown.checkpoint()).status, 404);
    log.grow_to(20);
    let proof = log.proof_from(12);
    assert_eq!(add(addr, 12, &proof, &stranger.checkpoint()).status, 403);
    let tampered = log.checkpoint().replacen("node web-1", "node web-2", 1);
    assert_eq!(add(addr, 12, &proof, &tampered).status, 403);

    // Malformed bodies: 400 with the reason; an oversized one: 413.
    let answer = request(addr, "POST", "/add-checkpoint", b"old 012\n\nx");
    assert_eq!(answer.status, 400, "{answer:?}");
    assert!(answer.body.contains("leading zeros"), "{answer:?}");
    // Refused on its declared length, before any of it is read (sent, the unread
    // rest would make the witness's close a reset that can eat the answer).
    let answer = exchange(addr, "POST", "/add-checkpoint", 64 * 1024 + 1, b"");
    assert_eq!(answer.status, 413, "{answer:?}");
    // Not a POST: 405; not the protocol's path: 404.
    assert_eq!(request(addr, "GET", "/add-checkpoint", b"").status, 405);
    assert_eq!(request(addr, "POST", "/checkpoint", b"").status, 404);

    // After all that, the head is still 12: the right next checkpoint is cosigned.
    let third = log.checkpoint();
    assert_cosigned(&add(addr, 12, &proof, &third), &third, &s.witness_key);

    // The metrics say what happened.
    let (code, text) = http_get(addr, "/metrics");
    assert_eq!(code, 200, "{text}");
    let scrape = prometheus::parse(&text);
    let requests = |code: &str| {
        scrape
            .get("eventgate_witness_requests_total", &[("code", code)])
            .unwrap_or(0.0)
    };
    assert_eq!(requests("200"), 3.0, "{text}");
    assert_eq!(requests("409"), 4.0, "{text}");
    assert_eq!(requests("422"), 1.0, "{text}");
    assert_eq!(requests("403"), 2.0, "{text}");
    let origin = [("origin", ORIGIN)];
    assert_eq!(
        scrape.get("eventgate_witness_cosignatures_total", &origin),
        Some(3.0)
    );
    assert_eq!(
        scrape.get("eventgate_witness_forks_total", &origin),
        Some(2.0)
    );
    assert_eq!(
        scrape.get("eventgate_witness_tree_size", &origin),
        Some(20.0)
    );

    // Restarted, it still has the head: the first checkpoint again is a conflict
    // at 20, and the fork grown past it is still refused.
    witness.restart();
    let addr = witness.addr;
    let answer = add(addr, 0, &[], &first);
    assert_eq!((answer.status, answer.body.as_str()), (409, "20\n"));
    other.grow_to(25);
    let forked_proof = other.proof_from(20);
    assert_eq!(
        add(addr, 20, &forked_proof, &other.checkpoint()).status,
        422
    );
    log.grow_to(25);
    let proof = log.proof_from(20);
    let fourth = log.checkpoint();
    assert_cosigned(&add(addr, 20, &proof, &fourth), &fourth, &s.witness_key);
    witness.stop(nix::sys::signal::Signal::SIGINT);
}

#[tokio::test]
async fn the_log_side_submits_retries_from_the_witness_size_and_checks_the_cosignature() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = setup(dir.path());
    let witness = Witness::start(&s.config, &s.data);
    let url = witness.url();
    let key = WitnessKey::from_text(&s.witness_key).expect("key");
    let mut log = Log::new(s.log_signer, ORIGIN, "main");

    log.grow_to(7);
    let note = log.checkpoint();
    let lines = add_checkpoint(&url, 0, &[], &note, TIMEOUT)
        .await
        .expect("cosigned");
    verify_cosignature(&key, &note, &lines).expect("the witness's cosignature");
    // Another witness's key finds no cosignature of its own among the lines.
    let other = WitnessKey::from_text(&eventgate_stdout(&[
        "witness",
        "keygen",
        "witness.example.com/w9",
        "--out",
        path_str(&dir.path().join("w9.key")),
    ]))
    .expect("key");
    assert!(matches!(
        verify_cosignature(&other, &note, &lines),
        Err(WitnessError::BadCosignature { .. })
    ));
    // A line changed in transit (one bit of its signature) does not verify.
    let (prefix, encoded) = lines[0].rsplit_once(' ').expect("name and signature");
    let mut raw = STANDARD.decode(encoded).expect("base64");
    raw[40] ^= 1;
    let altered = format!("{prefix} {}", STANDARD.encode(raw));
    assert!(matches!(
        verify_cosignature(&key, &note, std::slice::from_ref(&altered)),
        Err(WitnessError::BadCosignature { .. })
    ));
    // Nor is it made good by a valid line beside it: the answer was tampered with.
    assert!(matches!(
        verify_cosignature(&key, &note, &[lines[0].clone(), altered]),
        Err(WitnessError::BadCosignature { .. })
    ));

    // The log lost track of what the witness has (it believes 0): a conflict
    // naming 7, then the proof from 7 is accepted.
    log.grow_to(30);
    let note = log.checkpoint();
    let size = match add_checkpoint(&url, 0, &[], &note, TIMEOUT).await {
        Err(WitnessError::Conflict { size }) => size,
        other => panic!("expected a conflict, got {other:?}"),
    };
    assert_eq!(size, 7);
    let proof = log.proof_from(size);
    let lines = add_checkpoint(&url, size, &proof, &note, TIMEOUT)
        .await
        .expect("cosigned after the retry");
    verify_cosignature(&key, &note, &lines).expect("verifies");

    // Refusals carry the status and the witness's reason.
    let mut unknown = Log::new(
        load_key(&dir.path().join("log.key")).expect("key"),
        "web-9/eventgate/x",
        "main",
    );
    unknown.grow_to(1);
    match add_checkpoint(&url, 0, &[], &unknown.checkpoint(), TIMEOUT).await {
        Err(WitnessError::Refused {
            status: 404, body, ..
        }) => {
            assert!(body.contains("web-9/eventgate/x"), "{body}")
        }
        other => panic!("expected 404, got {other:?}"),
    }
    // No witness there: unreachable, within the timeout.
    let closed = ClosedPort::new();
    let started = std::time::Instant::now();
    let error = add_checkpoint(
        &format!("http://127.0.0.1:{}", closed.port()),
        0,
        &[],
        &note,
        TIMEOUT,
    )
    .await
    .unwrap_err();
    assert!(
        matches!(error, WitnessError::Unreachable { .. }),
        "{error:?}"
    );
    assert!(started.elapsed() < TIMEOUT);
    drop(witness);
}
