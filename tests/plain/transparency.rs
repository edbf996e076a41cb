//! The attacks of docs/history.md ("What this does and does not protect against"),
//! made as root on the node makes them, against a real `eventgate serve` that signs
//! its audit store's tree heads and has them cosigned by a real `eventgate witness
//! serve`. The archive is the file forwarder's `events.jsonl`, copied away before
//! each attack as an off-host archive would hold it: on the node it is as writable as
//! the store. Each attack gets its verdict from `audit verify` (exit 1), and the
//! untouched store verifies (exit 0) against the same archive, or, where the attack
//! is in the archive, against the archive without it.

use crate::support;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use eventgate::internal::note::{Verifier, load_key, open};
use eventgate::internal::store::{WriterOptions, open_reader, open_writer};
use eventgate::internal::tlog::WitnessKey;
use eventgate::internal::witness::{WitnessError, add_checkpoint, verify_cosignature};
use eventgate::proto::Registry;
use eventgate::proto::containerd::services::events::v1::PublishRequest;
use serde_json::Value;
use support::audit::{Outcome, audit};
use support::witness::Witness;
use support::*;

const NODE: &str = "n1";
const KEY_NAME: &str = "audit.example/n1";
const WITNESS_NAME: &str = "w.example/w1";
const CHECKPOINT_TOPIC: &str = "/eventgate/audit/checkpoint";
const TIMEOUT: Duration = Duration::from_secs(10);

/// The attacked node (its gateway, signing key and audit store) and, off the node,
/// a witness and what the verifier keeps.
struct Node {
    gateway: Gateway,
    witness: Witness,
    /// The witness's host: its key and state, out of the node's reach.
    _witness_host: tempfile::TempDir,
    /// The verifier's copies of the archive, and the stores attacked.
    off_host: tempfile::TempDir,
    key_file: PathBuf,
    verifier: String,
    witness_key: String,
    origin: String,
}

/// One checkpoint line of an archive.
#[derive(Clone, Debug)]
struct Shipped {
    /// 1-based, as `audit verify` names it.
    line: usize,
    store: String,
    size: u64,
    row: i64,
    note: String,
    /// The witness's cosignature time (Unix seconds), if it cosigned.
    cosigned: Option<u64>,
}

fn keygen(kind: &str, name: &str, out: &Path) -> String {
    eventgate_stdout(&[kind, "keygen", name, "--out", path_str(out)])
        .trim()
        .to_owned()
}

impl Node {
    fn start() -> Node {
        Node::start_with("")
    }

    /// With `audit` keys for the `sqlite` forwarder (one a line).
    fn start_with(audit: &str) -> Node {
        let dir = tempfile::tempdir().expect("tempdir");
        let witness_host = tempfile::tempdir().expect("tempdir");
        let off_host = tempfile::tempdir().expect("tempdir");
        let key_file = dir.path().join("signing.key");
        let verifier = keygen("audit", KEY_NAME, &key_file);
        let witness_file = witness_host.path().join("witness.key");
        let witness_key = keygen("witness", WITNESS_NAME, &witness_file);

        // A witness serves only origins it is configured with, and the origin holds
        // the store's id, drawn when the store is made: made before the gateway
        // starts, the witness can serve from the gateway's first checkpoint on.
        let db = dir.path().join("data/audit.db");
        drop(open_writer(&db, &WriterOptions::default()).expect("make the store"));
        let head = eventgate_stdout(&["audit", "head", "--db", path_str(&db)]);
        let store = head
            .lines()
            .find_map(|l| l.strip_prefix("store "))
            .map(str::trim)
            .unwrap_or_else(|| panic!("no store line in {head}"));
        let origin = format!("{NODE}/eventgate/{store}");
        let witness_config = witness_host.path().join("witness.toml");
        std::fs::write(
            &witness_config,
            format!(
                "key = {:?}\n\n[[log]]\norigin = {origin:?}\nkey = {verifier:?}\n",
                path_str(&witness_file)
            ),
        )
        .expect("write the witness's config");
        let witness = Witness::start(&witness_config, &witness_host.path().join("state"));

        let config = dir.path().join("eventgate.toml");
        std::fs::write(
            &config,
            format!(
                "node = {NODE:?}\n\n[signing]\nkey = {:?}\ninterval = \"2s\"\nwitness_timeout = \"2s\"\n\n\
                 [[signing.witness]]\nurl = {:?}\nkey = {witness_key:?}\n\n\
                 [[forwarder]]\nname = \"log\"\nkind = \"file\"\npath = \"events.jsonl\"\n\n\
                 [[forwarder]]\nname = \"audit\"\nkind = \"sqlite\"\npath = \"audit.db\"\n{audit}",
                path_str(&key_file),
                witness.url()
            ),
        )
        .expect("write the gateway's config");
        let config = path_str(&config).to_owned();
        let gateway = Gateway::start_in(dir, &["--config", &config]);
        Node {
            gateway,
            witness,
            _witness_host: witness_host,
            off_host,
            key_file,
            verifier,
            witness_key,
            origin,
        }
    }

    fn db(&self) -> PathBuf {
        self.gateway.dir.path().join("data/audit.db")
    }

    fn log(&self) -> PathBuf {
        self.gateway.dir.path().join("data/events.jsonl")
    }

    fn off(&self, name: &str) -> PathBuf {
        self.off_host.path().join(name)
    }

    /// Exits of containers `c<from>`.. published through the gateway.
    fn publish(&self, from: usize, count: usize) {
        for n in from..from + count {
            let (ok, err) = publish_json(
                &self.gateway.address(),
                "default",
                "/tasks/exit",
                "containerd.events.TaskExit",
                &format!("{{\"container_id\":\"c{n}\",\"exit_status\":{n}}}"),
            );
            assert!(ok, "{err}");
        }
    }

    /// Waits until the exit of container `c<n>` is stored; its row.
    fn exit_stored(&self, n: usize) -> i64 {
        let db = self.db();
        wait_for(&format!("the exit of c{n} stored"), DEADLINE, || {
            open_reader(&db, Duration::from_secs(1))
                .ok()?
                .query_row(
                    "SELECT row_id FROM events WHERE topic = '/tasks/exit' \
                     AND json_extract(event, '$.container_id') = ?1",
                    [format!("c{n}")],
                    |r| r.get(0),
                )
                .ok()
        })
    }

    /// Waits until a checkpoint of `row` or a later one is shipped with the witness's
    /// cosignature.
    fn cosigned_from(&self, row: i64) -> Shipped {
        wait_for(
            &format!("a cosigned checkpoint of row_id {row} or later shipped"),
            DEADLINE,
            || {
                shipped(&self.log(), &self.witness_key)
                    .into_iter()
                    .find(|s| s.row >= row && s.cosigned.is_some())
            },
        )
    }

    /// The archive as the verifier has it: every whole line shipped so far, copied
    /// off the node to `name`.
    fn archive(&self, name: &str) -> PathBuf {
        let text = std::fs::read_to_string(self.log()).expect("read the file forwarder's log");
        let whole = &text[..text.rfind('\n').map_or(0, |i| i + 1)];
        let to = self.off(name);
        std::fs::write(&to, whole).expect("copy the archive");
        to
    }

    /// `audit verify --db DB --key K --checkpoints ARCHIVE EXTRA...`.
    fn verify(&self, db: &Path, archive: &Path, extra: &[&str]) -> Outcome {
        audit(
            &[
                &[
                    "verify",
                    "--db",
                    path_str(db),
                    "--key",
                    &self.verifier,
                    "--checkpoints",
                    path_str(archive),
                ][..],
                extra,
            ]
            .concat(),
        )
    }

    /// The tree head the witness recorded for the log: size, root, the note.
    fn witness_head(&self) -> (u64, Vec<u8>, String) {
        let conn = self.witness_state();
        conn.query_row(
            "SELECT size, root, note FROM heads WHERE origin = ?1",
            [&self.origin],
            |r| Ok((r.get::<_, i64>(0)?, r.get(1)?, r.get(2)?)),
        )
        .map(|(size, root, note)| (size.unsigned_abs(), root, note))
        .expect("the witness's recorded head")
    }

    /// How many checkpoints the witness kept as forks of the log.
    fn witness_forks(&self) -> i64 {
        self.witness_state()
            .query_row(
                "SELECT count(*) FROM forks WHERE origin = ?1",
                [&self.origin],
                |r| r.get(0),
            )
            .expect("the witness's forks")
    }

    fn witness_state(&self) -> rusqlite::Connection {
        rusqlite::Connection::open_with_flags(
            self.witness.data.join("witness.db"),
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
        )
        .expect("open witness.db")
    }

    /// Polls the admin endpoint's `/readyz` until it answers 503 saying each of
    /// `words`; the body.
    fn not_ready_saying(&mut self, words: &[&str]) -> String {
        let admin = self.gateway.admin_addr();
        wait_for(&format!("/readyz saying {words:?}"), DEADLINE, || {
            let (code, body) = http_get(admin, "/readyz");
            (code == 503 && words.iter().all(|w| body.contains(w))).then_some(body)
        })
    }
}

/// Every checkpoint line of the JSON-lines archive at `path`, its cosignature by the
/// witness (`witness_key`) checked.
fn shipped(path: &Path, witness_key: &str) -> Vec<Shipped> {
    let key = WitnessKey::from_text(witness_key).expect("witness key");
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .enumerate()
        .filter_map(|(i, line)| {
            let line: Value = serde_json::from_str(line).ok()?;
            if line["topic"] != CHECKPOINT_TOPIC {
                return None;
            }
            let note = line["event"]["note"].as_str()?.to_owned();
            let field = |name: &str| {
                note.lines()
                    .find_map(|l| l.strip_prefix(&format!("{name} ")))
                    .map(str::to_owned)
            };
            let cosignature: Vec<String> = note
                .lines()
                .filter(|l| l.starts_with(&format!("\u{2014} {WITNESS_NAME} ")))
                .map(str::to_owned)
                .collect();
            Some(Shipped {
                line: i + 1,
                store: field("store")?,
                size: note.lines().nth(1)?.parse().ok()?,
                row: field("row")?.parse().ok()?,
                cosigned: verify_cosignature(&key, &note, &cosignature).ok(),
                note,
            })
        })
        .collect()
}

/// A consistent copy of the store at `from` (which a gateway may be writing, or may
/// have been killed while writing) at `to`: `sqlite3 FROM "VACUUM INTO 'TO'"`.
fn snapshot(from: &Path, to: &Path) -> PathBuf {
    open_reader(from, Duration::from_secs(5))
        .expect("open the store")
        .execute("VACUUM INTO ?1", [path_str(to)])
        .expect("VACUUM INTO");
    to.to_path_buf()
}

fn sql(db: &Path, statements: &str) {
    rusqlite::Connection::open(db)
        .expect("open")
        .execute_batch(statements)
        .expect("sql");
}

fn query_i64(db: &Path, query: &str) -> i64 {
    rusqlite::Connection::open(db)
        .expect("open")
        .query_row(query, [], |r| r.get(0))
        .expect(query)
}

fn shown(outcome: &Outcome) -> String {
    format!(
        "exit {:?}\nstdout:\n{}stderr:\n{}",
        outcome.code, outcome.stdout, outcome.stderr
    )
}

/// Tampering found: exit 1, `TAMPERED`, and the verdict's line begins `KIND: ` and
/// says each of `words`. The line.
fn assert_verdict(outcome: &Outcome, kind: &str, words: &[&str]) -> String {
    assert_eq!(outcome.code, Some(1), "{kind}: {}", shown(outcome));
    let mut lines = outcome.stdout.lines();
    assert!(
        lines.next().is_some_and(|l| l.ends_with(": TAMPERED")),
        "{kind}: {}",
        shown(outcome)
    );
    let verdict = lines.next().unwrap_or_default().to_owned();
    assert!(
        verdict.starts_with(&format!("{kind}: ")),
        "{kind}: {}",
        shown(outcome)
    );
    for word in words {
        assert!(
            verdict.contains(word),
            "{kind}, {word:?}: {}",
            shown(outcome)
        );
    }
    verdict
}

fn assert_intact(outcome: &Outcome) {
    assert_eq!(outcome.code, Some(0), "{}", shown(outcome));
    assert!(
        outcome
            .stdout
            .lines()
            .next()
            .is_some_and(|l| l.ends_with(": intact")),
        "{}",
        shown(outcome)
    );
}

/// The text of a signed note: every line before its signatures, newline included.
fn text_of(note: &str) -> &str {
    &note[..note.find("\n\n").expect("a signed note") + 1]
}

/// `text` with the line starting `KEY ` set to `KEY VALUE`.
fn with_line(text: &str, key: &str, value: &str) -> String {
    let prefix = format!("{key} ");
    let mut found = false;
    let lines: Vec<String> = text
        .lines()
        .map(|l| match l.starts_with(&prefix) {
            true => {
                found = true;
                format!("{prefix}{value}")
            }
            false => l.to_owned(),
        })
        .collect();
    assert!(found, "no {key} line in {text}");
    lines.join("\n") + "\n"
}

/// `archive` with one more line: a copy of its last checkpoint line whose note is
/// `note`, as the file forwarder would have written it.
fn appended(archive: &Path, note: &str, to: &Path) -> PathBuf {
    let text = std::fs::read_to_string(archive).expect("read the archive");
    let mut line: Value = text
        .lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|l| l["topic"] == CHECKPOINT_TOPIC)
        .expect("a checkpoint line");
    line["event"]["note"] = Value::String(note.to_owned());
    std::fs::write(to, format!("{text}{line}\n")).expect("write the archive");
    to.to_path_buf()
}

fn block_on<F: Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(future)
}

/// `POST /add-checkpoint` of `note` with the proof-less body of old size `old`, as a
/// log (or whoever holds its key) submits it.
fn submit(witness: &Witness, old: u64, note: &str) -> Result<Vec<String>, WitnessError> {
    block_on(add_checkpoint(&witness.url(), old, &[], note, TIMEOUT))
}

/// A run of the node's gateway that root ends: two batches of exits, each covered
/// by a checkpoint the witness cosigned, with a copy of the store taken between them
/// (a backup to restore later); `while_running` is called before the kill. SIGKILL,
/// as root stops it: no last checkpoint is signed, so the archive ends with the last
/// one the witness cosigned while the gateway ran.
struct Killed {
    /// The archive copied off the node after the kill.
    archive: PathBuf,
    /// A copy of the store as the gateway left it, untouched.
    pristine: PathBuf,
    /// The backup, and the head its audit_chain records.
    older: PathBuf,
    older_head: i64,
    checkpoints: Vec<Shipped>,
    newest: Shipped,
}

fn killed_after_two_batches(node: &mut Node, while_running: impl FnOnce(&Node)) -> Killed {
    node.publish(0, 4);
    let first = node.exit_stored(3);
    node.cosigned_from(first);
    let older = snapshot(&node.db(), &node.off("older.db"));
    let older_head = query_i64(&older, "SELECT head_row_id FROM audit_chain");
    node.publish(4, 4);
    let last = node.exit_stored(7);
    node.cosigned_from(last.max(older_head + 1));
    while_running(node);
    node.gateway.kill9();
    let archive = node.archive("archive.jsonl");
    let checkpoints = shipped(&archive, &node.witness_key);
    let newest = checkpoints.last().expect("checkpoints").clone();
    assert!(
        newest.cosigned.is_some(),
        "the newest checkpoint shipped is not cosigned: {newest:?}"
    );
    let pristine = snapshot(&node.db(), &node.off("pristine.db"));
    // Untouched: intact with the archive, witnessed and recent.
    let outcome = node.verify(
        &pristine,
        &archive,
        &["--witness-key", &node.witness_key, "--max-age", "1m"],
    );
    assert_intact(&outcome);
    assert!(
        outcome.stdout.contains("cosigned by enough witnesses"),
        "{}",
        shown(&outcome)
    );
    Killed {
        archive,
        pristine,
        older,
        older_head,
        checkpoints,
        newest,
    }
}

/// Hashes per row of `audit_tree_hashes` (migrations/0014_tree.sql).
const CHUNK: u64 = 126;

/// What root who read migrations/README.md does after changing rows from `from` on:
/// every chain hash from there recomputed with the store's own hashing, audit_chain's
/// head set to the last row, and the Merkle tree cut back to the leaves before
/// `from`, for the store's own writer to rebuild from the rows when it opens the
/// store (as it does for a store made before the tree existed).
fn recompute_from(db: &Path, from: i64) {
    let prev = support::audit::rehash_from(db, from);
    {
        let conn = rusqlite::Connection::open(db).expect("open");
        conn.execute(
            "UPDATE audit_chain SET head_row_id = (SELECT max(row_id) FROM events),
                 head_seq = (SELECT seq FROM events ORDER BY row_id DESC LIMIT 1),
                 head_hash = ?1",
            [prev],
        )
        .expect("the head");
        let first = query_i64(db, "SELECT first_row_id FROM audit_tree");
        let leaves = u64::try_from(from - first).expect("a row of the tree");
        let stored = eventgate::internal::tlog::stored_hash_count(leaves);
        let (chunk, offset) = (stored / CHUNK, stored % CHUNK);
        conn.execute_batch(&format!(
            "UPDATE audit_tree SET size = {leaves};
             DELETE FROM audit_tree_hashes WHERE chunk > {chunk};
             UPDATE audit_tree_hashes SET hashes = substr(hashes, 1, {offset} * 32) WHERE chunk = {chunk};
             DELETE FROM audit_tree_hashes WHERE length(hashes) = 0;"
        ))
        .expect("cut the tree");
    }
    drop(open_writer(db, &WriterOptions::default()).expect("the writer rebuilds the tree"));
    let size = query_i64(db, "SELECT size FROM audit_tree");
    let head = query_i64(db, "SELECT head_row_id FROM audit_chain");
    let first = query_i64(db, "SELECT first_row_id FROM audit_tree");
    assert_eq!(
        first + size - 1,
        head,
        "the tree was rebuilt up to the head"
    );
}

/// Root on a node whose gateway was stopped changes copies of the store under the
/// checkpoints shipped: rows edited, inserted, deleted or reordered with every hash,
/// the tree and audit_chain recomputed, faked retention, rows cut off the end, an
/// older copy restored. Each passes keyless verification and is caught against the
/// archive; the witness refuses the older tree head. Rows added after the newest
/// checkpoint are not caught, as documented.
#[test]
fn rewriting_the_store_under_shipped_checkpoints_is_caught() {
    let mut node = Node::start();
    let run = killed_after_two_batches(&mut node, |_| ());
    let (archive, pristine, newest) = (&run.archive, &run.pristine, &run.newest);
    // The first checkpoint at or after a row: where a change to that row shows.
    let caught_at = |row: i64| {
        run.checkpoints
            .iter()
            .map(|s| s.row)
            .filter(|r| *r >= row)
            .min()
            .expect("a later checkpoint")
    };
    let exits = |db: &Path| -> Vec<i64> {
        let conn = rusqlite::Connection::open(db).expect("open");
        let mut statement = conn
            .prepare("SELECT row_id FROM events WHERE topic = '/tasks/exit' ORDER BY row_id")
            .expect("prepare");
        statement
            .query_map([], |r| r.get(0))
            .expect("query")
            .collect::<Result<_, _>>()
            .expect("rows")
    };
    let at = exits(pristine)[2];

    // Rows changed at `at`, everything after it recomputed.
    let edited = snapshot(pristine, &node.off("edited.db"));
    sql(
        &edited,
        &format!(
            "UPDATE events SET event = json_set(event, '$.exit_status', 0) WHERE row_id = {at}"
        ),
    );
    let inserted = snapshot(pristine, &node.off("inserted.db"));
    sql(
        &inserted,
        &format!(
            "UPDATE events SET row_id = row_id + 100000 WHERE row_id >= {at};
             UPDATE events SET row_id = row_id - 99999 WHERE row_id > 100000;
             INSERT INTO events (row_id, seq, id, timestamp, received_at, namespace, topic,
                 type_url, payload, event, source, origin, node)
             SELECT {at}, 999, 'made-up', timestamp, received_at, namespace, topic, type_url,
                 payload, json_set(event, '$.container_id', 'nobody'), source, origin, node
             FROM events WHERE row_id = {at} + 1;"
        ),
    );
    let deleted = snapshot(pristine, &node.off("deleted.db"));
    sql(
        &deleted,
        &format!(
            "DELETE FROM events WHERE row_id = {at};
             UPDATE events SET row_id = row_id + 100000 WHERE row_id > {at};
             UPDATE events SET row_id = row_id - 100001 WHERE row_id > 100000;"
        ),
    );
    let reordered = snapshot(pristine, &node.off("reordered.db"));
    sql(
        &reordered,
        &format!(
            "UPDATE events SET row_id = -1 WHERE row_id = {at};
             UPDATE events SET row_id = {at} WHERE row_id = {at} + 1;
             UPDATE events SET row_id = {at} + 1 WHERE row_id = -1;"
        ),
    );
    for db in [&edited, &inserted, &deleted, &reordered] {
        recompute_from(db, at);
        // The chain alone is fooled ...
        assert_intact(&audit(&["verify", "--db", path_str(db)]));
        // ... the checkpoints shipped before are not.
        assert_verdict(
            &node.verify(db, archive, &[]),
            "rewritten",
            &[
                &format!("row_id {} (", caught_at(at)),
                &format!("for row_id {}", caught_at(at)),
                "rows up to here were changed after it was signed",
            ],
        );
    }

    // A row added after the newest checkpoint: the chain is all there is to check
    // it, and root recomputed that (docs: "Not detected").
    let appended_row = snapshot(pristine, &node.off("appended.db"));
    let head = query_i64(&appended_row, "SELECT head_row_id FROM audit_chain");
    assert!(head >= newest.row);
    sql(
        &appended_row,
        &format!(
            "INSERT INTO events (row_id, seq, id, timestamp, received_at, namespace, topic,
                 type_url, payload, event, source, origin, node)
             SELECT {head} + 1, 999, 'made-up', timestamp, received_at, namespace, topic, type_url,
                 payload, json_set(event, '$.container_id', 'nobody'), source, origin, node
             FROM events WHERE row_id = {at};"
        ),
    );
    recompute_from(&appended_row, head + 1);
    assert_intact(&node.verify(&appended_row, archive, &[]));

    // Faked retention: the oldest rows deleted and audit_chain's pruned_* set as
    // retention sets them (the boundary row's record read with `audit prove`), with
    // no retention configured.
    let pruned = snapshot(pristine, &node.off("pruned.db"));
    fake_retention(&pruned, 3, &newest.note);
    // The chain alone takes it for retention ...
    let keyless = audit(&["verify", "--db", path_str(&pruned)]);
    assert_intact(&keyless);
    assert!(
        keyless.stdout.contains("pruned        3 rows"),
        "{}",
        shown(&keyless)
    );
    // ... the checkpoints, which say `retention none`, do not.
    assert_verdict(
        &node.verify(&pruned, archive, &[]),
        "retention not allowed",
        &[
            "row_id 1 to 3 were deleted after the newest checkpoint",
            "which says retention none",
        ],
    );

    // Rows cut off the end and audit_chain's head moved back to match.
    let cut = snapshot(pristine, &node.off("cut.db"));
    let kept = newest.row - 3;
    sql(
        &cut,
        &format!(
            "DELETE FROM events WHERE row_id > {kept};
             UPDATE audit_chain SET head_row_id = {kept},
                 head_seq = (SELECT seq FROM events WHERE row_id = {kept}),
                 head_hash = (SELECT hash FROM events WHERE row_id = {kept});"
        ),
    );
    assert_intact(&audit(&["verify", "--db", path_str(&cut)]));
    assert_verdict(
        &node.verify(&cut, archive, &[]),
        "rolled back",
        &[
            &format!("row_id {kept} ("),
            &format!(
                "row_id {} to {} ({} rows) were cut off the end",
                kept + 1,
                newest.row,
                newest.row - kept
            ),
        ],
    );

    // The backup restored: an older tree head, which the archive has outgrown.
    let older_head = run.older_head;
    assert_intact(&audit(&["verify", "--db", path_str(&run.older)]));
    assert_verdict(
        &node.verify(&run.older, archive, &[]),
        "rolled back",
        &[
            &format!("row_id {older_head} ("),
            &format!("row_id {} to {}", older_head + 1, newest.row),
            "restored from an older copy",
        ],
    );
    // Nor will the witness cosign a tree head older than the one it recorded.
    let (recorded, _, _) = node.witness_head();
    let old = run
        .checkpoints
        .iter()
        .find(|s| s.cosigned.is_some() && s.size < recorded)
        .expect("an older cosigned checkpoint");
    match submit(&node.witness, old.size, &old.note) {
        Err(WitnessError::Conflict { size }) => assert_eq!(size, recorded),
        other => panic!("an older tree head: {other:?}"),
    }
    assert_eq!(node.witness_head().0, recorded, "the witness went back");
}

/// Deletes rows up to `to` and sets audit_chain's `pruned_*` as retention does, the
/// boundary row's record read with `audit prove` against `checkpoint` (a note).
fn fake_retention(db: &Path, to: i64, checkpoint: &str) {
    let note = db.with_extension("note");
    std::fs::write(&note, checkpoint).expect("write the note");
    let proof = audit(&[
        "prove",
        "--db",
        path_str(db),
        "--row",
        &to.to_string(),
        "--checkpoint",
        path_str(&note),
    ]);
    assert_eq!(proof.code, Some(0), "{}", shown(&proof));
    let record = proof
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("record "))
        .expect("the record line");
    let record = STANDARD.decode(record).expect("base64");
    let conn = rusqlite::Connection::open(db).expect("open");
    conn.execute(
        "UPDATE audit_chain SET pruned_row_id = ?1,
             pruned_seq = (SELECT seq FROM events WHERE row_id = ?1),
             pruned_timestamp = (SELECT timestamp FROM events WHERE row_id = ?1),
             pruned_hash = (SELECT hash FROM events WHERE row_id = ?1),
             pruned_rows = pruned_rows + (SELECT count(*) FROM events WHERE row_id <= ?1),
             pruned_at = strftime('%Y-%m-%dT%H:%M:%f000000Z'),
             pruned_record = ?2
         WHERE id = 1",
        rusqlite::params![to, record],
    )
    .expect("set pruned_*");
    conn.execute("DELETE FROM events WHERE row_id <= ?1", [to])
        .expect("delete");
}

/// Root with the signing key in hand signs what the gateway never did, or adds
/// lines to the archive: nothing gets through the gateway; a line changed or
/// without a note, a second history of a row, a fork of a tree size, a checkpoint
/// whose time goes back are caught, the good checkpoints still used; the witness
/// refuses the fork and cosigns a back-dated checkpoint with its own time, which
/// shows it; and once checkpoints stop, `--max-age` says so.
#[test]
fn checkpoints_signed_with_the_key_or_added_to_the_archive_are_caught() {
    let mut node = Node::start();
    let signer = load_key(&node.key_file).expect("the signing key");
    let planted = std::cell::RefCell::new(String::new());
    let run = killed_after_two_batches(&mut node, |node| {
        // A local publisher, even one holding the key, cannot ship a checkpoint
        // through the gateway: the namespace and topic are the gateway's own.
        let newest = shipped(&node.log(), &node.witness_key)
            .pop()
            .expect("a checkpoint");
        let note = signer
            .sign(&with_line(text_of(&newest.note), "hash", &"1".repeat(64)))
            .expect("sign");
        for (namespace, topic) in [
            ("eventgate", CHECKPOINT_TOPIC),
            ("default", CHECKPOINT_TOPIC),
        ] {
            let any = Registry::global()
                .encode_json(
                    "eventgate.events.v1.AuditCheckpoint",
                    &serde_json::json!({ "note": note }).to_string(),
                )
                .expect("encode");
            let mut request = tonic::Request::new(PublishRequest {
                topic: topic.into(),
                event: Some(any),
            });
            request
                .metadata_mut()
                .insert("containerd-namespace", namespace.parse().expect("header"));
            let status = block_on(async { node.gateway.client().await.publish(request).await })
                .expect_err("a checkpoint published by a client");
            assert_eq!(
                status.code(),
                tonic::Code::InvalidArgument,
                "{namespace} {topic}: {status:?}"
            );
            assert!(
                status.message().contains("is reserved"),
                "{namespace} {topic}: {status:?}"
            );
        }
        *planted.borrow_mut() = note;
    });
    let (archive, pristine, newest) = (&run.archive, &run.pristine, &run.newest);
    assert!(
        run.checkpoints.iter().all(|s| s.note != *planted.borrow()),
        "the planted note was shipped"
    );
    let with_witness = ["--witness-key", node.witness_key.as_str()];
    let appended_line = line_count(archive) + 1;

    // Lines added to the archive by hand: a note changed after it was signed, and a
    // checkpoint line without a note.
    let (text, signatures) = newest.note.split_at(text_of(&newest.note).len());
    let forged = appended(
        archive,
        &(with_line(text, "hash", &"0".repeat(64)) + signatures),
        &node.off("forged.jsonl"),
    );
    let says = format!(
        "the note at line {appended_line} of {} (it says: row_id {} of store {}",
        path_str(&forged),
        newest.row,
        newest.store
    );
    let outcome = node.verify(pristine, &forged, &[]);
    assert_verdict(&outcome, "forged checkpoint", &[&says, "does not verify"]);
    // The good checkpoints are still used: every row was walked against them ...
    assert!(
        outcome.stdout.contains("rows verified before it"),
        "{}",
        shown(&outcome)
    );
    // ... and convict a store cut short, the archive's problem following.
    let cut = snapshot(pristine, &node.off("cut.db"));
    let kept = newest.row - 3;
    sql(
        &cut,
        &format!(
            "DELETE FROM events WHERE row_id > {kept};
             UPDATE audit_chain SET head_row_id = {kept},
                 head_seq = (SELECT seq FROM events WHERE row_id = {kept}),
                 head_hash = (SELECT hash FROM events WHERE row_id = {kept});"
        ),
    );
    let outcome = node.verify(&cut, &forged, &[]);
    assert_verdict(&outcome, "rolled back", &["were cut off the end"]);
    assert!(
        outcome
            .stdout
            .lines()
            .any(|l| l.starts_with("also forged checkpoint: ") && l.contains(&says)),
        "{}",
        shown(&outcome)
    );
    let malformed = node.off("malformed.jsonl");
    std::fs::write(
        &malformed,
        format!(
            "{}{}\n",
            std::fs::read_to_string(archive).expect("read"),
            serde_json::json!({ "topic": CHECKPOINT_TOPIC, "namespace": "eventgate", "event": {} })
        ),
    )
    .expect("write");
    assert_verdict(
        &node.verify(pristine, &malformed, &[]),
        "archive tampered",
        &[
            &format!(
                "the note at line {appended_line} of {}",
                path_str(&malformed)
            ),
            "has no note at event.note",
            "eventgate never ships there",
        ],
    );

    // A second history of a shipped row, signed with the key.
    let other_hash = "2".repeat(64);
    let conflicting = appended(
        archive,
        &signer
            .sign(&with_line(text, "hash", &other_hash))
            .expect("sign"),
        &node.off("conflicting.jsonl"),
    );
    assert_verdict(
        &node.verify(pristine, &conflicting, &[]),
        "conflicting checkpoints",
        &[
            &format!("row_id {} (", newest.row),
            &format!("(line {appended_line} of {})", path_str(&conflicting)),
            &format!("(line {} of {})", newest.line, path_str(&conflicting)),
            &other_hash,
            newest
                .note
                .lines()
                .find_map(|l| l.strip_prefix("hash "))
                .expect("a hash line"),
            "the signing key signed two histories of this store",
        ],
    );

    // A checkpoint naming the newest as the one before it, a minute earlier.
    let newest_time = text
        .lines()
        .find_map(|l| l.strip_prefix("time "))
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .expect("a time line");
    let rfc3339 = |t: chrono::DateTime<chrono::FixedOffset>| {
        t.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true)
    };
    let prev = {
        use sha2::Digest;
        sha2::Sha256::digest(newest.note.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    let earlier = with_line(
        &with_line(
            text,
            "time",
            &rfc3339(newest_time - chrono::Duration::minutes(1)),
        ),
        "prev",
        &prev,
    );
    let set_back = appended(
        archive,
        &signer.sign(&earlier).expect("sign"),
        &node.off("set-back.jsonl"),
    );
    assert_verdict(
        &node.verify(pristine, &set_back, &[]),
        "back-dated",
        &[
            &format!(
                "(line {appended_line} of {}) names as the one before it",
                path_str(&set_back)
            ),
            &format!("(line {} of", newest.line),
            "which was signed later: its time was set back",
        ],
    );

    // A fork signed with the key: the size the witness recorded with another root.
    let (recorded, root, recorded_note) = node.witness_head();
    let recorded_text = text_of(&recorded_note);
    let mut lines: Vec<&str> = recorded_text.lines().collect();
    let other_root = STANDARD.encode([7u8; 32]);
    assert_ne!(lines[2], other_root);
    lines[2] = &other_root;
    let fork = signer
        .sign(&(lines.join("\n") + "\n"))
        .expect("sign the fork");
    let forks = node.witness_forks();
    match submit(&node.witness, recorded, &fork) {
        Err(WitnessError::Conflict { size }) => assert_eq!(size, recorded),
        other => panic!("a fork: {other:?}"),
    }
    assert_eq!(
        node.witness_head(),
        (recorded, root, recorded_note.clone()),
        "the witness's head moved"
    );
    assert_eq!(node.witness_forks(), forks + 1, "the fork was not kept");
    let forked = appended(archive, &fork, &node.off("fork.jsonl"));
    assert_verdict(
        &node.verify(pristine, &forked, &[]),
        "rewritten",
        &[
            &format!("the store's tree of {recorded} leaves has root"),
            &format!("signed {other_root}"),
        ],
    );

    // The recorded head signed again back-dated by an hour, naming no predecessor
    // (whose later time would give it away). The witness cosigns it: it vouches for
    // the tree, not the time, and stamps its own.
    let recorded_time = recorded_text
        .lines()
        .find_map(|l| l.strip_prefix("time "))
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .expect("a time line");
    let back_dated = signer
        .sign(&with_line(
            &with_line(
                recorded_text,
                "time",
                &rfc3339(recorded_time - chrono::Duration::hours(1)),
            ),
            "prev",
            "-",
        ))
        .expect("sign");
    let cosignature = submit(&node.witness, recorded, &back_dated).expect("cosigned");
    let witness = WitnessKey::from_text(&node.witness_key).expect("witness key");
    verify_cosignature(&witness, &back_dated, &cosignature).expect("a good cosignature");
    let back_dated_archive = appended(
        archive,
        &format!("{back_dated}{}\n", cosignature.join("\n")),
        &node.off("back-dated.jsonl"),
    );
    // Without witnesses, nothing shows it ...
    assert_intact(&node.verify(pristine, &back_dated_archive, &[]));
    // ... the witness's time does.
    assert_verdict(
        &node.verify(pristine, &back_dated_archive, &with_witness),
        "back-dated",
        &[
            &format!("by {WITNESS_NAME}"),
            "its own time is more than 10m earlier, so it was back-dated",
        ],
    );

    // Silence: with the gateway stopped, the newest cosignature only ages.
    let cosigned_at = newest.cosigned.expect("cosigned");
    let stale_from = UNIX_EPOCH + Duration::from_secs(cosigned_at + 6);
    wait_for(
        "the newest cosignature to be more than 5s old",
        DEADLINE,
        || (SystemTime::now() >= stale_from).then_some(()),
    );
    assert_verdict(
        &node.verify(
            pristine,
            archive,
            &[&with_witness[..], &["--max-age", "5s"]].concat(),
        ),
        "stale",
        &["more than --max-age 5s", "checkpoints stopped arriving"],
    );
    assert_intact(&node.verify(
        pristine,
        archive,
        &[&with_witness[..], &["--max-age", "1m"]].concat(),
    ));
}

/// With a retention policy, the rows it deletes verify; deleting more than it
/// allows, the way it deletes, is caught by the boundary row's proven received time
/// and place, and a count of deleted rows rewritten downwards by the counts the
/// checkpoints signed.
#[test]
fn retention_beyond_the_signed_policy_is_caught() {
    let mut node =
        Node::start_with("retention = { max_age = \"1h\", max_rows = 8, interval = \"1s\" }\n");
    node.publish(0, 12);
    let last = node.exit_stored(11);
    wait_for(
        "a cosigned checkpoint of the last exit that counts rows retention deleted",
        DEADLINE,
        || {
            shipped(&node.log(), &node.witness_key)
                .iter()
                .any(|s| s.row >= last && s.cosigned.is_some() && pruned_rows(&s.note) > 0)
                .then_some(())
        },
    );
    node.gateway.kill9();
    let archive = node.archive("archive.jsonl");
    let newest = shipped(&archive, &node.witness_key)
        .pop()
        .expect("checkpoints");
    assert!(pruned_rows(&newest.note) > 0, "{newest:?}");
    let pristine = snapshot(&node.db(), &node.off("pristine.db"));

    // What retention deleted, as its policy allows: intact.
    let outcome = node.verify(&pristine, &archive, &[]);
    assert_intact(&outcome);
    assert!(
        outcome.stdout.contains("\npruned ") && !outcome.stdout.contains("\npruned        0 rows"),
        "{}",
        shown(&outcome)
    );

    // More deleted the way retention deletes, up to a row received seconds ago and
    // followed by fewer rows than the policy keeps.
    let boundary = newest.row - 1;
    let beyond = snapshot(&pristine, &node.off("beyond.db"));
    fake_retention(&beyond, boundary, &newest.note);
    let rows_after = query_i64(&beyond, "SELECT head_row_id FROM audit_chain") - boundary;
    assert!(rows_after < 8, "{rows_after} rows after the boundary");
    assert_intact(&audit(&["verify", "--db", path_str(&beyond)]));
    assert_verdict(
        &node.verify(&beyond, &archive, &[]),
        "retention not allowed",
        &[
            &format!("retention deleted up to row_id {boundary}, received at"),
            "but the policy in force (max_age=3600s max_rows=8) keeps that row",
            &format!("when {rows_after} rows followed it"),
        ],
    );

    // The count of rows retention deleted made smaller than a checkpoint signed.
    let signed = pruned_rows(&newest.note);
    let recounted = snapshot(&pristine, &node.off("recounted.db"));
    sql(
        &recounted,
        &format!("UPDATE audit_chain SET pruned_rows = {}", signed - 1),
    );
    assert_intact(&audit(&["verify", "--db", path_str(&recounted)]));
    assert_verdict(
        &node.verify(&recounted, &archive, &[]),
        "audit_chain tampered",
        &[
            &format!("audit_chain.pruned_rows is {}", signed - 1),
            "the record of retention was rewritten",
        ],
    );
}

/// The rows retention had deleted when a checkpoint was signed (its `pruned` line).
fn pruned_rows(note: &str) -> i64 {
    note.lines()
        .find_map(|l| l.strip_prefix("pruned "))
        .and_then(|p| p.split(' ').next())
        .and_then(|n| n.parse().ok())
        .expect("a pruned line")
}

/// The number of lines of a file: where a line appended to it lands.
fn line_count(path: &Path) -> usize {
    std::fs::read_to_string(path).expect("read").lines().count()
}

/// The store deleted while the gateway was stopped, and made anew at its start: the
/// old store's checkpoints in the archive convict the new one, which the witness,
/// which knows only the old origin, does not cosign.
#[test]
fn a_replaced_store_is_convicted_by_the_old_stores_checkpoints() {
    let mut node = Node::start();
    node.publish(0, 3);
    let row = node.exit_stored(2);
    let old = node.cosigned_from(row);
    assert!(node.gateway.terminate().success(), "clean stop");
    let old_store = snapshot(&node.db(), &node.off("old.db"));
    for suffix in ["", "-wal", "-shm"] {
        let file = PathBuf::from(format!("{}{suffix}", path_str(&node.db())));
        if file.exists() {
            std::fs::remove_file(&file).expect("delete the store");
        }
    }
    node.gateway.respawn();
    node.publish(3, 2);
    let new = wait_for("a checkpoint of a new store's rows", DEADLINE, || {
        shipped(&node.log(), &node.witness_key)
            .into_iter()
            .find(|s| s.store != old.store && s.row > 0)
    });
    assert!(new.cosigned.is_none(), "{new:?}");
    node.not_ready_saying(&[
        &format!("witness {WITNESS_NAME}"),
        "has given no cosignature",
        "HTTP 404",
        &format!("unknown origin \"{NODE}/eventgate/{}\"", new.store),
    ]);
    let archive = node.archive("archive.jsonl");

    assert_verdict(
        &node.verify(&node.db(), &archive, &[]),
        "replaced",
        &[
            &format!("of store {} of node {NODE}'s forwarder audit", old.store),
            &format!("before this store ({}) was made", new.store),
            "the store was replaced",
        ],
    );
    // The old store, kept, verifies with the same archive, which shows it succeeded.
    let outcome = node.verify(&old_store, &archive, &[]);
    assert_intact(&outcome);
    assert!(
        outcome
            .stdout
            .contains(&format!("succeeded by  store {}", new.store)),
        "{}",
        shown(&outcome)
    );
}

/// The signing key file replaced by a new key of the same name while the gateway was
/// stopped: what it signs after is no checkpoint of the given key, and the witness,
/// which knows the old key, does not cosign it.
#[test]
fn a_replaced_key_file_is_a_forged_checkpoint() {
    let mut node = Node::start();
    node.publish(0, 3);
    let row = node.exit_stored(2);
    node.cosigned_from(row);
    assert!(node.gateway.terminate().success(), "clean stop");
    let before = node.archive("before.jsonl");
    let old_store = snapshot(&node.db(), &node.off("old.db"));
    std::fs::remove_file(&node.key_file).expect("remove the key file");
    let new_key = keygen("audit", KEY_NAME, &node.key_file);
    let new_verifier = Verifier::from_text(&new_key).expect("verifier");
    node.gateway.respawn();
    node.publish(3, 2);
    wait_for("a checkpoint signed by the new key", DEADLINE, || {
        shipped(&node.log(), &node.witness_key)
            .iter()
            .any(|s| open(&s.note, std::slice::from_ref(&new_verifier)).is_ok())
            .then_some(())
    });
    node.not_ready_saying(&[
        &format!("witness {WITNESS_NAME}"),
        "has given no cosignature",
        "HTTP 403",
    ]);
    let archive = node.archive("archive.jsonl");

    let new_id = new_key.splitn(3, '+').take(2).collect::<Vec<_>>().join("+");
    assert_verdict(
        &node.verify(&node.db(), &archive, &[]),
        "forged checkpoint",
        &[
            &format!("is signed by {new_id}, a key with a given key's name but another key id"),
            "the signing key was replaced",
        ],
    );
    // Untouched, the store verifies with the archive as it was before the new key.
    assert_intact(&node.verify(&old_store, &before, &[]));
    // A verifier who accepts the new key too (a rotation) gets an intact store: the
    // verdict is the keys given.
    assert_intact(&node.verify(&node.db(), &archive, &["--key", &new_key]));
}

/// The witness unreachable (stopped): checkpoints still ship, uncosigned, and a
/// verifier who requires a witness's cosignature on the newest refuses them.
#[test]
fn a_checkpoint_no_witness_cosigned_is_not_witnessed() {
    let mut node = Node::start();
    node.publish(0, 3);
    let row = node.exit_stored(2);
    node.cosigned_from(row);
    let before = node.archive("before.jsonl");
    let lines_before = line_count(&before);
    node.witness.stop(nix::sys::signal::Signal::SIGTERM);
    wait_for(
        "a checkpoint shipped without a cosignature",
        DEADLINE,
        || {
            shipped(&node.log(), &node.witness_key)
                .iter()
                .any(|s| s.line > lines_before && s.cosigned.is_none())
                .then_some(())
        },
    );
    node.not_ready_saying(&[
        &format!("witness {WITNESS_NAME}"),
        "has given no cosignature",
        "could not be reached",
    ]);
    assert!(node.gateway.terminate().success(), "clean stop");
    let after = node.archive("after.jsonl");
    let required = [
        "--witness-key",
        node.witness_key.as_str(),
        "--min-witnesses",
        "1",
    ];

    assert_verdict(
        &node.verify(&node.db(), &after, &required),
        "not witnessed",
        &["is cosigned by 0 of the given witnesses, and 1 are required"],
    );
    // The archive before the witness stopped ends with a cosigned checkpoint.
    assert_intact(&node.verify(&node.db(), &before, &required));
    // Without witnesses required, the same archive verifies.
    assert_intact(&node.verify(&node.db(), &after, &[]));
}

/// A gateway stopped on purpose signs a last checkpoint and sends it to its witness
/// too: the archive ends with a cosigned tree head, and a verifier requiring a
/// witness finds it intact.
#[test]
fn a_clean_stop_ends_the_archive_with_a_cosigned_checkpoint() {
    let mut node = Node::start();
    node.publish(0, 3);
    let row = node.exit_stored(2);
    node.cosigned_from(row);
    let lines_before = line_count(&node.log());
    assert!(node.gateway.terminate().success(), "clean stop");
    let archive = node.archive("stopped.jsonl");
    let checkpoints = shipped(&archive, &node.witness_key);
    let last = checkpoints.last().expect("checkpoints");
    assert!(
        last.line > lines_before,
        "the stop signed a checkpoint: {last:?}"
    );
    assert!(
        last.cosigned.is_some(),
        "the stop's checkpoint is cosigned: {last:?}"
    );
    let required = [
        "--witness-key",
        node.witness_key.as_str(),
        "--min-witnesses",
        "1",
    ];
    assert_intact(&node.verify(&node.db(), &archive, &required));
}

/// Root rewrites history under a shipped checkpoint (every hash and the tree
/// recomputed) and lets the gateway go on signing it: the witness, whose head the
/// rewritten tree does not extend, cosigns none of it and keeps it as a fork. To a
/// verifier shown only the checkpoints signed since, the key's signatures prove
/// nothing; requiring a witness refuses them, and the archive convicts the store.
#[test]
fn a_rewritten_history_signed_again_gets_no_cosignature() {
    let mut node = Node::start();
    node.publish(0, 4);
    let row = node.exit_stored(3);
    node.cosigned_from(row);
    node.gateway.kill9();
    let shipped_before = line_count(&node.archive("before.jsonl"));
    let witness_head = node.witness_head();
    let at = node.exit_stored(1);
    sql(
        &node.db(),
        &format!(
            "UPDATE events SET event = json_set(event, '$.exit_status', 0) WHERE row_id = {at}"
        ),
    );
    recompute_from(&node.db(), at);
    let forks = node.witness_forks();
    node.gateway.respawn();
    node.publish(4, 1);
    let last = node.exit_stored(4);
    wait_for("a checkpoint of the rewritten store", DEADLINE, || {
        shipped(&node.log(), &node.witness_key)
            .iter()
            .any(|s| s.line > shipped_before && s.row >= last)
            .then_some(())
    });
    node.not_ready_saying(&[
        &format!("witness {WITNESS_NAME}"),
        "has given no cosignature",
        "HTTP 422",
    ]);
    assert_eq!(
        node.witness_head(),
        witness_head,
        "the witness's head moved"
    );
    assert!(node.witness_forks() > forks, "the fork was not kept");
    let archive = node.archive("archive.jsonl");
    let since = node.off("since.jsonl");
    let text = std::fs::read_to_string(&archive).expect("read");
    let lines: Vec<&str> = text.lines().skip(shipped_before).collect();
    std::fs::write(&since, lines.join("\n") + "\n").expect("write");
    assert!(
        shipped(&since, &node.witness_key)
            .iter()
            .all(|s| s.cosigned.is_none()),
        "a checkpoint of the rewritten history was cosigned"
    );

    assert_intact(&node.verify(&node.db(), &since, &[]));
    assert_verdict(
        &node.verify(&node.db(), &since, &["--witness-key", &node.witness_key]),
        "not witnessed",
        &["is cosigned by 0 of the given witnesses, and 1 are required"],
    );
    assert_verdict(
        &node.verify(&node.db(), &archive, &[]),
        "rewritten",
        &["rows up to here were changed after it was signed"],
    );
}
