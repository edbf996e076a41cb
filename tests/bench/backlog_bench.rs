//! `eventgate bench backlog` at a small size, so it cannot rot: events wait in the
//! spool for a kafka broker that is down, the gateway is restarted on that backlog,
//! and once a broker comes up on the address it was given, every event reaches it.

use crate::support;

use support::*;

/// The number in a table row's value cell: `| phase | figure | VALUE | target |`.
fn value<'a>(table: &'a str, figure: &str) -> &'a str {
    table
        .lines()
        .find(|l| l.contains(&format!("| {figure} |")))
        .and_then(|l| l.split('|').nth(3))
        .map(str::trim)
        .unwrap_or_else(|| panic!("no {figure:?} row in:\n{table}"))
}

#[test]
fn the_backlog_benchmark_restarts_on_its_backlog_and_drains_all_of_it() {
    let out = eventgate()
        .args([
            "bench",
            "backlog",
            "--events",
            "3000",
            "--forwarders",
            "kafka",
        ])
        .args(["--after-restart", "3s", "--more-events", "300"])
        .args(["--drain-timeout", "120s"])
        .output()
        .expect("run eventgate bench backlog");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let table = String::from_utf8_lossy(&out.stdout);
    let more: u64 = table
        .lines()
        .find_map(|l| {
            let (before, _) = l.split_once(" more events published")?;
            before.rsplit(' ').next()?.parse().ok()
        })
        .unwrap_or_else(|| panic!("no row says how many more events were published:\n{table}"));
    assert!(more > 0, "{table}");
    // The 3,000, the one acknowledged right after the restart, and the later ones:
    // at least once each (a retried batch may arrive twice).
    let delivered: u64 = value(&table, "events delivered")
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no delivered count in:\n{table}"));
    assert!(delivered > 3000 + more, "{delivered} delivered:\n{table}");
    assert!(
        value(&table, "until a Publish is acknowledged").ends_with(" s"),
        "{table}"
    );
    for figure in [
        "peak RSS",
        "peak RSS until serving",
        "peak RSS while draining",
    ] {
        assert!(value(&table, figure).contains("MiB"), "{figure}: {table}");
    }
}
