//! `eventgate bench spool`: durable append throughput of the spool per fsync mode,
//! next to the disk's raw limit and to SQLite, measured in the same run.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;

use super::median;
use crate::bench::micros;
use crate::bench::spool::{Figures, SpoolBench, events, raw, spool, sqlite};
use crate::cli::CliError;
use crate::spool::Fsync;

#[derive(Debug, Args)]
pub struct SpoolArgs {
    /// Concurrent publishers; each waits for its event to be durable before the next.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub publishers: u32,
    /// Events per round for `batch` and `none` (and the baselines next to them).
    #[arg(long, default_value_t = 200_000, value_parser = clap::value_parser!(u32).range(1..))]
    pub events: u32,
    /// Events per round for `always` (one fdatasync each, so far slower).
    #[arg(long, default_value_t = 3_000, value_parser = clap::value_parser!(u32).range(1..))]
    pub always_events: u32,
    /// Bytes per record on disk.
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u32).range(64..=1_048_576))]
    pub size: u32,
    /// Rounds; the median round (by events/s) of each row is reported.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=50))]
    pub rounds: u32,
    /// Where to write (default: a temporary directory); must be on the disk to measure.
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

/// The rows of the table, in order.
const ROWS: [&str; 7] = [
    "spool, fsync = batch",
    "raw: same bytes, 1 fdatasync per group of the spool's mean size",
    "SQLite: same records, WAL, synchronous=FULL, 1 commit per group",
    "spool, fsync = always",
    "raw: same bytes, 1 fdatasync per record",
    "spool, fsync = none",
    "raw: same bytes, no fdatasync",
];

/// The raw row each row is compared with, round by round (the disk's sync latency
/// varies a lot between rounds on shared machines; within a round it is comparable).
const PEER: [Option<usize>; 7] = [Some(1), None, Some(1), Some(4), None, Some(6), None];

pub(super) async fn run(args: SpoolArgs) -> Result<ExitCode, CliError> {
    let io = |context: &str| {
        let context = context.to_string();
        move |source| CliError::Io { context, source }
    };
    let base = match &args.dir {
        Some(dir) => tempfile::Builder::new()
            .prefix("eg-bench-spool")
            .tempdir_in(dir),
        None => tempfile::Builder::new().prefix("eg-bench-spool").tempdir(),
    }
    .map_err(io("cannot create a temporary directory"))?;
    let bench = SpoolBench {
        publishers: args.publishers as usize,
        events: args.events as usize,
        size: args.size as usize,
    };
    let many = Arc::new(events(bench.events, bench.size));
    let few = Arc::new(events(args.always_events as usize, bench.size));
    let mut results: Vec<Vec<Figures>> = vec![Vec::new(); ROWS.len()];
    for round in 0..args.rounds as usize {
        let dir = base.path().join(format!("round-{round}"));
        std::fs::create_dir_all(&dir).map_err(io("cannot create a round directory"))?;
        let batch = spool(&dir.join("batch"), Fsync::Batch, &bench, many.clone()).await?;
        let group = batch.group.round().max(1.0) as usize;
        let figures = [
            raw(dir.join("raw-batch.log"), many.clone(), group, true).await?,
            sqlite(dir.join("sqlite.db"), many.clone(), group).await?,
            spool(&dir.join("always"), Fsync::Always, &bench, few.clone()).await?,
            raw(dir.join("raw-always.log"), few.clone(), 1, true).await?,
            spool(&dir.join("none"), Fsync::None, &bench, many.clone()).await?,
            raw(dir.join("raw-none.log"), many.clone(), group, false).await?,
        ];
        for (i, f) in std::iter::once(batch).chain(figures).enumerate() {
            eprintln!(
                "round {} {:<66} {:>9.0} events/s {:>7.1} MiB/s  p99 {:>9}  group {:.1}",
                round + 1,
                ROWS[i],
                f.events_per_sec(),
                f.mib_per_sec(),
                micros(f.latency.value_at_quantile(0.99)),
                f.group,
            );
            results[i].push(f);
        }
        std::fs::remove_dir_all(&dir).map_err(io("cannot clean up a round directory"))?;
    }
    println!(
        "{} publishers, records of {} bytes, {} events per round ({} with fsync = always), median of {} rounds\n",
        bench.publishers, bench.size, bench.events, args.always_events, args.rounds
    );
    println!(
        "| what | events/s | MiB/s | p50 | p99 | records per fdatasync | vs its raw row, same round |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (i, row) in ROWS.iter().enumerate() {
        let ratio = PEER[i].map(|peer| {
            let ratios: Vec<f64> = results[i]
                .iter()
                .zip(&results[peer])
                .map(|(f, p)| f.events_per_sec() / p.events_per_sec().max(1e-9))
                .collect();
            format!("{:.2}x", median(ratios))
        });
        let mut rounds = results[i].clone();
        rounds.sort_by(|a, b| a.events_per_sec().total_cmp(&b.events_per_sec()));
        let Some(f) = rounds.get(rounds.len() / 2) else {
            continue;
        };
        let per_sync = if f.fsyncs == 0 {
            "-".to_string()
        } else {
            format!("{:.1}", f.events as f64 / f.fsyncs as f64)
        };
        println!(
            "| {row} | {:.0} | {:.1} | {} | {} | {per_sync} | {} |",
            f.events_per_sec(),
            f.mib_per_sec(),
            micros(f.latency.value_at_quantile(0.5)),
            micros(f.latency.value_at_quantile(0.99)),
            ratio.unwrap_or_else(|| "-".into()),
        );
    }
    Ok(ExitCode::SUCCESS)
}
