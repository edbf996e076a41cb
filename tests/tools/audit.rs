//! `eventgate audit verify` against a store a real gateway writes, a row edited with the
//! `sqlite3` shell as an operator with shell access would. The rest: tests/plain/audit.rs.

use crate::support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use eventgate::internal::store;
use support::audit::{audit, data, gateway_with_events};
use support::*;

/// The row_id and seq stored for the event with this container id.
fn row_of(db: &Path, container: &str) -> (i64, i64) {
    let conn = store::open_reader(db, Duration::from_secs(1)).expect("open");
    conn.query_row(
        "SELECT row_id, seq FROM events WHERE json_extract(event, '$.container_id') = ?1",
        [container],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
    .expect("the event's row")
}

#[test]
fn a_row_edited_with_the_sqlite3_shell_is_named_by_its_seq() {
    assert!(have("sqlite3"), "sqlite3 is not installed");
    let gw = gateway_with_events();
    let data = data(&gw);
    let db = gw.dir.path().join("data/audit.db");
    let out = audit(&["verify", "--data-dir", &data]);
    assert_eq!(out.code, Some(0), "{}{}", out.stdout, out.stderr);

    // Rewrite c3's exit status while the gateway keeps the store open.
    let (row_id, seq) = row_of(&db, "c3");
    let edit = Command::new("sqlite3")
        .arg(&db)
        .arg(format!(
            "update events set event = json_set(event, '$.exit_status', 0) where row_id = {row_id}"
        ))
        .output()
        .expect("run sqlite3");
    assert!(
        edit.status.success(),
        "{}",
        String::from_utf8_lossy(&edit.stderr)
    );

    let out = audit(&["verify", "--data-dir", &data]);
    assert_eq!(out.code, Some(1), "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("TAMPERED"), "{}", out.stdout);
    assert!(
        out.stdout
            .contains(&format!("modified: row_id {row_id} (seq {seq},")),
        "{}",
        out.stdout
    );
}
