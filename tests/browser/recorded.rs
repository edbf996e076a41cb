//! The recorded history is what the UI tests assume: the CLI, which shares no code
//! with the page, reads it so.

use crate::scenario::{self, POD, POD_NS};
use crate::support::eventgate_stdout;

/// `eventgate stats --by pod`'s row for `ns/pod` over the scenario: RESTARTS, OOM,
/// NONZERO, 137, OOMKILLED.
pub fn pod_stats(db: &str, key: &str) -> Vec<u64> {
    let scenario = scenario::get();
    let stats = eventgate_stdout(&[
        "stats",
        "--db",
        db,
        "--by",
        "pod",
        "--since",
        &scenario.since,
        "--until",
        &scenario.until,
    ]);
    stats
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{key} ")))
        .unwrap_or_else(|| panic!("no row for {key}:\n{stats}"))
        .split_whitespace()
        .map(|n| n.parse().unwrap_or_else(|_| panic!("not a count: {n}")))
        .collect()
}

#[test]
fn the_recorded_pod_restarted_three_times_and_failed_three_ways() {
    let scenario = scenario::get();
    let counts = pod_stats(scenario::arg(&scenario.db()), &format!("{POD_NS}/{POD}"));
    // Restarts 3 (four app containers), at least one OOM event, non-zero exits 3
    // (2, 137, OOM-killed), two of them 137, one OOM-killed.
    assert_eq!(counts[0], 3, "{counts:?}");
    assert!(counts[1] >= 1, "{counts:?}");
    assert_eq!(&counts[2..], [3, 2, 1], "{counts:?}");
}
