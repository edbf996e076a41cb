//! `eventgate bench soak` for a short while, so it cannot rot: load with a fault
//! every second or so, then every acknowledged event in every sink (once in SQLite),
//! the chain intact and the report written.

use crate::support;

use support::*;

/// The value cell of a `| figure | value |` row.
fn value<'a>(table: &'a str, figure: &str) -> &'a str {
    table
        .lines()
        .find(|l| l.starts_with(&format!("| {figure}")))
        .and_then(|l| l.rsplit('|').nth(1))
        .map(str::trim)
        .unwrap_or_else(|| panic!("no {figure:?} row in:\n{table}"))
}

#[test]
fn a_short_soak_loses_nothing_acknowledged_and_says_so() {
    let out_dir = tempfile::tempdir().expect("tempdir");
    let out = eventgate()
        .args([
            "bench",
            "soak",
            "--duration",
            "40s",
            "--fault-every",
            "1500ms",
        ])
        .args(["--seed", "7", "--rate", "100", "--out"])
        .arg(out_dir.path())
        .output()
        .expect("run eventgate bench soak");
    let table = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{table}\n{stderr}");
    let acked: u64 = value(&table, "events acknowledged")
        .parse()
        .unwrap_or_else(|_| panic!("no acknowledged count in:\n{table}"));
    assert!(acked > 1000, "{table}");
    let faults: usize = table
        .lines()
        .filter(|l| l.starts_with("| faults: "))
        .filter_map(|l| l.rsplit('|').nth(1)?.trim().parse::<usize>().ok())
        .sum();
    assert!(faults >= 10, "{faults} faults:\n{table}");
    // Lost / duplicated / stored without an acknowledgement (a Publish cut off after
    // its event was durable, which is allowed).
    assert!(
        value(&table, "SQLite (exactly once)").starts_with("0 / 0 / "),
        "{table}"
    );
    assert!(
        value(&table, "file (at least once)").starts_with("0 / "),
        "{table}"
    );
    assert!(
        value(&table, "Kafka (at least once)").starts_with("0 / "),
        "{table}"
    );
    assert_eq!(value(&table, "audit chain (`audit verify`)"), "intact");
    assert!(table.contains("Verdict: PASS"), "{table}");
    let csv = std::fs::read_to_string(out_dir.path().join("resources.csv")).expect("resources.csv");
    assert!(csv.lines().count() > 2, "{csv}");
    assert!(out_dir.path().join("soak.md").is_file());
    // The machine-readable report says the same, and the growth check ran on a
    // sample a second: it could have failed.
    let json: serde_json::Value = serde_json::from_slice(
        &std::fs::read(out_dir.path().join("soak.json")).expect("soak.json"),
    )
    .expect("soak.json is JSON");
    assert_eq!(json["verdict"], "PASS", "{json}");
    assert_eq!(json["acknowledged"].as_u64(), Some(acked), "{json}");
    assert_eq!(json["growth"]["run_checked"], true, "{json}");
    assert!(json["samples"].as_u64().is_some_and(|n| n >= 30), "{json}");
    assert_eq!(
        json["exits"]["unexplained"],
        serde_json::json!([]),
        "{json}"
    );
    assert_eq!(json["sinks"]["sqlite"]["lost"], 0, "{json}");
}
