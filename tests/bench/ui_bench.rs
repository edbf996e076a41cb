//! `bench ui` at a tiny size, so the history page's ingest table cannot rot: both
//! phases run against the same gateway and every reader's answer is a 200 or a 503
//! the page means to give.

use crate::support::*;

#[test]
fn the_ui_benchmark_measures_ingest_without_and_with_readers() {
    let out = eventgate()
        .args([
            "bench",
            "ui",
            "--rounds",
            "1",
            "--events",
            "300",
            "--prefill",
            "600",
            "--readers",
            "2",
        ])
        .output()
        .expect("run eventgate bench ui");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench ui failed:\n{stderr}");
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    for first in ["1", "median"] {
        let line = table
            .lines()
            .find(|l| l.starts_with(&format!("| {first} |")))
            .unwrap_or_else(|| panic!("no row {first:?} in:\n{table}"));
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        let number = |i: usize| -> f64 {
            cells[i]
                .parse()
                .unwrap_or_else(|_| panic!("cell {i} of {cells:?} is not a number"))
        };
        for i in 1..=6 {
            assert!(number(i) > 0.0, "cell {i} of {cells:?}");
        }
        // 200 / 503 busy / 503 deadline / other: two readers never exceed the two
        // reads allowed at once, and each asked at least once.
        let mix: Vec<u64> = cells[10]
            .split(" / ")
            .map(|n| n.parse().expect("a count"))
            .collect();
        assert_eq!(mix.len(), 4, "{cells:?}");
        assert!(mix[0] >= 2, "{cells:?}");
        assert_eq!(mix[1..], [0, 0, 0], "{cells:?}\n{stderr}");
    }
}
