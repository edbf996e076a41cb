//! `eventgate audit verify` and `audit head` against a store a real gateway writes,
//! tampered with as an operator with shell access would.

use crate::support;

use std::process::Stdio;
use std::time::Duration;

use eventgate::internal::store;
use support::*;

const EVENTS: i64 = 5;

struct Outcome {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn audit(args: &[&str]) -> Outcome {
    let out = eventgate()
        .arg("audit")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run eventgate audit");
    Outcome {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A gateway on its default configuration (the sqlite forwarder at
/// <data>/audit.db) with `EVENTS` exits published and stored.
fn gateway_with_events() -> Gateway {
    let gw = Gateway::start(&[]);
    for i in 1..=EVENTS {
        let json = format!(r#"{{"container_id":"c{i}","exit_status":{i}}}"#);
        let (ok, err) = publish_json(
            &gw.address(),
            "default",
            "/tasks/exit",
            "containerd.events.TaskExit",
            &json,
        );
        assert!(ok, "{err}");
    }
    let db = gw.dir.path().join("data/audit.db");
    let conn = wait_for("the audit store to exist", DEADLINE, || {
        store::open_reader(&db, Duration::from_secs(1)).ok()
    });
    wait_for("every event stored", DEADLINE, || {
        let n: i64 = conn
            .query_row("SELECT count(*) FROM events", [], |r| r.get(0))
            .ok()?;
        (n == EVENTS).then_some(())
    });
    gw
}

fn data(gw: &Gateway) -> String {
    path_str(&gw.dir.path().join("data")).to_owned()
}

#[test]
fn a_live_store_verifies_and_an_anchor_is_checked() {
    let gw = gateway_with_events();
    let data = data(&gw);
    let out = audit(&["verify", "--data-dir", &data]);
    assert_eq!(out.code, Some(0), "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains(": intact"), "{}", out.stdout);
    assert!(
        out.stdout
            .contains(&format!("{EVENTS} rows (row_id 1 to {EVENTS})")),
        "{}",
        out.stdout
    );

    let head = audit(&["head", "--data-dir", &data]);
    assert_eq!(head.code, Some(0), "{}", head.stderr);
    let anchor = head
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("anchor"))
        .expect("an anchor line")
        .trim()
        .to_owned();
    assert!(anchor.starts_with(&format!("{EVENTS}:")), "{anchor}");
    let out = audit(&["verify", "--data-dir", &data, "--anchor", &anchor]);
    assert_eq!(out.code, Some(0), "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("(as recorded)"), "{}", out.stdout);

    // A hash recorded for that row that it does not have.
    let forged = format!("{EVENTS}:{}", "0".repeat(64));
    let out = audit(&["verify", "--data-dir", &data, "--anchor", &forged]);
    assert_eq!(out.code, Some(1), "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("rewritten"), "{}", out.stdout);

    // Could not verify: exit 2, distinct from tampering.
    let missing = gw.dir.path().join("nothing.db");
    let out = audit(&["verify", "--db", path_str(&missing)]);
    assert_eq!(out.code, Some(2), "{}{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("no audit store"), "{}", out.stderr);
}
