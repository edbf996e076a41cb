//! `eventgate bench fleet`: a central gateway's Kafka source taking in node
//! gateways' messages, next to a plain librdkafka consumer in the same run.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::forwarder::find_tansu;
use super::{median, rate};
use crate::bench::daemon::Daemon;
use crate::bench::fleet::{Setup, ingest, produce, raw};
use crate::cli::CliError;
use crate::source::kafka::options::DEFAULT_FETCH_WAIT_MS;

#[derive(Debug, Args)]
pub struct FleetBenchArgs {
    /// Messages produced once, then read by each consumer.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u32).range(1000..))]
    pub events: u32,
    /// Rounds; the median is reported.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=50))]
    pub rounds: u32,
    /// The tansu binary (the Kafka-protocol broker).
    #[arg(long, default_value = "tansu")]
    pub tansu: PathBuf,
}

pub(super) async fn run(args: FleetBenchArgs) -> Result<ExitCode, CliError> {
    let (_, dir) = super::binary_and_dir()?;
    let events = args.events as usize;
    let (broker, brokers) = Daemon::tansu(&find_tansu(&args.tansu), dir.path()).await?;
    produce(&brokers, events).await?;
    let setups = [Setup::Defaults, Setup::SpoolOnly];
    let mut raws = Vec::new();
    let mut raws_reading = Vec::new();
    let mut raws_default = Vec::new();
    let mut ingests = vec![Vec::new(); setups.len()];
    let mut readings = vec![Vec::new(); setups.len()];
    let mut stored = Vec::new();
    for round in 0..args.rounds {
        // The plain consumer fetching as the source does, and with librdkafka's
        // own default (tansu holds fetches for it: docs/fleet.md).
        let wait = Some(DEFAULT_FETCH_WAIT_MS);
        let (r, r_reading) = raw(&brokers, &format!("raw-{round}"), events, wait).await?;
        raws.push(rate(events, r));
        raws_reading.push(rate(events, r_reading));
        let (d, _) = raw(&brokers, &format!("raw-default-{round}"), events, None).await?;
        raws_default.push(rate(events, d));
        for (i, setup) in setups.into_iter().enumerate() {
            let data = dir.path().join(format!("central-{round}-{i}"));
            let m = ingest(
                &brokers,
                &format!("central-{round}-{i}"),
                &data,
                setup,
                events,
            )
            .await?;
            ingests[i].push(rate(events, m.ingest));
            readings[i].push(rate(events, m.reading));
            if let Some(s) = m.stored {
                stored.push(rate(events, s));
            }
            eprintln!(
                "round {} {:>30}: ingest {:>8.0} events/s (raw consumer {:>8.0})",
                round + 1,
                setup.label(),
                rate(events, m.ingest),
                rate(events, r),
            );
            let _ = std::fs::remove_dir_all(&data);
        }
    }
    broker.stop(std::time::Duration::from_secs(5)).await;
    let raw = median(raws);
    let raw_reading = median(raws_reading);
    let raw_default = median(raws_default);
    println!(
        "{events} messages (protobuf values with a node gateway's headers, {} partitions) on a local tansu broker, median of {} rounds; each consumer joins a fresh group and reads from the earliest offset\n",
        4, args.rounds
    );
    println!(
        "plain librdkafka consumer: {raw:.0} events/s with fetch.wait.max.ms = {DEFAULT_FETCH_WAIT_MS} (the source's default), {raw_default:.0} with librdkafka's default (500)\n"
    );
    println!(
        "| central gateway | taken in (events/s), subscribe to last | plain librdkafka consumer, fetch.wait.max.ms as the source's, same run | ratio | taken in, first event to last | plain consumer, first message to last | ratio |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for ((setup, rates), reading) in setups.iter().zip(ingests).zip(readings) {
        let ingest = median(rates);
        let reading = median(reading);
        println!(
            "| {} | {ingest:.0} | {raw:.0} | {:.2} | {reading:.0} | {raw_reading:.0} | {:.2} |",
            setup.label(),
            ingest / raw,
            reading / raw_reading
        );
    }
    let stored = median(stored);
    println!(
        "| defaults, until every row is in the audit store | {stored:.0} | {raw:.0} | {:.2} | - | - | - |",
        stored / raw
    );
    Ok(ExitCode::SUCCESS)
}
