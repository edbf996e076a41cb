//! `eventgate bench forwarder`: each forwarder's sustained throughput through the
//! gateway next to its sink's raw limit, measured in the same run.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, ValueEnum};

use super::{median, rate};
use crate::bench::daemon::Daemon;
use crate::bench::forwarder::{ForwarderBench, Round, Sink, round};
use crate::cli::CliError;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Which {
    None,
    File,
    Sqlite,
    Kafka,
}

#[derive(Debug, Args)]
pub struct ForwarderArgs {
    /// Forwarders to measure ("none" is the exchange alone: the publish path's ceiling).
    #[arg(long = "sink", value_enum, default_values_t = [Which::None, Which::File, Which::Sqlite, Which::Kafka])]
    pub sinks: Vec<Which>,
    /// Events per round.
    #[arg(long, default_value_t = 60_000, value_parser = clap::value_parser!(u32).range(1..))]
    pub events: u32,
    /// Publishing connections.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub publishers: u32,
    /// Calls in flight per connection.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub in_flight: u32,
    /// Events per batch, for the forwarder and the raw baseline alike.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    pub batch: u32,
    /// Rounds per sink; the median is reported.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=50))]
    pub rounds: u32,
    /// How long to wait for a forwarder to hold every event of a round.
    #[arg(long, default_value = "300s", value_parser = crate::units::parse_duration)]
    pub timeout: Duration,
    /// Kafka bootstrap servers; without it the benchmark starts its own tansu broker.
    #[arg(long, value_name = "HOST:PORT")]
    pub brokers: Option<String>,
    /// The tansu binary to start when no --brokers is given.
    #[arg(long, default_value = "tansu")]
    pub tansu: PathBuf,
    /// The gateway's `spool.fsync` for the run: every Publish waits until its event
    /// is durable per this mode ("none": written to the OS, surviving a crash of
    /// eventgate but not a power loss).
    #[arg(long, value_enum, default_value = "batch")]
    pub spool_fsync: super::exchange::SpoolFsync,
    /// Give every event of the raw and in-process rounds what a Kubernetes
    /// container's record says (pod, container name and kind, image, three labels), as
    /// an upstream's enrichment does; events published over the socket carry none, so
    /// the gateway column is unchanged.
    #[arg(long)]
    pub workloads: bool,
}

pub(super) async fn run(args: ForwarderArgs) -> Result<ExitCode, CliError> {
    let (eventgate, dir) = super::binary_and_dir()?;
    let bench = ForwarderBench {
        events: args.events as usize,
        publishers: args.publishers as usize,
        in_flight: args.in_flight as usize,
        batch: args.batch as usize,
        timeout: args.timeout,
        spool_fsync: args.spool_fsync.toml(),
        workloads: args.workloads,
    };
    let mut broker = None;
    let mut results: Vec<(Sink, Vec<Round>)> = Vec::new();
    for which in &args.sinks {
        let sink = match which {
            Which::None => Sink::None,
            Which::File => Sink::File,
            Which::Sqlite => Sink::Sqlite,
            Which::Kafka => {
                let brokers = match &args.brokers {
                    Some(brokers) => brokers.clone(),
                    None => {
                        let (daemon, brokers) =
                            Daemon::tansu(&find_tansu(&args.tansu), dir.path()).await?;
                        broker = Some(daemon);
                        brokers
                    }
                };
                Sink::Kafka { brokers }
            }
        };
        let mut rounds = Vec::new();
        for n in 0..args.rounds as usize {
            let r = round(&eventgate, dir.path(), &sink, &bench, n).await?;
            eprintln!(
                "round {} {:>6}: gateway {:>8.0} events/s, publish {:>8.0} events/s, raw {}, pipeline {}",
                n + 1,
                sink.label(),
                rate(bench.events, r.gateway),
                rate(bench.events, r.publish),
                per_sec(bench.events, r.raw.map(|raw| raw.elapsed)),
                per_sec(bench.events, r.pipeline),
            );
            rounds.push(r);
        }
        results.push((sink, rounds));
    }
    if let Some(broker) = broker {
        broker.stop(Duration::from_secs(5)).await;
    }
    print_table(&args, &bench, results);
    Ok(ExitCode::SUCCESS)
}

/// `tansu` on PATH, else where `cargo install` puts it.
pub(super) fn find_tansu(given: &PathBuf) -> PathBuf {
    if given.components().count() > 1 {
        return given.clone();
    }
    let on_path = std::env::var_os("PATH")
        .map(|paths| {
            std::env::split_paths(&paths)
                .map(|p| p.join(given))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .map(|home| home.join("bin").join(given));
    on_path
        .into_iter()
        .chain(cargo_home)
        .find(|p| p.is_file())
        .unwrap_or_else(|| given.clone())
}

fn per_sec(events: usize, elapsed: Option<Duration>) -> String {
    elapsed.map_or("-".into(), |d| format!("{:.0} events/s", rate(events, d)))
}

fn target(sink: &Sink) -> &'static str {
    match sink {
        Sink::None => "",
        Sink::File => ">= 50%",
        Sink::Sqlite => ">= 70%",
        Sink::Kafka { .. } => ">= 80%",
    }
}

fn print_table(args: &ForwarderArgs, bench: &ForwarderBench, results: Vec<(Sink, Vec<Round>)>) {
    println!(
        "{} events per round ({} publishers x {} in flight), batches of {}, median of {} rounds\n",
        bench.events, args.publishers, args.in_flight, bench.batch, args.rounds
    );
    println!(
        "| forwarder | through the gateway (events/s) | raw sink (events/s) | raw: prepared before its clock | gateway / raw | target | pipeline in-process (events/s) | pipeline / raw | publish calls alone (events/s) | gateway peak RSS |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (sink, rounds) in results {
        let rates = |pick: fn(&Round) -> Option<Duration>| -> Option<f64> {
            let values: Vec<f64> = rounds
                .iter()
                .filter_map(|r| pick(r).map(|d| rate(bench.events, d)))
                .collect();
            (!values.is_empty()).then(|| median(values))
        };
        let gateway = rates(|r| Some(r.gateway));
        let publish = rates(|r| Some(r.publish));
        let raw = rates(|r| r.raw.map(|raw| raw.elapsed));
        let prepared: Vec<f64> = rounds
            .iter()
            .filter_map(|r| r.raw)
            .map(|raw| raw.prepared.as_secs_f64() * 1e6 / bench.events.max(1) as f64)
            .collect();
        let prepared = if prepared.is_empty() {
            "-".to_string()
        } else if prepared.iter().all(|us| *us == 0.0) {
            "nothing".to_string()
        } else {
            format!("{:.1} µs/event", median(prepared))
        };
        let pipeline = rates(|r| r.pipeline);
        let number = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0}"));
        let percent = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) => format!("{:.0}%", 100.0 * a / b),
            _ => "-".to_string(),
        };
        let rss = rounds.iter().filter_map(|r| r.peak_rss).max();
        println!(
            "| {} | {} | {} | {prepared} | {} | {} | {} | {} | {} | {} |",
            sink.label(),
            number(gateway),
            number(raw),
            percent(gateway, raw),
            target(&sink),
            number(pipeline),
            percent(pipeline, raw),
            number(publish),
            rss.map_or("?".into(), |b| format!("{:.1} MiB", b as f64 / 1048576.0)),
        );
    }
}
