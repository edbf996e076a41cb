//! `eventgate bench correlate`: the correlate stage's cost per event, next to
//! rendering the same events as JSON lines in the same run.

use std::process::ExitCode;

use clap::Args;

use super::{median, rate};
use crate::bench::correlate::{Load, measure};
use crate::cli::CliError;

#[derive(Debug, Args)]
pub struct CorrelateBenchArgs {
    /// Events per load.
    #[arg(long, default_value_t = 200_000, value_parser = clap::value_parser!(u32).range(1000..))]
    pub events: u32,
    /// Rounds; the median is reported.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=50))]
    pub rounds: u32,
}

pub(super) async fn run(args: CorrelateBenchArgs) -> Result<ExitCode, CliError> {
    let (_, dir) = super::binary_and_dir()?;
    let events = args.events as usize;
    println!(
        "{events} events in batches of 1000 through `correlate` with its defaults, in front of a forwarder that does nothing; median of {} rounds\n",
        args.rounds
    );
    println!(
        "| load | through the stage (events/s) | rendered as JSON lines, same run (events/s) | stage / JSON |"
    );
    println!("|---|---:|---:|---:|");
    for load in [Load::Lifecycle, Load::Storm] {
        let mut stage = Vec::new();
        let mut json = Vec::new();
        for round in 0..args.rounds {
            let sub = dir.path().join(format!("{round}-{}", load.label().len()));
            let (through, rendered) = measure(&sub, load, events).await?;
            stage.push(rate(events, through));
            json.push(rate(events, rendered));
        }
        let (stage, json) = (median(stage), median(json));
        println!(
            "| {} | {stage:.0} | {json:.0} | {:.2} |",
            load.label(),
            stage / json
        );
    }
    Ok(ExitCode::SUCCESS)
}
