//! `bench tree` at a tiny size, twice on one store: every row of its tables is
//! produced with numbers that make sense, the second run reuses the store, and the
//! first run's upgrade (the tree emptied and built again in place) left a store the
//! second run's `audit verify --checkpoints` still accepts.

use crate::support::*;

/// The table row whose first cell starts with `first`, split into its cells.
fn row<'a>(table: &'a str, first: &str) -> Vec<&'a str> {
    let line = table
        .lines()
        .find(|l| l.starts_with(&format!("| {first}")))
        .unwrap_or_else(|| panic!("no row {first:?} in:\n{table}"));
    line.trim_matches('|').split('|').map(str::trim).collect()
}

fn number(cell: &str) -> f64 {
    cell.trim_end_matches(['x', '%'])
        .parse()
        .unwrap_or_else(|_| panic!("{cell:?} is not a number"))
}

/// A time as printed ("12 ns", "3.4 µs", "1.25 ms", "12.0 s"), in seconds.
fn seconds(cell: &str) -> f64 {
    let (value, unit) = cell
        .split_once(' ')
        .unwrap_or_else(|| panic!("{cell:?} is not a time"));
    let scale = match unit {
        "ns" => 1e-9,
        "µs" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        _ => panic!("{cell:?} is not a time"),
    };
    number(value) * scale
}

fn run(db: &std::path::Path) -> String {
    let out = eventgate()
        .args(["bench", "tree", "--rows", "2000", "--db"])
        .arg(db)
        .args([
            "--proofs",
            "20",
            "--insert-batches",
            "6",
            "--batch-rows",
            "100",
            "--rounds",
            "2",
        ])
        .output()
        .expect("run eventgate bench tree");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench tree failed:\n{stderr}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn check_tables(table: &str) {
    for first in [
        "insert_rows (chain + tree",
        "raw_insert_rows (plain rusqlite",
        "tree appends alone",
        "tree hashing alone",
    ] {
        let cells = row(table, first);
        assert!(number(cells[1]) > 0.0, "{cells:?}");
        assert!(seconds(cells[2]) > 0.0, "{cells:?}");
        assert!(number(cells[3]) > 0.0, "{cells:?}");
    }
    // The tree's work is part of insert_rows': its share is below the whole.
    let hashing = row(table, "tree hashing alone");
    assert!(number(hashing[4]) < 100.0, "{hashing:?}");

    let tree = row(table, "Merkle tree (audit_tree_hashes");
    // About two stored hashes of 32 bytes per row, 126 to a page of 4096: 65 bytes,
    // more in a tree this small (its last chunk is partly empty).
    let per_row = number(tree[2]);
    assert!((60.0..100.0).contains(&per_row), "{tree:?}");
    assert!(tree[5] == "met" || tree[5] == "NOT met", "{tree:?}");
    let events = row(table, "events table and its indexes");
    assert!(number(events[2]) > 300.0, "{events:?}");

    for first in [
        "inclusion (prove::inclusion), warm",
        "inclusion (prove::inclusion), cold",
        "consistency (prove::consistency), warm",
        "consistency (prove::consistency), cold",
        "check_record",
        "check_tree",
        "check (the head's signature",
    ] {
        let cells = row(table, first);
        let (p50, p99, max) = (seconds(cells[1]), seconds(cells[2]), seconds(cells[3]));
        assert!(p50 > 0.0 && p50 <= p99 && p99 <= max, "{cells:?}");
        assert!(seconds(cells[5]) > 0.0, "{cells:?}");
        assert!(number(cells[7]) > 0.0, "{cells:?}");
    }
    assert!(
        row(table, "inclusion (prove::inclusion), warm")[8].starts_with("p99 under"),
        "the proofs are judged against their goals"
    );

    let scan = row(table, "plain scan");
    let walk = row(table, "verify (chain walk");
    let both = row(table, "verify --checkpoints");
    let upgrade = row(table, "tree::catch_up");
    for cells in [&scan, &walk, &both, &upgrade] {
        assert_eq!(cells[1], "2000", "every row passed: {cells:?}");
        assert!(number(cells[3]) > 0.0, "{cells:?}");
        assert!(number(cells[4]) > 0.0, "{cells:?}");
    }
    let found = table
        .lines()
        .find(|l| l.starts_with("- chain walk + tree pass / chain walk alone"))
        .unwrap_or_else(|| panic!("no ratio line in:\n{table}"));
    assert!(
        found.contains("recomputed 2000 leaves and found 8 signed roots"),
        "{found}"
    );
}

#[test]
fn the_tree_benchmark_prints_every_row_and_reuses_its_store() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("tree.db");

    let first = run(&db);
    assert!(first.contains("generated at"), "{first}");
    check_tables(&first);

    let second = run(&db);
    assert!(second.contains("reused; generated at"), "{second}");
    check_tables(&second);
}
