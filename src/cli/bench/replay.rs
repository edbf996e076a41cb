//! `eventgate bench replay`: `replay --to-address` into a running eventgate at each
//! window size, next to plain Forward calls with the same concurrency in the same run.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use super::{median, rate};
use crate::bench::replay::{ReplayBench, Round, round, write_store};
use crate::cli::CliError;

#[derive(Debug, Args)]
pub struct ReplayBenchArgs {
    /// Events in the store replayed (container lifecycles, six events each).
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u32).range(1..))]
    pub events: u32,
    /// `--in-flight` values to measure.
    #[arg(long = "in-flight", value_delimiter = ',', default_values_t = [1u16, 8, 32],
          value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub in_flight: Vec<u16>,
    /// Events per replay batch (`--batch`); default: replay's own (100, or 1000 with
    /// more than one in flight).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub batch: Option<u32>,
    /// Rounds; the median is reported.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=50))]
    pub rounds: u32,
    /// The target gateway's `spool.fsync`: each Forward answers once its event is
    /// durable per this mode.
    #[arg(long, value_enum, default_value = "batch")]
    pub spool_fsync: super::exchange::SpoolFsync,
}

pub(super) async fn run(args: ReplayBenchArgs) -> Result<ExitCode, CliError> {
    let (eventgate, dir) = super::binary_and_dir()?;
    let bench = ReplayBench {
        events: args.events as usize,
        batch: args.batch.map(|b| b as usize),
        spool_fsync: args.spool_fsync.toml(),
    };
    let store = dir.path().join("audit.db");
    let events = write_store(&store, bench.events)?;
    let mut results: Vec<Vec<Round>> = vec![Vec::new(); args.in_flight.len()];
    // Window sizes alternate within a round, so a slow spell of the disk or the
    // machine does not fall on one of them only.
    for n in 0..args.rounds {
        for (i, in_flight) in args.in_flight.iter().enumerate() {
            let r = round(
                &eventgate,
                dir.path(),
                &store,
                &events,
                &bench,
                usize::from(*in_flight),
            )
            .await?;
            eprintln!(
                "round {} in flight {:>4}: replay {:>8.0} events/s, plain Forward {:>8.0} events/s",
                n + 1,
                in_flight,
                rate(bench.events, r.replay),
                rate(bench.events, r.forward),
            );
            results[i].push(r);
        }
    }
    print_table(&args, &bench, &results);
    Ok(ExitCode::SUCCESS)
}

fn print_table(args: &ReplayBenchArgs, bench: &ReplayBench, results: &[Vec<Round>]) {
    let batches = bench
        .batch
        .map_or("replay's default".to_string(), |b| b.to_string());
    println!(
        "{} events replayed into eventgate (spool.fsync = {}), batches: {batches}, median of {} rounds\n",
        bench.events, bench.spool_fsync, args.rounds
    );
    println!(
        "| --in-flight | replay (events/s) | plain Forward, same concurrency (events/s) | replay / plain | replay / --in-flight 1 |"
    );
    println!("|---:|---:|---:|---:|---:|");
    let medians: Vec<(usize, f64, f64)> = results
        .iter()
        .filter_map(|rounds| {
            let first = rounds.first()?;
            let of = |pick: fn(&Round) -> Duration| {
                median(rounds.iter().map(|r| rate(bench.events, pick(r))).collect())
            };
            Some((first.in_flight, of(|r| r.replay), of(|r| r.forward)))
        })
        .collect();
    let one = medians
        .iter()
        .find(|(n, _, _)| *n == 1)
        .map(|(_, replay, _)| *replay);
    for (in_flight, replay, forward) in &medians {
        let versus_one = one.map_or("-".to_string(), |one| format!("{:.2}x", replay / one));
        println!(
            "| {in_flight} | {replay:.0} | {forward:.0} | {:.0}% | {versus_one} |",
            100.0 * replay / forward
        );
    }
}
