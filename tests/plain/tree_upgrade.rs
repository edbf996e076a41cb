//! A store a version before the Merkle tree made: `serve` builds its tree at first
//! open, says so in its log, and the checkpoints signed before still verify with the
//! ones signed after.

use crate::support;

use std::time::Duration;

use support::*;

fn publish_exits(gateway: &Gateway, from: u32, to: u32) {
    for i in from..=to {
        let (ok, err) = publish_json(
            &gateway.address(),
            "default",
            "/tasks/exit",
            "containerd.events.TaskExit",
            &format!(r#"{{"container_id":"c{i}","exit_status":1}}"#),
        );
        assert!(ok, "{err}");
    }
}

#[test]
fn a_store_without_a_tree_gains_it_at_start_and_its_checkpoints_keep_verifying() {
    let dir = tempfile::tempdir().expect("tempdir");
    let key = dir.path().join("signing.key");
    let verifier = eventgate_stdout(&[
        "audit",
        "keygen",
        "upgrade.example/n1",
        "--out",
        path_str(&key),
    ]);
    let verifier = verifier.trim().to_owned();
    let config = dir.path().join("eventgate.toml");
    std::fs::write(
        &config,
        format!(
            "node = \"n1\"\n[signing]\nkey = {:?}\ninterval = \"1s\"\n",
            path_str(&key)
        ),
    )
    .expect("write the config");
    let mut gateway = Gateway::start_in(dir, &["--config", path_str(&config)]);
    publish_exits(&gateway, 1, 40);
    let db = gateway.dir.path().join("data/audit.db");
    let checkpoints = |gateway: &Gateway| {
        gateway
            .logged()
            .into_iter()
            .filter(|l| l["topic"] == "/eventgate/audit/checkpoint")
            .count()
    };
    wait_for(
        "a checkpoint over the events",
        Duration::from_secs(30),
        || (checkpoints(&gateway) >= 2).then_some(()),
    );
    assert!(gateway.terminate().success());

    // What the store was before version 14: no tree, no boundary record.
    let conn = rusqlite::Connection::open(&db).expect("open the store");
    conn.execute_batch(
        "DROP TABLE audit_tree; DROP TABLE audit_tree_hashes; \
         ALTER TABLE audit_chain DROP COLUMN pruned_record; PRAGMA user_version = 13;",
    )
    .expect("make it a version 13 store");
    drop(conn);

    gateway.respawn();
    let log = gateway.stderr_text();
    assert!(
        log.contains("building the audit store's Merkle tree over its existing rows"),
        "{log}"
    );
    assert!(
        log.contains("the audit store's Merkle tree now covers every chained row"),
        "{log}"
    );
    let before = checkpoints(&gateway);
    publish_exits(&gateway, 41, 50);
    wait_for(
        "a checkpoint over the new tree",
        Duration::from_secs(30),
        || (checkpoints(&gateway) > before + 1).then_some(()),
    );
    assert!(gateway.terminate().success());

    let archive = gateway.dir.path().join("archive.jsonl");
    std::fs::copy(gateway.dir.path().join("data/events.jsonl"), &archive).expect("copy");
    let out = eventgate()
        .args(["audit", "verify", "--db", path_str(&db), "--key", &verifier])
        .args(["--checkpoints", path_str(&archive)])
        .output()
        .expect("run audit verify");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains(": intact"), "{stdout}");
    assert!(
        stdout.contains("signed tree heads match the store's tree"),
        "{stdout}"
    );
}
