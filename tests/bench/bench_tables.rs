//! `bench exchange` and `bench forwarder` at tiny sizes, so the rows docs/benchmarks.md's
//! tables come from cannot rot: each row is produced, and says what it ran.

use crate::support;

#[cfg(feature = "kafka-tests")]
use support::tansu::tansu_bin;
use support::*;

/// The table row whose first cell is `first`, split into its cells.
fn row<'a>(table: &'a str, first: &str) -> Vec<&'a str> {
    let line = table
        .lines()
        .find(|l| l.starts_with(&format!("| {first} |")))
        .unwrap_or_else(|| panic!("no row {first:?} in:\n{table}"));
    line.trim_matches('|').split('|').map(str::trim).collect()
}

fn number(cell: &str) -> f64 {
    cell.trim_end_matches('%')
        .parse()
        .unwrap_or_else(|_| panic!("{cell:?} is not a number"))
}

fn run(args: &[&str]) -> String {
    let out = eventgate()
        .args(args)
        .output()
        .expect("run eventgate bench");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{args:?} failed:\n{stderr}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// One run measures the exchange alone, eventgate as it comes (no config file), and
/// the disk's group-commit limit, and gives both ratios from that same run.
#[test]
fn the_exchange_benchmark_runs_the_defaults_and_the_disk_next_to_the_exchange() {
    let table = run(&[
        "bench",
        "exchange",
        "--rounds",
        "1",
        "--events",
        "300",
        "--no-containerd",
    ]);

    let exchange = row(&table, "eventgate, exchange only");
    assert!(exchange[1].contains("`forwarder = []`"), "{exchange:?}");
    assert!(exchange[1].contains("\"batch\""), "{exchange:?}");
    assert_eq!(exchange[7], "0", "nothing lost: {exchange:?}");
    let defaults = row(&table, "eventgate, defaults");
    assert!(defaults[1].starts_with("no config file"), "{defaults:?}");
    assert_eq!(defaults[7], "0", "nothing lost: {defaults:?}");
    let disk = row(&table, "raw disk");
    assert!(
        disk[1].contains("per 4 (publishers x in flight)"),
        "{disk:?}"
    );
    assert!(number(disk[3]) > 0.0, "{disk:?}");
    assert!(
        !table.lines().any(|l| l.starts_with("| containerd |")),
        "--no-containerd still ran containerd:\n{table}"
    );

    // The defaults' forwarders stored every event of the round (the disk table's
    // last cell is a time, not "not within the drain timeout").
    let disk_rows: Vec<&str> = table
        .lines()
        .filter(|l| l.starts_with("| eventgate, defaults |"))
        .collect();
    let held = disk_rows
        .iter()
        .find(|l| l.contains("the delivery clock"))
        .unwrap_or_else(|| panic!("no forwarders' time in:\n{table}"));
    assert!(held.contains(" s ("), "{held}");

    for ratio in ["- (a) defaults / exchange only", "- (b) exchange only"] {
        let line = table
            .lines()
            .find(|l| l.starts_with(ratio))
            .unwrap_or_else(|| panic!("no {ratio:?} in:\n{table}"));
        let x = line
            .split("**")
            .nth(1)
            .and_then(|r| r.strip_suffix('x'))
            .unwrap_or_else(|| panic!("no ratio in {line}"));
        assert!(number(x) > 0.0, "{line}");
    }
}

/// The first number of the ratio line starting with `start` (the one in `**`).
fn ratio(table: &str, start: &str) -> f64 {
    let line = table
        .lines()
        .find(|l| l.starts_with(start))
        .unwrap_or_else(|| panic!("no {start:?} in:\n{table}"));
    let x = line
        .split("**")
        .nth(1)
        .and_then(|r| r.strip_suffix('x'))
        .unwrap_or_else(|| panic!("no ratio in {line}"));
    number(x)
}

/// `--signing off,on`: the defaults row with signed checkpoints next to the one
/// without, in the same run, the ratio of the two, and proof that the signing row
/// signed (the run fails when a gateway with signing on signed nothing).
#[test]
fn the_exchange_benchmark_runs_the_defaults_with_signing_off_and_on() {
    let table = run(&[
        "bench",
        "exchange",
        "--rounds",
        "1",
        "--events",
        "300",
        "--no-containerd",
        "--signing",
        "off,on",
    ]);
    let off = row(&table, "eventgate, defaults");
    assert!(off[1].starts_with("no config file"), "{off:?}");
    assert_eq!(off[7], "0", "nothing lost: {off:?}");
    let on = row(&table, "eventgate, defaults + signing");
    assert!(on[1].contains("`[signing]`"), "{on:?}");
    assert!(on[1].contains("`interval = \"1s\"`"), "{on:?}");
    assert!(on[1].contains("`every_rows = 10000`"), "{on:?}");
    assert_eq!(on[7], "0", "nothing lost: {on:?}");
    assert!(number(on[2]) > 0.0, "{on:?}");
    assert!(ratio(&table, "- signing on / off") > 0.0);

    let signed = table
        .lines()
        .find_map(|l| l.strip_prefix("- checkpoints signed per signing round: "))
        .unwrap_or_else(|| panic!("no checkpoints line in:\n{table}"));
    let (published, stored) = signed
        .strip_suffix(" in audit.db)")
        .and_then(|s| s.split_once(" ("))
        .unwrap_or_else(|| panic!("{signed}"));
    assert!(number(published) >= 1.0, "{signed}");
    assert!(number(stored) >= 1.0, "{signed}");

    // Without --signing, no signing row.
    assert!(
        !run(&[
            "bench",
            "exchange",
            "--rounds",
            "1",
            "--events",
            "100",
            "--no-containerd",
        ])
        .contains("defaults + signing"),
        "the signing row is only run when asked for"
    );
}

/// `bench upstream --signing off,on` at a small size: both rows store every event,
/// the signing rounds signed checkpoints, and the on / off ratio is printed.
#[cfg(feature = "containerd-tests")]
#[test]
fn the_upstream_benchmark_runs_signing_off_and_on() {
    assert!(have("containerd"), "containerd must be installed");
    let table = run(&[
        "bench",
        "upstream",
        "--events",
        "600",
        "--rounds",
        "1",
        "--signing",
        "off,on",
        "--timeout",
        "60s",
    ]);
    for first in [
        "defaults, spool.fsync = \"batch\"",
        "defaults, spool.fsync = \"batch\", signing on",
    ] {
        let cells = row(&table, first);
        assert_eq!(cells[7], "600 of 600", "{cells:?}");
    }
    assert!(ratio(&table, "- eventgate stored events/s") > 0.0);
    let signed = table
        .lines()
        .find_map(|l| l.strip_prefix("- checkpoints in audit.db per signing round: "))
        .unwrap_or_else(|| panic!("no checkpoints line in:\n{table}"));
    assert!(number(signed) >= 1.0, "{signed}");
}

/// Each sink's row has its raw baseline and the in-process pipeline next to the
/// gateway (the Kafka baseline's producer is warmed first, which needs a broker).
#[cfg(feature = "kafka-tests")]
#[test]
fn the_forwarder_benchmark_compares_each_sink_with_its_raw_baseline() {
    let tansu = tansu_bin();
    let table = run(&[
        "bench",
        "forwarder",
        "--rounds",
        "1",
        "--events",
        "600",
        "--sink",
        "file",
        "--sink",
        "sqlite",
        "--sink",
        "kafka",
        "--tansu",
        path_str(&tansu),
        "--timeout",
        "60s",
    ]);
    for sink in ["file", "sqlite", "kafka"] {
        let cells = row(&table, sink);
        for (i, what) in [(1, "through the gateway"), (2, "raw"), (6, "pipeline")] {
            assert!(number(cells[i]) > 0.0, "{sink} {what}: {cells:?}");
        }
        assert!(number(cells[4]) > 0.0, "{sink} gateway / raw: {cells:?}");
        // The file's lines are rendered inside the raw clock, as the forwarder does.
        let prepared = if sink == "file" {
            "nothing"
        } else {
            "µs/event"
        };
        assert!(cells[3].contains(prepared), "{sink}: {cells:?}");
    }
}

/// `bench fleet` at a tiny size: every row of docs/benchmarks.md's table is produced, each
/// with a rate taken in and the plain consumer's rate from the same run.
#[cfg(feature = "kafka-tests")]
#[test]
fn the_fleet_benchmark_compares_the_source_with_a_plain_consumer() {
    let tansu = tansu_bin();
    let table = run(&[
        "bench",
        "fleet",
        "--rounds",
        "1",
        "--events",
        "1000",
        "--tansu",
        path_str(&tansu),
    ]);
    for setup in [
        "defaults (spool, file, sqlite)",
        "spool only, no forwarder",
        "defaults, until every row is in the audit store",
    ] {
        let cells = row(&table, setup);
        for (i, what) in [(1, "taken in"), (2, "plain consumer"), (3, "ratio")] {
            assert!(number(cells[i]) > 0.0, "{setup} {what}: {cells:?}");
        }
        // Once reading (the group's join left out), for the intake rows.
        if !setup.starts_with("defaults, until") {
            for (i, what) in [(4, "reading"), (5, "plain reading"), (6, "ratio")] {
                assert!(number(cells[i]) > 0.0, "{setup} {what}: {cells:?}");
            }
        }
    }
    // The plain consumer both ways: as the source fetches, and librdkafka's default.
    let plain = table
        .lines()
        .find(|line| line.starts_with("plain librdkafka consumer: "))
        .unwrap_or_else(|| panic!("the plain consumer's line in {table}"));
    assert!(
        plain.contains("fetch.wait.max.ms = 100") && plain.contains("librdkafka's default"),
        "{plain}"
    );
}

/// `bench correlate` at a tiny size: both loads are measured next to JSON rendering.
#[test]
fn the_correlate_benchmark_compares_the_stage_with_json_rendering() {
    let table = run(&["bench", "correlate", "--rounds", "1", "--events", "1000"]);
    for load in ["many containers, each once", "one container crash-looping"] {
        let cells = row(&table, load);
        for (i, what) in [(1, "through the stage"), (2, "JSON"), (3, "ratio")] {
            assert!(number(cells[i]) > 0.0, "{load} {what}: {cells:?}");
        }
    }
}
