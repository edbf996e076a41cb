//! An upstream taken out of the configuration: the next start records its removal
//! (a disconnected marker with that reason, once), which ends the gap its last stop
//! opened instead of leaving it open for good.

use crate::support;

use std::path::Path;

use rusqlite::{Connection, OpenFlags};
use support::config::Config;
use support::*;

/// Markers of `topic` for upstream `up` with `reason` (any when `None`).
fn markers(db: &Path, topic: &str, reason: Option<&str>) -> i64 {
    let Ok(conn) = Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY) else {
        return 0;
    };
    conn.query_row(
        "SELECT count(*) FROM events WHERE topic = ?1 AND json_extract(event, '$.upstream') = 'up' \
         AND (?2 IS NULL OR json_extract(event, '$.reason') = ?2)",
        rusqlite::params![topic, reason],
        |r| r.get(0),
    )
    .unwrap_or(0)
}

#[test]
fn an_upstream_removed_from_the_configuration_has_its_removal_recorded_once() {
    let up_dir = tempfile::tempdir().expect("tempdir");
    let up_config = Config::new().toml("forwarder = []\n").write(up_dir.path());
    let upstream = Gateway::start_in(up_dir, &["--config", &up_config]);
    let dir = tempfile::tempdir().expect("tempdir");
    let config = Config::new()
        .upstream("up", &upstream.address(), "")
        .write(dir.path());
    let mut gw = Gateway::start_in(dir, &["--config", &config]);
    let db = gw.dir.path().join("data/audit.db");
    wait_for("the upstream's connected marker", DEADLINE, || {
        (markers(&db, "/eventgate/upstream/connected", None) == 1).then_some(())
    });
    assert!(gw.terminate().success(), "{}", gw.stderr_text());
    assert_eq!(
        markers(
            &db,
            "/eventgate/upstream/disconnected",
            Some("eventgate is stopping")
        ),
        1
    );

    // The same file, without the upstream.
    Config::new().write(gw.dir.path());
    gw.respawn();
    let removed = "removed from the configuration";
    wait_for("the removal marker", DEADLINE, || {
        (markers(&db, "/eventgate/upstream/disconnected", Some(removed)) == 1).then_some(())
    });
    assert!(gw.restart().success(), "{}", gw.stderr_text());
    // A start records removals before it serves, and forwarders keep seq order: once
    // an event published now is stored, a marker of this start would be too.
    let (ok, err) = publish_json(
        &gw.address(),
        "default",
        "/tasks/exit",
        "containerd.events.TaskExit",
        r#"{"container_id":"after-restart"}"#,
    );
    assert!(ok, "{err}");
    wait_for("the event published after the restart", DEADLINE, || {
        let conn = Connection::open_with_flags(&db, OpenFlags::SQLITE_OPEN_READ_ONLY).ok()?;
        conn.query_row(
            "SELECT 1 FROM events WHERE json_extract(event, '$.container_id') = 'after-restart'",
            [],
            |_| Ok(()),
        )
        .ok()
    });
    assert_eq!(
        markers(&db, "/eventgate/upstream/disconnected", Some(removed)),
        1
    );
    assert!(gw.terminate().success());
}
