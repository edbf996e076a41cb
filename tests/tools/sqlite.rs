//! The SQLite audit store as its users see it: a real gateway's database read with the
//! `sqlite3` shell. The rest: tests/plain/sqlite.rs.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use eventgate::internal::store::{self};
use rusqlite::Connection;
use support::config::Config;
use support::*;

fn count(conn: &Connection) -> i64 {
    conn.query_row("SELECT count(*) FROM events", [], |r| r.get(0))
        .expect("count")
}

fn write_config(dir: &Path, extra: &str) -> PathBuf {
    Config::new()
        .sqlite("audit", "audit.db", extra)
        .write_to(&dir.join("eventgate.toml"))
}

fn wait_rows(path: &Path, n: i64) -> Connection {
    let conn = wait_for("the audit store to exist", DEADLINE, || {
        store::open_reader(path, Duration::from_secs(1)).ok()
    });
    wait_for(&format!("{n} rows in the audit store"), DEADLINE, || {
        (count(&conn) >= n).then_some(())
    });
    conn
}

const EXIT_QUERY: &str =
    "select json_extract(event,'$.exit_status') from events where topic='/tasks/exit'";

#[test]
fn the_sqlite3_shell_reads_the_store() {
    assert!(have("sqlite3"), "sqlite3 is not installed");
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(dir.path(), "");
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
