//! `eventgate bench central` at a tiny size, so docs/benchmarks.md's central-ingest and
//! pod-timeline tables cannot rot: every row stores every event (the same rows), the
//! two-gateway rows run two gateways, the ratios come from the run, and the
//! timeline's summary says what its EXPLAIN shows. Needs tansu and PostgreSQL's server binaries.

use crate::support;

use support::tansu::tansu_bin;
use support::*;

const EVENTS: u64 = 3000;
const ROWS: u64 = 20_000;
const PODS: u64 = 5;

/// The table row whose first cell is `first`, split into its cells.
fn row<'a>(table: &'a str, first: &str) -> Vec<&'a str> {
    let line = table
        .lines()
        .find(|l| l.starts_with(&format!("| {first} |")))
        .unwrap_or_else(|| panic!("no row {first:?} in:\n{table}"));
    line.trim_matches('|').split('|').map(str::trim).collect()
}

fn number(cell: &str) -> f64 {
    cell.split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{cell:?} is not a number"))
}

/// `name count, name count` cells: the counts by name.
fn counts(cell: &str) -> Vec<(String, u64)> {
    cell.split(", ")
        .map(|part| {
            let (name, n) = part
                .rsplit_once(' ')
                .unwrap_or_else(|| panic!("{cell:?} is not `name count, ...`"));
            (name.to_owned(), n.parse().expect("a count"))
        })
        .collect()
}

/// A time cell ("850 µs", "1.24 ms") in microseconds.
fn micros(cell: &str) -> f64 {
    match cell.split_once(' ') {
        Some((n, "µs")) => n.parse().expect("µs"),
        Some((n, "ms")) => n.parse::<f64>().expect("ms") * 1000.0,
        _ => panic!("{cell:?} is not a time"),
    }
}

/// The `**N.NNx**` of the ratio line starting with `start`, and its rounds.
fn ratio(table: &str, start: &str) -> (f64, Vec<f64>) {
    let line = table
        .lines()
        .find(|l| l.starts_with(start) && l[start.len()..].starts_with(": **"))
        .unwrap_or_else(|| panic!("no {start:?} in:\n{table}"));
    let value = line
        .split("**")
        .nth(1)
        .and_then(|r| r.strip_suffix('x'))
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("no ratio in {line}"));
    let rounds = line
        .split("(rounds ")
        .nth(1)
        .and_then(|r| r.split(')').next())
        .unwrap_or_else(|| panic!("no rounds in {line}"))
        .split(", ")
        .map(|r| r.parse().expect("a round's ratio"))
        .collect();
    (value, rounds)
}

#[test]
fn the_central_benchmark_stores_every_row_in_each_configuration_and_times_the_pod_timeline() {
    let tansu = tansu_bin();
    let out = eventgate()
        .args(["bench", "central", "--rounds", "1", "--log-level", "warn"])
        .args(["--events", &EVENTS.to_string()])
        .args(["--rows", &ROWS.to_string(), "--pods", &PODS.to_string()])
        .args(["--tansu", path_str(&tansu)])
        .output()
        .expect("run eventgate bench central");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench central failed:\n{stderr}");
    let table = String::from_utf8_lossy(&out.stdout).into_owned();

    // Every row stored every event, at a rate measured in the run.
    let rows = [
        ("raw COPY, 1 connection", 0),
        ("raw COPY, 2 connections", 0),
        ("forwarder's writer alone", 0),
        ("1 gateway, postgres only", 1),
        ("2 gateways, postgres only", 2),
        ("1 gateway, defaults + postgres", 1),
        ("2 gateways, defaults + postgres", 2),
    ];
    let mut measured = Vec::new();
    for (label, gateways) in rows {
        let cells = row(&table, label);
        if gateways > 0 && cells[15] == "1 of 1" {
            // A round the gateways stopped storing in is reported with the server's
            // sessions then, one of them waiting for another's lock (the gateways'
            // deadlock through the offsets table); its cells are empty.
            let stall = table
                .split(&format!("\n- {label}, round 1: "))
                .nth(1)
                .unwrap_or_else(|| panic!("{label} stalled, and no report of it:\n{table}"));
            let report: Vec<&str> = stall.lines().take_while(|l| !l.is_empty()).collect();
            assert!(
                report
                    .iter()
                    .any(|l| l.contains("waiting Lock/") && !l.contains("blocked by {}")),
                "{label}: {report:#?}"
            );
            assert!(cells[2..15].iter().all(|c| *c == "-"), "{label}: {cells:?}");
            continue;
        }
        assert_eq!(cells[15], "0 of 1", "{label}: {cells:?}");
        measured.push(label);
        assert!(number(cells[2]) > 0.0, "{label}: {cells:?}");
        assert!(number(cells[3]) > 0.0, "{label}: {cells:?}");
        assert_eq!(number(cells[6]) as u64, EVENTS, "{label} rows: {cells:?}");
        if gateways == 0 {
            assert_eq!(cells[8], "-", "{label}: {cells:?}");
            continue;
        }
        // The rows are the gateways' own, named by their writer: each gateway wrote
        // some (two gateways share the partitions), and together all of them.
        let written = counts(cells[8]);
        assert_eq!(written.len(), gateways, "{label} writers: {cells:?}");
        assert_eq!(
            written.iter().map(|(_, n)| n).sum::<u64>(),
            EVENTS,
            "{label}: {cells:?}"
        );
        assert!(
            written
                .iter()
                .all(|(name, n)| name.starts_with("central-") && *n > 0),
            "{label}: {cells:?}"
        );
        // The group's 4 partitions, split between the gateways at the end.
        let claimed = counts(cells[9]);
        assert_eq!(claimed.len(), gateways, "{label} claims: {cells:?}");
        assert_eq!(claimed.iter().map(|(_, n)| n).sum::<u64>(), 4, "{cells:?}");
        for cell in [cells[4], cells[5]] {
            assert!(cell.ends_with(" s"), "{label}: {cells:?}");
        }
        assert!(number(cells[14]) > 0.0, "{label} cores busy: {cells:?}");
    }

    // Whoever wrote them, the rows hold the same values.
    assert!(
        table.contains("- every round of every row above stored the same rows: md5 "),
        "no digest line in:\n{table}"
    );

    // The ratios are of this run's rows.
    let rate = |label: &str| number(row(&table, label)[2]);
    for (line, top, bottom) in [
        (
            "- one gateway (postgres only) / raw COPY",
            "1 gateway, postgres only",
            "raw COPY, 1 connection",
        ),
        (
            "- two gateways / one (postgres only)",
            "2 gateways, postgres only",
            "1 gateway, postgres only",
        ),
        (
            "- raw COPY, 2 connections / 1 (the server's own scaling here)",
            "raw COPY, 2 connections",
            "raw COPY, 1 connection",
        ),
    ] {
        if !(measured.contains(&top) && measured.contains(&bottom)) {
            assert!(
                table.contains(&format!("{line}: no round measured both")),
                "{line}"
            );
            continue;
        }
        let (value, rounds) = ratio(&table, line);
        assert_eq!(rounds.len(), 1, "{line}");
        let expected = rate(top) / rate(bottom);
        assert!(
            (value - expected).abs() <= 0.01 + expected * 0.01,
            "{line}: {value} but the rows say {expected}:\n{table}"
        );
    }

    // The pod timeline: the store holds what was asked, the pods asked for were
    // timed each way, the same rows each way, and the summary agrees with the plan
    // printed below it.
    let mut per_pod = Vec::new();
    for read in [
        "query --pod (Reader::each)",
        "timeline picture (connect + build + SVG)",
        "the same SQL, plain tokio-postgres",
    ] {
        let cells = row(&table, read);
        assert_eq!(number(cells[1]) as u64, ROWS, "{cells:?}");
        assert_eq!(number(cells[2]) as u64, PODS, "{cells:?}");
        let rows: Vec<f64> = cells[3].split(" / ").map(number).collect();
        assert!(
            rows.len() == 3 && rows[0] >= 1.0 && rows[0] <= rows[1] && rows[1] <= rows[2],
            "{cells:?}"
        );
        per_pod.push(rows);
        let (p50, p99, max) = (micros(cells[4]), micros(cells[5]), micros(cells[6]));
        assert!(0.0 < p50 && p50 <= p99 && p99 <= max, "{cells:?}");
        let verdict = if p99 < 300_000.0 {
            "met (p99)"
        } else {
            "not met (p99)"
        };
        assert_eq!(cells[7], format!("< 300 ms: {verdict}"), "{cells:?}");
    }
    assert!(per_pod.windows(2).all(|w| w[0] == w[1]), "{per_pod:?}");
    let plan: Vec<&str> = table
        .lines()
        .skip_while(|l| !l.starts_with("EXPLAIN (ANALYZE, BUFFERS) of that SQL for "))
        .skip(1)
        .filter(|l| l.starts_with("    "))
        .collect();
    assert!(
        plan.iter().any(|l| l.contains("Execution Time")),
        "no plan in:\n{table}"
    );
    // Index scans name their index after "using", bitmap index scans after "on".
    let index_scans = plan
        .iter()
        .filter(|l| {
            (l.contains("Index Scan using ") || l.contains("Bitmap Index Scan on "))
                && l.contains("pod_namespace_pod_name_time_idx")
        })
        .count();
    let summary = table
        .lines()
        .find(|l| l.starts_with("- plan: "))
        .unwrap_or_else(|| panic!("no plan summary in:\n{table}"));
    assert!(
        summary.starts_with(&format!(
            "- plan: {index_scans} partition(s) read through their events_pod index"
        )),
        "{summary} but the plan has {index_scans} such scans:\n{}",
        plan.join("\n")
    );
    assert!(index_scans >= 1, "{}", plan.join("\n"));
    // Any other scan (a bitmap heap scan is the heap side of a bitmap index scan, not
    // one of its own) and the rows it found: the summary's "every row through the
    // index" is yes only when they found none.
    let other_rows: u64 = plan
        .iter()
        .map(|l| l.trim_start().trim_start_matches("->").trim_start())
        .filter(|node| {
            let scan = node.split("  (").next().unwrap_or_default();
            scan.contains("Scan")
                && !scan.starts_with("Bitmap Heap Scan")
                && !scan.contains("pod_namespace_pod_name_time_idx")
        })
        .map(|node| {
            let actual = node.split("(actual ").nth(1).unwrap_or_default();
            let rows = actual.split("rows=").nth(1).unwrap_or_default();
            rows.split(' ')
                .next()
                .unwrap_or_default()
                .parse::<u64>()
                .expect("rows=")
        })
        .sum();
    let through = if other_rows == 0 { "yes" } else { "no" };
    assert!(
        summary.ends_with(&format!("every row through the index: {through}")),
        "{summary} but other scans found {other_rows} rows:\n{}",
        plan.join("\n")
    );
    let sorted = plan.iter().any(|l| {
        let node = l.trim_start().trim_start_matches("->").trim_start();
        node.starts_with("Sort ") || node.starts_with("Incremental Sort ")
    });
    assert_eq!(
        summary.contains("then the rows sorted"),
        sorted,
        "{summary}"
    );
}
