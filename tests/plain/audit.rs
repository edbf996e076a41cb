//! `eventgate audit verify` and `audit head` against a store a real gateway writes,
//! tampered with as an operator with shell access would.

use crate::support;

use support::audit::{EVENTS, audit, data, gateway_with_events};
use support::*;

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
