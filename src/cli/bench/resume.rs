//! `eventgate bench resume`: a resumed subscription's catch-up rate from the audit
//! store and from the spool, each against the same history read raw in the same run.

use std::process::ExitCode;

use clap::Args;

use super::{median, rate};
use crate::bench::resume::{From, Measured, measure};
use crate::cli::CliError;

#[derive(Debug, Args)]
pub struct ResumeBenchArgs {
    /// Events published, then resumed from the first.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u32).range(1000..))]
    pub events: u32,
    /// Rounds; the median is reported.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=50))]
    pub rounds: u32,
}

pub(super) async fn run(args: ResumeBenchArgs) -> Result<ExitCode, CliError> {
    let (eventgate, dir) = super::binary_and_dir()?;
    let events = args.events as usize;
    let mut results: Vec<Vec<Measured>> = vec![Vec::new(), Vec::new()];
    for n in 0..args.rounds {
        for (i, from) in [From::Store, From::Spool].into_iter().enumerate() {
            let m = measure(&eventgate, dir.path(), from, events).await?;
            eprintln!(
                "round {} {:>11}: resume {:>8.0} events/s, raw read {:>9.0} events/s",
                n + 1,
                from.label(),
                rate(events, m.resume),
                rate(events, m.raw),
            );
            results[i].push(m);
        }
    }
    println!(
        "{events} events resumed from after_seq 0 (one client, no filter, unix socket), median of {} rounds\n",
        args.rounds
    );
    println!(
        "| history from | resumed Subscribe (events/s) | raw read, same run (events/s) | resumed / raw |"
    );
    println!("|---|---:|---:|---:|");
    for rounds in &results {
        let Some(first) = rounds.first() else {
            continue;
        };
        let resume = median(rounds.iter().map(|m| rate(events, m.resume)).collect());
        let raw = median(rounds.iter().map(|m| rate(events, m.raw)).collect());
        let peer = match first.from {
            From::Store => "rusqlite `SELECT * ORDER BY seq`",
            From::Spool => "spool reader, 512 per batch",
        };
        println!(
            "| {} | {resume:.0} | {raw:.0} ({peer}) | {:.0}% |",
            first.from.label(),
            100.0 * resume / raw
        );
    }
    Ok(ExitCode::SUCCESS)
}
