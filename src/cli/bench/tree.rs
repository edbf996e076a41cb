//! `eventgate bench tree`: the audit store's Merkle tree on a generated store of
//! millions of rows (insert cost, disk space, proofs, `audit verify`, the upgrade of
//! an older store), each figure next to a plain peer measured in the same run.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use crate::bench::query::generate::Params;
use crate::bench::tree::{
    self, InsertRound, Pass, Proofs, Storage, Timed, TreeVerified, measure_insert, measure_proofs,
    measure_storage,
};
use crate::cli::CliError;

#[derive(Debug, Args)]
pub struct TreeBenchArgs {
    /// Rows in the generated store.
    #[arg(long, default_value_t = 10_000_000, value_parser = clap::value_parser!(u64).range(1000..))]
    pub rows: u64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The generated store; reused when it was generated with the same parameters.
    #[arg(long, value_name = "PATH", default_value = "data/bench/tree.db")]
    pub db: PathBuf,
    /// Proofs of each kind timed, warm and cold.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub proofs: u32,
    /// Batches written per insert round (into fresh stores).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub insert_batches: u32,
    /// Rows per insert batch.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub batch_rows: u32,
    /// Insert rounds, each into fresh stores.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub rounds: u32,
}

/// Store parameters other than the size: the query benchmark's defaults, so the
/// rows are the ones that benchmark measures.
const SPAN_SECS: i64 = 7 * 86_400;
const CONTAINERS: u32 = 20_000;

pub(super) async fn run(args: TreeBenchArgs) -> Result<ExitCode, CliError> {
    tokio::task::spawn_blocking(move || run_blocking(args))
        .await
        .map_err(|e| CliError::Usage(format!("the benchmark stopped unexpectedly: {e}")))?
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".to_owned())
}

fn run_blocking(args: TreeBenchArgs) -> Result<ExitCode, CliError> {
    let load_at_start = load_average();
    let params = Params {
        rows: args.rows,
        span_secs: SPAN_SECS,
        containers: CONTAINERS,
        seed: args.seed,
    };
    let mut reported = 0;
    let prepared = tree::prepare(&args.db, &params, &mut |written, elapsed| {
        if written >= reported + 1_000_000 || written == params.rows {
            reported = written;
            eprintln!(
                "generated {written} rows in {:.0} s ({:.0} rows/s)",
                elapsed.as_secs_f64(),
                written as f64 / elapsed.as_secs_f64().max(1e-9)
            );
        }
    })?;
    println!(
        "store: {} ({} rows, {:.2} GiB, {} signed tree heads), {} at {:.0} rows/s",
        prepared.path.display(),
        prepared.rows,
        prepared.bytes as f64 / f64::from(1 << 30),
        prepared.heads.len(),
        match prepared.reused {
            true => "reused; generated",
            false => "generated",
        },
        prepared.rows_per_sec,
    );

    let (batches, batch_rows) = (args.insert_batches as usize, args.batch_rows as usize);
    let inserts = measure_insert(
        &params,
        batches,
        batch_rows,
        args.rounds as usize,
        &mut |round, times| {
            eprintln!(
                "insert round {}: insert_rows {}, raw_insert_rows {}, tree appends {} per batch (median)",
                round + 1,
                duration(median(&times.chained)),
                duration(median(&times.raw)),
                duration(median(&times.appends)),
            );
        },
    )?;
    let storage = measure_storage(&prepared.path, prepared.rows)?;
    eprintln!("storage measured");
    let proofs = measure_proofs(
        &prepared.path,
        &prepared.heads,
        &prepared.verifier,
        args.proofs as usize,
        args.seed,
    )?;
    eprintln!("proofs measured");
    let (bytes, reading) = tree::read_through(&prepared.path)?;
    eprintln!(
        "read the store once ({:.2} GiB in {:.1} s)",
        bytes as f64 / f64::from(1 << 30),
        reading.as_secs_f64()
    );
    let scan = tree::plain_scan(&prepared.path)?;
    eprintln!("plain scan: {:.0} rows/s", scan.rows_per_sec());
    let walk = tree::chain_walk(&prepared.path)?;
    eprintln!("audit verify: {:.0} rows/s", walk.rows_per_sec());
    let both = tree::chain_and_tree(&prepared.path, &prepared.heads, &prepared.verifier)?;
    eprintln!(
        "audit verify --checkpoints: {:.0} rows/s",
        both.pass.rows_per_sec()
    );
    let newest = prepared
        .heads
        .last()
        .map(String::as_str)
        .unwrap_or_default();
    let upgrade = tree::upgrade(&prepared.path, newest)?;
    eprintln!("upgrade: {:.0} rows/s", upgrade.rows_per_sec());

    println!(
        "load average (1, 5, 15 min): {load_at_start} at the start, {} at the end",
        load_average()
    );
    print_insert(&inserts, batch_rows);
    print_storage(&storage);
    print_proofs(&proofs, args.proofs);
    print_verify(&scan, &walk, &both, proofs.heads);
    print_upgrade(&scan, &upgrade);
    Ok(ExitCode::SUCCESS)
}

fn median(values: &[Duration]) -> Duration {
    percentile(values, 0.5)
}

/// The smallest value at least `q` of the values are at or below.
fn percentile(values: &[Duration], q: f64) -> Duration {
    let mut sorted = values.to_vec();
    sorted.sort();
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    match nanos {
        0..1_000 => format!("{nanos} ns"),
        1_000..1_000_000 => format!("{:.1} µs", nanos as f64 / 1e3),
        1_000_000..10_000_000_000 => format!("{:.2} ms", nanos as f64 / 1e6),
        _ => format!("{:.1} s", d.as_secs_f64()),
    }
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64().max(1e-12)
}

fn mib(kb: Option<u64>) -> String {
    kb.map_or("-".to_owned(), |kb| {
        format!("{:.1} MiB", kb as f64 / 1024.0)
    })
}

fn met(yes: bool) -> &'static str {
    match yes {
        true => "met",
        false => "NOT met",
    }
}

fn print_insert(rounds: &[InsertRound], batch_rows: usize) {
    let all = |side: fn(&InsertRound) -> &Vec<Duration>| -> Vec<Duration> {
        rounds
            .iter()
            .flat_map(|r| side(r).iter().copied())
            .collect()
    };
    let chained = median(&all(|r| &r.chained));
    let raw = median(&all(|r| &r.raw));
    let appends = median(&all(|r| &r.appends));
    let hashing = median(&all(|r| &r.hashing));
    let batches = rounds.first().map_or(0, |r| r.chained.len());
    println!(
        "\n1. insert: {} rounds of {batches} batches of {batch_rows} generated rows, each batch written by every row's code into fresh stores of its own (the sides taking turns going first); median batch\n",
        rounds.len()
    );
    println!("| insert | rows/s | per row | time / raw_insert_rows | share of insert_rows' time |");
    println!("|---|---:|---:|---:|---:|");
    let line = |name: &str, d: Duration, vs_raw: String, share: String| {
        println!(
            "| {name} | {:.0} | {} | {vs_raw} | {share} |",
            batch_rows as f64 / d.as_secs_f64().max(1e-12),
            duration(d / u32::try_from(batch_rows).unwrap_or(1)),
        );
    };
    let share = |d: Duration| format!("{:.1}%", 100.0 * ratio(d, chained));
    line(
        "insert_rows (chain + tree, as the sqlite forwarder writes)",
        chained,
        format!("{:.2}x", ratio(chained, raw)),
        "100%".to_owned(),
    );
    line(
        "raw_insert_rows (plain rusqlite: no chain, no tree)",
        raw,
        "1.00x".to_owned(),
        "-".to_owned(),
    );
    line(
        "tree appends alone (Appender: edge read, leaf + interior SHA-256, chunk writes; own transaction)",
        appends,
        format!("{:.2}x", ratio(appends, raw)),
        share(appends),
    );
    line(
        "tree hashing alone (leaf + interior SHA-256, in memory)",
        hashing,
        format!("{:.2}x", ratio(hashing, raw)),
        share(hashing),
    );
    let per_round = |f: &dyn Fn(&InsertRound) -> f64| -> String {
        rounds
            .iter()
            .map(|r| format!("{:.2}", f(r)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!(
        "\n- insert_rows / raw_insert_rows by round (medians): {}",
        per_round(&|r| ratio(median(&r.chained), median(&r.raw)))
    );
    println!(
        "- tree appends alone / insert_rows by round (medians): {}",
        per_round(&|r| ratio(median(&r.appends), median(&r.chained)))
    );
}

fn print_storage(s: &Storage) {
    let rows = s.rows.max(1) as f64;
    let rest = s.used_bytes.saturating_sub(s.tree_bytes);
    let per_row = s.tree_bytes as f64 / rows;
    println!(
        "\n2. storage: {} rows; the tree stores {} hashes ({:.2} per row, 32 bytes each, 126 to a row of audit_tree_hashes)\n",
        s.rows,
        s.stored_hashes,
        s.stored_hashes as f64 / rows
    );
    println!("| storage | bytes | bytes per row | / events | goal | met |");
    println!("|---|---:|---:|---:|---:|---:|");
    println!(
        "| Merkle tree (audit_tree_hashes, dbstat: {} pages) | {} | {per_row:.1} | {:.3}x | at most 80 bytes per row | {} |",
        s.tree_pages,
        s.tree_bytes,
        s.tree_bytes as f64 / rest.max(1) as f64,
        met(per_row <= 80.0)
    );
    println!(
        "| events table and its indexes (the file's other pages in use) | {rest} | {:.1} | 1.000x | - | - |",
        rest as f64 / rows
    );
}

fn proof_row(name: &str, timed: &Timed, peer: &str, goal: Option<Duration>) {
    let (p50, p99) = (
        percentile(&timed.eventgate, 0.5),
        percentile(&timed.eventgate, 0.99),
    );
    let max = timed.eventgate.iter().max().copied().unwrap_or_default();
    let (peer50, peer99) = (percentile(&timed.peer, 0.5), percentile(&timed.peer, 0.99));
    let (goal, verdict) = match goal {
        Some(goal) => (
            format!("p99 under {} ms", goal.as_millis()),
            met(p99 < goal),
        ),
        None => ("-".to_owned(), "-"),
    };
    println!(
        "| {name} | {} | {} | {} | {peer} | {} | {} | {:.2}x | {goal} | {verdict} |",
        duration(p50),
        duration(p99),
        duration(max),
        duration(peer50),
        duration(peer99),
        ratio(p50, peer50),
    );
}

fn print_proofs(p: &Proofs, count: u32) {
    let mean = |sum: usize, of: usize| sum as f64 / of.max(1) as f64;
    println!(
        "\n3. proofs: {count} inclusion proofs of random rows against the newest head (tree of {} leaves) and {count} consistency proofs between random pairs of the {} heads; warm: one connection each side, after one untimed proof; cold: a connection opened for each proof, inside its time, as `eventgate audit prove` opens one; eventgate and its peer taking turns\n",
        p.tree_size, p.heads
    );
    println!(
        "| proof | eventgate p50 | p99 | max | peer | peer p50 | peer p99 | eventgate / peer (p50) | goal | met |"
    );
    println!("|---|---:|---:|---:|---|---:|---:|---:|---:|---:|");
    let reads = "plain rusqlite: the same distinct chunks, the tree's state, the store id";
    let inclusion_goal = Some(Duration::from_millis(10));
    let consistency_goal = Some(Duration::from_millis(50));
    proof_row(
        "inclusion (prove::inclusion), warm",
        &p.inclusion_warm,
        &format!("{reads} and the row"),
        inclusion_goal,
    );
    proof_row(
        "inclusion (prove::inclusion), cold",
        &p.inclusion_cold,
        &format!("{reads} and the row, fresh connection"),
        inclusion_goal,
    );
    proof_row(
        "consistency (prove::consistency), warm",
        &p.consistency_warm,
        reads,
        consistency_goal,
    );
    proof_row(
        "consistency (prove::consistency), cold",
        &p.consistency_cold,
        &format!("{reads}, fresh connection"),
        consistency_goal,
    );
    proof_row(
        "check_record (inclusion checker)",
        &p.check_record,
        "sha2: the leaf and one SHA-256 per proof hash",
        None,
    );
    proof_row(
        "check_tree (consistency checker)",
        &p.check_tree,
        "sha2: two SHA-256s per proof hash",
        None,
    );
    proof_row(
        "check (the head's signature, then the inclusion proof)",
        &p.check_file,
        "note::open: the head's signature alone",
        None,
    );
    let made_inclusion = p.inclusion_warm.eventgate.len();
    let made_consistency = p.consistency_warm.eventgate.len();
    println!(
        "\n- per inclusion proof: {:.1} hashes; the peer read {:.1} distinct chunks",
        mean(p.inclusion_hashes, made_inclusion),
        mean(p.inclusion_chunks, made_inclusion)
    );
    println!(
        "- per consistency proof: {:.1} hashes; the peer read {:.1} distinct chunks",
        mean(p.consistency_hashes, made_consistency),
        mean(p.consistency_chunks, made_consistency)
    );
}

fn pass_row(name: &str, pass: &Pass, scan: &Pass) {
    println!(
        "| {name} | {} | {} | {:.0} | {:.2}x | {} | {} |",
        pass.rows,
        duration(pass.elapsed),
        pass.rows_per_sec(),
        pass.rows_per_sec() / scan.rows_per_sec().max(1e-9),
        mib(pass.peak_kb),
        mib(pass.before_kb),
    );
}

fn print_verify(scan: &Pass, walk: &Pass, both: &TreeVerified, heads: usize) {
    println!(
        "\n4. audit verify on the whole store, one pass each, in this order, after the file was read once (untimed) to bring it into the page cache\n"
    );
    println!("| pass | rows | time | rows/s | rows/s / plain scan | peak RSS | RSS before |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    pass_row(
        "plain scan (rusqlite: the walk's SELECT, every value read)",
        scan,
        scan,
    );
    pass_row("verify (chain walk, keyless)", walk, scan);
    pass_row(
        &format!("verify --checkpoints (chain walk + tree pass, {heads} heads)"),
        &both.pass,
        scan,
    );
    println!(
        "\n- chain walk + tree pass / chain walk alone (time): **{:.2}x**; the tree pass recomputed {} leaves and found {} signed roots",
        ratio(both.pass.elapsed, walk.elapsed),
        both.leaves,
        both.roots
    );
}

fn print_upgrade(scan: &Pass, upgrade: &Pass) {
    println!(
        "\n5. upgrade: the generated store's tree emptied (audit_tree_hashes deleted, size 0) and built again by tree::catch_up, as the writer builds the tree of a store made before it at open; its root then checked against the newest signed head\n"
    );
    println!("| upgrade | rows | time | rows/s | rows/s / plain scan | peak RSS | RSS before |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    pass_row("tree::catch_up (tree of an existing store)", upgrade, scan);
}
