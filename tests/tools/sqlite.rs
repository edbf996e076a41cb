//! The SQLite audit store as its users see it: a real gateway's database read with the
//! `sqlite3` shell. The rest: tests/plain/sqlite.rs.

use crate::support;

use std::process::Command;

use support::audit::{wait_rows, write_sqlite_config};
use support::*;

const EXIT_QUERY: &str =
    "select json_extract(event,'$.exit_status') from events where topic='/tasks/exit'";

#[test]
fn the_sqlite3_shell_reads_the_store() {
    assert!(have("sqlite3"), "sqlite3 is not installed");
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_sqlite_config(dir.path(), "");
    let gw = Gateway::start_in(dir, &["--config", path_str(&config)]);
    let (ok, err) = publish_json(
        &gw.address(),
        "default",
        "/tasks/exit",
        "containerd.events.TaskExit",
        r#"{"container_id":"c1","exit_status":3}"#,
    );
    assert!(ok, "{err}");
    let db = gw.dir.path().join("data/audit.db");
    drop(wait_rows(&db, 1));
    let out = Command::new("sqlite3")
        .arg(&db)
        .arg(EXIT_QUERY)
        .output()
        .expect("run sqlite3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "3");
}
