//! The signing key as an operator meets it through the real binary: `audit keygen`
//! writes a private key and prints its verifier key, and `check-config` and `serve`
//! refuse a `[signing]` table whose key cannot be used, naming `signing.key`.

use crate::support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};

use eventgate::internal::note::{Verifier, load_key, open};
use support::*;

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

#[test]
fn keygen_writes_a_private_key_and_prints_its_verifier_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let key = dir.path().join("node-1.key");
    let (ok, out, err) = run(eventgate().args([
        "audit",
        "keygen",
        "audit.example/node-1",
        "--out",
        path_str(&key),
    ]));
    assert!(ok, "{err}");
    assert_eq!(mode(&key), 0o600);
    assert_eq!(out.lines().count(), 1, "one line on stdout: {out:?}");
    let verifier = Verifier::from_text(&out).expect("a verifier key");
    assert_eq!(verifier.name(), "audit.example/node-1");
    assert!(
        err.contains(path_str(&key)) && err.contains("audit verify --key"),
        "{err}"
    );
    // The file holds the signer of that verifier key: what it signs opens with it.
    let signer = load_key(&key).expect("the key loads");
    assert_eq!(signer.verifier(), verifier);
    let note = signer.sign("checkpoint\n").expect("sign");
    assert_eq!(
        open(&note, &[verifier]).expect("opens").signed_by,
        ["audit.example/node-1"]
    );

    // Never overwritten: an error naming the file, the key unchanged, exit 1.
    let before = std::fs::read(&key).expect("read");
    let out = eventgate()
        .args(["audit", "keygen", "other", "--out", path_str(&key)])
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
    let (ok, out, err) =
        run(eventgate()
            .current_dir(dir.path())
            .args(["audit", "keygen", "audit.example/node-2"]));
    assert!(ok, "{err}");
    let default = dir.path().join("audit.example_node-2.key");
    assert_eq!(mode(&default), 0o600);
    assert_eq!(
        load_key(&default).expect("loads").verifier(),
        Verifier::from_text(&out).expect("verifier")
    );

    // A name the format cannot carry is refused, and no file is left.
    let (ok, _, err) = run(eventgate()
        .current_dir(dir.path())
        .args(["audit", "keygen", "a+b"]));
    assert!(!ok && err.contains("'+'"), "{err}");
    assert!(!dir.path().join("a+b.key").exists());
}

#[test]
fn check_config_and_serve_refuse_an_unusable_signing_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let key = dir.path().join("gw.key");
    let verifier = eventgate_stdout(&["audit", "keygen", "gw", "--out", path_str(&key)]);
    let config = dir.path().join("eventgate.toml");
    let with_key = |path: &Path| {
        std::fs::write(
            &config,
            format!(
                "data_dir = {:?}\n[signing]\nkey = {:?}\ninterval = \"30s\"\nevery_rows = 500\n",
                path_str(&dir.path().join("data")),
                path_str(path)
            ),
        )
        .expect("write config");
    };
    with_key(&key);
    let (ok, out, err) = run(eventgate().args(["check-config", path_str(&config), "--print"]));
    assert!(ok, "{err}");
    assert!(
        out.contains("[signing]") && out.contains("every_rows = 500"),
        "{out}"
    );

    // Each bad key file, refused by both, naming `signing.key` and what is wrong.
    let verifier_file = dir.path().join("verifier.key");
    std::fs::write(&verifier_file, &verifier).expect("write");
    std::fs::set_permissions(&verifier_file, std::fs::Permissions::from_mode(0o600))
        .expect("chmod");
    let malformed = dir.path().join("malformed.key");
    std::fs::write(&malformed, "PRIVATE+KEY+gw+0000000+AQ==\n").expect("write");
    std::fs::set_permissions(&malformed, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let pem = dir.path().join("tls.key");
    std::fs::write(&pem, "-----BEGIN PRIVATE KEY-----\nMC4CAQ\n").expect("write");
    std::fs::set_permissions(&pem, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let cases = [
        (dir.path().join("missing.key"), "does not exist"),
        (verifier_file, "verifier key"),
        (malformed, "8 hex digits"),
        (pem, "not an eventgate/sumdb note signer key"),
        (key.clone(), "chmod 600"),
    ];
    for (path, expected) in &cases {
        if path == &key {
            std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        }
        with_key(path);
        for command in ["check-config", "serve --config"] {
            let mut cmd = eventgate();
            cmd.args(command.split(' ')).arg(&config);
            let (ok, _, err) = run(&mut cmd);
            assert!(!ok, "{command} accepted {}", path.display());
            assert!(
                err.contains("`signing.key`")
                    && err.contains(expected)
                    && !err.contains("panicked"),
                "{command} {}: {err}",
                path.display()
            );
        }
    }
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).expect("chmod");

    // serve --signing-key takes the same checks, over a file without [signing].
    std::fs::write(
        &config,
        format!("data_dir = {:?}\n", path_str(&dir.path().join("data"))),
    )
    .expect("write config");
    let (ok, _, err) = run(eventgate().args([
        "serve",
        "--config",
        path_str(&config),
        "--signing-key",
        path_str(&dir.path().join("missing.key")),
    ]));
    assert!(
        !ok && err.contains("`signing.key`") && err.contains("does not exist"),
        "{err}"
    );

    // Zeros are refused naming their keys.
    for (key_line, name) in [
        ("interval = \"0s\"", "signing.interval"),
        ("every_rows = 0", "signing.every_rows"),
        ("unknown = 1", "unknown"),
    ] {
        std::fs::write(&config, format!("[signing]\n{key_line}\n")).expect("write config");
        let (ok, _, err) = run(eventgate().args(["check-config", path_str(&config)]));
        assert!(!ok && err.contains(name), "{key_line}: {err}");
    }
}

// `audit verify --key --checkpoints` against a store a real gateway wrote and signed,
// attacked as someone with root and the format at hand would.

/// The exits the gateway stores before it is stopped.
const EXITS: usize = 8;
const CHECKPOINT_TOPIC: &str = "/eventgate/audit/checkpoint";

/// A gateway with `[signing]` (a checkpoint every second) that stored [`EXITS`]
/// exits and shipped checkpoints covering them through the file forwarder, stopped
/// cleanly (which signs a last one). Returns it, stopped, and the verifier key.
fn signed_by_a_gateway() -> (Gateway, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let key = dir.path().join("node-9.key");
    let verifier = eventgate_stdout(&["audit", "keygen", "node-9", "--out", path_str(&key)])
        .trim()
        .to_owned();
    let config = dir.path().join("eventgate.toml");
    std::fs::write(
        &config,
        format!(
            "node = \"node-9\"\n[signing]\nkey = {:?}\ninterval = \"1s\"\n\n\
             [[forwarder]]\nname = \"log\"\nkind = \"file\"\npath = \"events.jsonl\"\n\n\
             [[forwarder]]\nname = \"audit\"\nkind = \"sqlite\"\npath = \"audit.db\"\n",
            path_str(&key)
        ),
    )
    .expect("write config");
    let mut gateway = Gateway::start_in(dir, &["--config", path_str(&config)]);
    for n in 0..EXITS {
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
    let last_exit = wait_for("every exit stored", DEADLINE, || {
        let exits = exit_rows(&db);
        (exits.len() == EXITS).then(|| exits[EXITS - 1])
    });
    let log = gateway.dir.path().join("data/events.jsonl");
    wait_for("a checkpoint of every exit shipped", DEADLINE, || {
        shipped_rows(&log)
            .iter()
            .any(|(row, _)| *row >= last_exit)
            .then_some(())
    });
    assert!(gateway.terminate().success(), "{}", gateway.stderr_text());
    (gateway, verifier)
}

/// The row_ids of the stored exits, in order (empty while the store is not there).
fn exit_rows(db: &Path) -> Vec<i64> {
    let Ok(conn) =
        rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
    else {
        return Vec::new();
    };
    conn.prepare("SELECT row_id FROM events WHERE topic = '/tasks/exit' ORDER BY row_id")
        .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
        .unwrap_or_default()
}

/// Each checkpoint of the file forwarder's log: the row its note records, and the
/// log's line it is on.
fn shipped_rows(log: &Path) -> Vec<(i64, usize)> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .enumerate()
        .filter_map(|(i, line)| {
            let line: serde_json::Value = serde_json::from_str(line).ok()?;
            if line["topic"] != CHECKPOINT_TOPIC {
                return None;
            }
            let note = line["event"]["note"].as_str()?;
            let row = note.lines().find_map(|l| l.strip_prefix("row "))?;
            Some((row.parse().ok()?, i + 1))
        })
        .collect()
}

/// A copy of the stopped gateway's store in `to`, to attack.
fn copy_store(data: &Path, to: &Path) -> std::path::PathBuf {
    std::fs::create_dir_all(to).expect("mkdir");
    for suffix in ["", "-wal", "-shm"] {
        let from = data.join(format!("audit.db{suffix}"));
        if from.exists() {
            std::fs::copy(&from, to.join(format!("audit.db{suffix}"))).expect("copy");
        }
    }
    to.join("audit.db")
}

fn sql(db: &Path, statements: &str) {
    rusqlite::Connection::open(db)
        .expect("open")
        .execute_batch(statements)
        .expect("sql");
}

/// `audit verify --db DB ARGS...`: exit code, stdout, stderr.
fn audit_verify(db: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let out = eventgate()
        .args(["audit", "verify", "--db", path_str(db)])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run audit verify");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn shipped_checkpoints_catch_what_the_chain_alone_cannot() {
    let (gateway, verifier) = signed_by_a_gateway();
    let data = gateway.dir.path().join("data");
    let log = data.join("events.jsonl");
    let log_arg = path_str(&log).to_owned();
    let with = [
        "--key",
        verifier.as_str(),
        "--checkpoints",
        log_arg.as_str(),
    ];
    let shipped = shipped_rows(&log);
    let rows: Vec<i64> = shipped.iter().map(|(row, _)| *row).collect();
    let newest = *rows.iter().max().expect("checkpoints");
    // The first checkpoint at or after a row: where a change to that row shows.
    let caught_at = |row: i64| {
        *rows
            .iter()
            .filter(|r| **r >= row)
            .min()
            .expect("a later checkpoint")
    };
    let attacks = gateway.dir.path().join("attacks");

    // Untouched: intact both ways.
    let db = copy_store(&data, &attacks.join("none"));
    let (code, out, err) = audit_verify(&db, &with);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains(": intact") && out.contains("match their rows"),
        "{out}"
    );
    assert!(
        out.contains(&format!("newest        row_id {newest} ")),
        "{out}"
    );

    // 1. An exit's status changed, every hash after it and the head recomputed.
    let db = copy_store(&data, &attacks.join("edit"));
    let edited = exit_rows(&db)[2];
    sql(
        &db,
        &format!(
            "UPDATE events SET event = json_set(event, '$.exit_status', 0) WHERE row_id = {edited}"
        ),
    );
    support::audit::rehash_from(&db, edited);
    // 2. Rows cut off the end, audit_chain's head moved back to match.
    let cut = copy_store(&data, &attacks.join("cut"));
    let kept = newest - 2;
    sql(
        &cut,
        &format!(
            "DELETE FROM events WHERE row_id > {kept};
             UPDATE audit_chain SET head_row_id = {kept},
                 head_seq = (SELECT seq FROM events WHERE row_id = {kept}),
                 head_hash = (SELECT hash FROM events WHERE row_id = {kept});"
        ),
    );
    // 3. A made-up exit inserted in the middle, the rows after it moved up, every
    //    hash and the head recomputed.
    let inserted = copy_store(&data, &attacks.join("insert"));
    let at = exit_rows(&inserted)[1];
    sql(
        &inserted,
        &format!(
            "UPDATE events SET row_id = row_id + 100000 WHERE row_id >= {at};
             UPDATE events SET row_id = row_id - 99999 WHERE row_id > 100000;
             INSERT INTO events (row_id, seq, id, timestamp, received_at, namespace, topic,
                 type_url, payload, event, source, origin, node)
             SELECT {at}, 999, 'made-up', timestamp, received_at, namespace, topic, type_url,
                 payload, json_set(event, '$.container_id', 'nobody'), source, origin, node
             FROM events WHERE row_id = {at} + 1;
             UPDATE audit_chain SET head_row_id = head_row_id + 1;"
        ),
    );
    support::audit::rehash_from(&inserted, at);
    // 4. A checkpoint note kept in the store changed (it says another hash), the
    //    chain recomputed.
    let noted = copy_store(&data, &attacks.join("note"));
    let stored: i64 = rusqlite::Connection::open(&noted)
        .expect("open")
        .query_row(
            "SELECT min(row_id) FROM events WHERE topic = ?1",
            [CHECKPOINT_TOPIC],
            |r| r.get(0),
        )
        .expect("a stored checkpoint");
    sql(
        &noted,
        &format!(
            "UPDATE events SET event = json_set(event, '$.note',
                 replace(json_extract(event, '$.note'), 'hash ', 'hash 0')) WHERE row_id = {stored}"
        ),
    );
    support::audit::rehash_from(&noted, stored);

    for (db, kind, row, says) in [
        (
            &db,
            "rewritten",
            caught_at(edited),
            format!("for row_id {}", caught_at(edited)),
        ),
        (
            &cut,
            "rolled back",
            kept,
            format!(
                "row_id {} to {newest} (2 rows) were cut off the end",
                kept + 1
            ),
        ),
        (
            &inserted,
            "rewritten",
            caught_at(at),
            format!("for row_id {}", caught_at(at)),
        ),
        (
            &noted,
            "rewritten",
            caught_at(stored),
            format!("for row_id {}", caught_at(stored)),
        ),
    ] {
        // The chain alone is fooled ...
        let (code, out, err) = audit_verify(db, &[]);
        assert_eq!(code, Some(0), "{}: {out}{err}", db.display());
        assert!(out.contains(": intact"), "{out}");
        // ... the checkpoints shipped before are not.
        let (code, out, err) = audit_verify(db, &with);
        assert_eq!(code, Some(1), "{}: {out}{err}", db.display());
        assert!(out.contains("TAMPERED"), "{out}");
        assert!(
            out.contains(&format!("{kind}: row_id {row} (")),
            "{kind} at {row}: {out}"
        );
        assert!(
            out.contains(&says) && out.contains(&log_arg),
            "{says}: {out}"
        );
    }

    // 5. A shipped note changed (its row one higher): a forged checkpoint, named by
    //    its line.
    let (row, line) = *shipped.iter().max().expect("a checkpoint");
    let forged_log = attacks.join("forged.jsonl");
    let text = std::fs::read_to_string(&log).expect("read the log");
    let forged: Vec<String> = text
        .lines()
        .enumerate()
        .map(|(i, l)| match i + 1 == line {
            true => l.replace(
                &format!("\\nrow {row}\\n"),
                &format!("\\nrow {}\\n", row + 1),
            ),
            false => l.to_owned(),
        })
        .collect();
    std::fs::write(&forged_log, forged.join("\n") + "\n").expect("write");
    let db = copy_store(&data, &attacks.join("forged"));
    let forged_arg = path_str(&forged_log);
    let (code, out, err) = audit_verify(&db, &["--key", &verifier, "--checkpoints", forged_arg]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        out.contains(&format!(
            "forged checkpoint: the note at line {line} of {forged_arg}"
        )) && out.contains("does not verify"),
        "{out}"
    );
}

#[test]
fn checkpoints_come_from_a_file_or_stdin_and_need_a_key_that_signed_them() {
    let (gateway, verifier) = signed_by_a_gateway();
    let data = gateway.dir.path().join("data");
    let db = data.join("audit.db");
    let log = data.join("events.jsonl");

    // From stdin, as signed notes (the form `audit head` prints): intact.
    let notes: String = std::fs::read_to_string(&log)
        .expect("read the log")
        .lines()
        .filter_map(|l| {
            let line: serde_json::Value = serde_json::from_str(l).ok()?;
            (line["topic"] == CHECKPOINT_TOPIC)
                .then(|| format!("{}\n", line["event"]["note"].as_str().unwrap_or_default()))
        })
        .collect();
    let (ok, err) = run_with_stdin(
        eventgate().args([
            "audit",
            "verify",
            "--db",
            path_str(&db),
            "--key",
            &verifier,
            "--checkpoints",
            "-",
        ]),
        notes.as_bytes(),
    );
    assert!(ok, "{err}");

    // `audit head` prints the newest note kept in the store.
    let head = eventgate_stdout(&["audit", "head", "--db", path_str(&db)]);
    assert!(
        head.contains("eventgate audit checkpoint v2\nnode node-9\n"),
        "{head}"
    );
    assert!(head.contains("\n\n\u{2014} node-9 "), "{head}");

    // Another key: nothing signed by it, could not verify (2).
    let other = eventgate_stdout(&[
        "audit",
        "keygen",
        "node-10",
        "--out",
        path_str(&gateway.dir.path().join("other.key")),
    ]);
    let (code, out, err) = audit_verify(
        &db,
        &["--key", other.trim(), "--checkpoints", path_str(&log)],
    );
    assert_eq!(code, Some(2), "{out}{err}");
    assert!(
        err.contains("is signed by the given keys (node-10+"),
        "{err}"
    );
    assert!(err.contains("they are signed by node-9+"), "{err}");

    // Either flag alone is a usage error (2); a signer key given as --key is refused
    // without being printed.
    for args in [
        &["--key", verifier.as_str()][..],
        &["--checkpoints", path_str(&log)][..],
    ] {
        let (code, out, err) = audit_verify(&db, args);
        assert_eq!(code, Some(2), "{args:?}: {out}{err}");
        assert!(
            err.contains("--key") && err.contains("--checkpoints"),
            "{err}"
        );
    }
    let secret = std::fs::read_to_string(gateway.dir.path().join("node-9.key")).expect("key");
    let (code, _, err) = audit_verify(
        &db,
        &["--key", secret.trim(), "--checkpoints", path_str(&log)],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("signer key") && !err.contains(secret.trim()),
        "{err}"
    );

    // No such store: could not verify.
    let (code, _, err) = audit_verify(
        &gateway.dir.path().join("nothing.db"),
        &["--key", &verifier, "--checkpoints", path_str(&log)],
    );
    assert_eq!(code, Some(2), "{err}");
}
