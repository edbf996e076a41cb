//! Data a newer eventgate wrote, opened by this one: the spool, the audit store and
//! the dead-letter store are refused by every command that opens them, with a
//! message naming both versions, and left byte for byte as they were.
//!
//! Each kind is tested twice: with a file this eventgate writes and a test bumps,
//! and with a committed fixture (tests/fixtures/formats, see its README), so that
//! the refusal does not depend on what today's code happens to write.

use crate::support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use eventgate::internal::{deadletter, store};
use support::*;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/formats")
        .join(name)
}

/// Every file and directory under `root` (or `root` itself, a file) with its bytes.
fn contents(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut found = BTreeMap::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(path) = pending.pop() {
        if path.is_dir() {
            found.insert(path.clone(), Vec::new());
            for entry in std::fs::read_dir(&path).expect("list") {
                pending.push(entry.expect("entry").path());
            }
        } else {
            found.insert(path.clone(), std::fs::read(&path).expect("read"));
        }
    }
    found
}

fn copy_tree(from: &Path, to: &Path) {
    if from.is_dir() {
        std::fs::create_dir_all(to).expect("mkdir");
        for entry in std::fs::read_dir(from).expect("list") {
            let entry = entry.expect("entry");
            copy_tree(&entry.path(), &to.join(entry.file_name()));
        }
    } else {
        std::fs::copy(from, to).expect("copy");
    }
}

/// A data directory in a temporary directory, with a configuration file naming it
/// (the default forwarders: `events.jsonl` and the audit store `audit.db`).
struct Data {
    /// The temporary directories held: the data directory's, the configuration's.
    _tmp: Vec<tempfile::TempDir>,
    dir: PathBuf,
    config: PathBuf,
}

impl Data {
    fn new() -> Data {
        let tmp = tempfile::tempdir().expect("tempdir");
        let mut data = Data::at(&tmp.path().join("data"));
        data._tmp.push(tmp);
        data
    }

    fn at(dir: &Path) -> Data {
        std::fs::create_dir_all(dir).expect("mkdir");
        let tmp = tempfile::tempdir().expect("tempdir");
        let config = tmp.path().join("eventgate.toml");
        std::fs::write(&config, format!("data_dir = {:?}\n", path_str(dir))).expect("config");
        Data {
            _tmp: vec![tmp],
            dir: dir.to_path_buf(),
            config,
        }
    }

    /// `eventgate ARGS... --data-dir <dir>` (`check-config <file>` for "check-config"):
    /// it must fail, within the deadline, leaving `kept` as it was. Returns its stderr.
    fn refused(&self, args: &[&str], kept: &Path) -> String {
        let before = contents(kept);
        let mut cmd = eventgate();
        cmd.args(args);
        if args == ["check-config"] {
            cmd.arg(&self.config);
        } else {
            cmd.arg("--data-dir").arg(&self.dir);
        }
        // Killed when dropped: a gateway that starts instead of refusing is stopped.
        let mut watcher = Watcher::spawn(cmd);
        let status = wait_for(&format!("eventgate {args:?} to exit"), DEADLINE, || {
            watcher.child.try_wait().ok().flatten()
        });
        // The pipe closes with the process: this ends at its last line.
        let mut stderr = String::new();
        while let Some(line) = watcher.stderr.next(DEADLINE) {
            stderr.push_str(&line);
            stderr.push('\n');
        }
        assert!(!status.success(), "eventgate {args:?} succeeded:\n{stderr}");
        assert_eq!(
            contents(kept),
            before,
            "eventgate {args:?} changed {}",
            kept.display()
        );
        stderr
    }
}

fn assert_names(stderr: &str, parts: &[String]) {
    for part in parts {
        assert!(stderr.contains(part.as_str()), "{part:?} not in:\n{stderr}");
    }
}

/// Writes the spool's format stamp as a newer eventgate would.
fn stamp_spool(spool: &Path, format: u32) {
    let body = format!("eventgate spool format {format}\n");
    let crc = crc32fast::hash(body.as_bytes());
    std::fs::write(spool.join("format"), format!("{body}crc32 {crc:08x}\n")).expect("stamp");
}

fn spool_refusal(spool: &Path, found: u32) -> Vec<String> {
    vec![
        format!("spool {} has format {found}", spool.display()),
        "written by a newer eventgate".into(),
        "this eventgate reads format 1 and older".into(),
    ]
}

#[test]
fn a_spool_stamped_by_a_newer_eventgate_is_refused_and_left_as_it_was() {
    // A spool this eventgate wrote, with an event in it, then restamped.
    let mut gw = Gateway::start(&[]);
    let (ok, err) = publish_json(
        &gw.address(),
        "default",
        "/tasks/exit",
        "containerd.events.TaskExit",
        r#"{"container_id":"c1","exit_status":1}"#,
    );
    assert!(ok, "{err}");
    assert!(gw.terminate().success());
    let spool = gw.dir.path().join("data/spool");
    let stamp = std::fs::read_to_string(spool.join("format")).expect("a stamp");
    assert!(stamp.starts_with("eventgate spool format 1\n"), "{stamp}");
    stamp_spool(&spool, 2);

    let data = Data::at(&gw.dir.path().join("data"));
    for args in [&["serve"][..], &["check-config"]] {
        let stderr = data.refused(args, &spool);
        assert_names(&stderr, &spool_refusal(&spool, 2));
    }
}

#[test]
fn the_committed_format_2_spool_is_refused_and_its_records_not_quarantined() {
    let data = Data::new();
    let spool = data.dir.join("spool");
    copy_tree(&fixture("spool-format-2"), &spool);
    for args in [&["serve"][..], &["check-config"]] {
        let stderr = data.refused(args, &spool);
        assert_names(&stderr, &spool_refusal(&spool, 2));
    }
    assert!(!spool.join("corrupt").exists(), "nothing was set aside");
}

fn audit_refusal(path: &Path, found: i64) -> Vec<String> {
    vec![
        format!("{} was written by a newer eventgate", path.display()),
        format!("audit store schema version {found}"),
        format!("knows up to version {}", store::migrate::LATEST),
    ]
}

/// Every command that opens the audit store refuses it.
fn assert_audit_store_refused(data: &Data, path: &Path, found: i64) {
    for args in [
        &["serve"][..],
        &["query"],
        &["audit", "verify"],
        &["check-config"],
    ] {
        let stderr = data.refused(args, path);
        assert_names(&stderr, &audit_refusal(path, found));
    }
}

#[test]
fn an_audit_store_of_a_newer_schema_is_refused_by_every_command() {
    let data = Data::new();
    let path = data.dir.join("audit.db");
    let conn = store::open_writer(&path, &store::WriterOptions::default()).expect("create");
    let found = store::migrate::LATEST + 1;
    conn.pragma_update(None, "user_version", found)
        .expect("bump");
    drop(conn);
    assert_audit_store_refused(&data, &path, found);
}

#[test]
fn the_committed_audit_store_of_schema_99_is_refused_by_every_command() {
    let data = Data::new();
    let path = data.dir.join("audit.db");
    std::fs::copy(fixture("audit-schema-99.db"), &path).expect("copy");
    assert_audit_store_refused(&data, &path, 99);
}

fn assert_dead_letters_refused(data: &Data, path: &Path, found: i64) {
    let parts = [
        format!("{} was written by a newer eventgate", path.display()),
        format!("dead-letter schema version {found}"),
        format!("knows up to version {}", deadletter::LATEST),
    ];
    for args in [&["serve"][..], &["dlq", "list"], &["check-config"]] {
        let stderr = data.refused(args, path);
        assert_names(&stderr, &parts);
    }
}

#[test]
fn a_dead_letter_store_of_a_newer_schema_is_refused_by_every_command() {
    let data = Data::new();
    let path = data.dir.join("deadletters.db");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    drop(
        runtime
            .block_on(deadletter::Store::open(path.clone(), true))
            .expect("create"),
    );
    let found = deadletter::LATEST + 1;
    rusqlite::Connection::open(&path)
        .and_then(|conn| conn.pragma_update(None, "user_version", found))
        .expect("bump");
    assert_dead_letters_refused(&data, &path, found);
}

#[test]
fn the_committed_dead_letter_store_of_schema_99_is_refused_by_every_command() {
    let data = Data::new();
    let path = data.dir.join("deadletters.db");
    std::fs::copy(fixture("deadletters-schema-99.db"), &path).expect("copy");
    assert_dead_letters_refused(&data, &path, 99);
}

/// An upstream's state snapshot, saved or pending, that a newer eventgate wrote is
/// refused by `serve` and `check-config` as the spool and the stores are: taking a
/// new baseline instead would lose the gap the snapshot covers. Left as it was.
#[test]
fn an_upstream_state_snapshot_of_a_newer_version_is_refused_and_left_as_it_was() {
    for file in ["node.json", "node.pending.json"] {
        let data = Data::new();
        std::fs::write(
            &data.config,
            format!(
                "data_dir = {:?}\n\n[[upstream]]\nname = \"node\"\naddress = \"/nonexistent/containerd.sock\"\n",
                path_str(&data.dir)
            ),
        )
        .expect("config");
        let state = data.dir.join("state");
        std::fs::create_dir_all(&state).expect("mkdir");
        let path = state.join(file);
        std::fs::write(
            &path,
            r#"{"version": 2, "upstream": "node", "next_seq": 7, "state": {}, "added_later": [1, 2]}"#,
        )
        .expect("write the snapshot");
        let parts = [
            format!("{} was written by a newer eventgate", path.display()),
            "state snapshot version 2".into(),
            "this eventgate knows up to version 1".into(),
        ];
        let config = path_str(&data.config).to_owned();
        for args in [
            &["serve", "--config", config.as_str()][..],
            &["check-config"],
        ] {
            let stderr = data.refused(args, &state);
            assert_names(&stderr, &parts);
        }
    }
}
