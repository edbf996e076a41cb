//! `eventgate bench upstream`: a real containerd takes a burst of Publish calls while
//! eventgate, subscribed to it with its defaults, stores them; containerd's accepted/s
//! next to eventgate's stored/s, measured in the same run.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use super::exchange::SpoolFsync;
use crate::bench::upstream::{Round, UpstreamBench, round};
use crate::cli::CliError;

#[derive(Debug, Args)]
pub struct UpstreamBenchArgs {
    /// Events published to containerd per round (container lifecycles, six events
    /// each, over three namespaces).
    #[arg(long, default_value_t = 50_000, value_parser = clap::value_parser!(u32).range(1..))]
    pub events: u32,
    /// Publishing clients, each on its own connection to containerd.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub publishers: u32,
    /// Publish calls each client keeps outstanding (1: each waits for the previous
    /// reply, as shims and `containerd publish` do).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub in_flight: u32,
    /// Rounds per configuration, each with a fresh containerd and eventgate; the
    /// median (by stored/s) is reported.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=50))]
    pub rounds: u32,
    /// eventgate's `spool.fsync` per configuration measured (comma-separated);
    /// everything else is eventgate's default.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "batch")]
    pub spool_fsync: Vec<SpoolFsync>,
    /// How long a round waits, from the first publish, for the store to hold every
    /// event; a round that runs out reports what was stored by then.
    #[arg(long, default_value = "300s", value_parser = crate::units::parse_duration)]
    pub timeout: Duration,
    /// The upstream's `enrich` per configuration measured (comma-separated): `on`
    /// (the default: each new container's record read from containerd) or `off`.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "on")]
    pub enrich: Vec<Enrich>,
    /// The containerd binary (needs root).
    #[arg(long, default_value = "containerd")]
    pub containerd: PathBuf,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Enrich {
    On,
    Off,
}

pub(super) async fn run(args: UpstreamBenchArgs) -> Result<ExitCode, CliError> {
    let (eventgate, dir) = super::binary_and_dir()?;
    let mut results: Vec<(SpoolFsync, Enrich, Vec<Round>)> = Vec::new();
    let configurations = args
        .spool_fsync
        .iter()
        .flat_map(|fsync| args.enrich.iter().map(move |enrich| (*fsync, *enrich)));
    for (fsync, enrich) in configurations {
        let bench = UpstreamBench {
            events: args.events as usize,
            publishers: args.publishers as usize,
            in_flight: args.in_flight as usize,
            timeout: args.timeout,
            spool_fsync: fsync.toml(),
            enrich: enrich == Enrich::On,
            containerd: args.containerd.clone(),
        };
        let mut rounds = Vec::new();
        for n in 0..args.rounds as usize {
            let r = round(&eventgate, dir.path(), &bench, n).await?;
            eprintln!(
                "round {} fsync {:>5} enrich {:>3?}: containerd accepted {:>7.0}/s, eventgate stored {:>7.0}/s{}, {} behind when containerd finished",
                n + 1,
                fsync.toml(),
                enrich,
                r.accepted_per_sec(bench.events),
                r.stored_per_sec(),
                if r.stored.is_some() {
                    String::new()
                } else {
                    format!(" (only {} within {:?})", r.stored_events, args.timeout)
                },
                r.behind_when_accepted,
            );
            rounds.push(r);
        }
        results.push((fsync, enrich, rounds));
    }
    print_table(&args, results);
    Ok(ExitCode::SUCCESS)
}

fn print_table(args: &UpstreamBenchArgs, results: Vec<(SpoolFsync, Enrich, Vec<Round>)>) {
    let events = args.events as usize;
    println!(
        "{} events per round ({} publishers x {} in flight to containerd), the median round of {} by stored / accepted\n",
        events, args.publishers, args.in_flight, args.rounds
    );
    println!(
        "| eventgate | containerd accepted (events/s) | eventgate stored (events/s) | stored / accepted | target | behind when containerd finished | last stored after containerd finished | stored | gateway peak RSS |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (fsync, enrich, mut rounds) in results {
        // The median round by its ratio: every figure of a row comes from one run.
        rounds.sort_by(|a, b| a.ratio(events).total_cmp(&b.ratio(events)));
        let Some(row) = rounds.get(rounds.len() / 2) else {
            continue;
        };
        let (accepted, stored) = (row.accepted_per_sec(events), row.stored_per_sec());
        println!(
            "| defaults, spool.fsync = \"{}\"{} | {:.0} | {:.0} | {:.3} | >= 1.00 | {} | {} | {} of {} | {} |",
            fsync.toml(),
            if enrich == Enrich::Off {
                ", upstream enrich = false"
            } else {
                ""
            },
            accepted,
            stored,
            row.ratio(events),
            row.behind_when_accepted,
            row.lag().map_or(
                format!(
                    "> {} s (not within the round)",
                    row.watched.saturating_sub(row.accepted).as_secs()
                ),
                |d| format!("{} ms", d.as_millis())
            ),
            row.stored_events,
            events,
            row.peak_rss
                .map_or("?".into(), |b| format!("{:.1} MiB", b as f64 / 1048576.0)),
        );
    }
}
