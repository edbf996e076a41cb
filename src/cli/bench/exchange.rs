//! `eventgate bench exchange`: eventgate's exchange next to containerd's.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use crate::bench::daemon::{Daemon, own_cpu_time};
use crate::bench::exchange::{ExchangeBench, Measurement, measure};
use crate::bench::micros;
use crate::cli::CliError;

#[derive(Debug, Args)]
pub struct ExchangeArgs {
    /// Concurrent publishers, each on its own connection, each waiting for its reply.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub publishers: u32,
    /// Concurrent subscribers, each receiving every event.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub subscribers: u32,
    /// Publish calls each publisher keeps outstanding on its connection (1: each
    /// call waits for the previous reply, as shims and `containerd publish` do).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub in_flight: u32,
    /// Events each publisher sends per round.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..))]
    pub events: u32,
    /// Rounds per system (alternating systems); the median round is reported.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=50))]
    pub rounds: u32,
    /// The containerd binary to compare against (needs root).
    #[arg(long, default_value = "containerd")]
    pub containerd: PathBuf,
    /// Measure eventgate alone.
    #[arg(long)]
    pub no_containerd: bool,
    /// Run eventgate with its default forwarders (JSON-lines file and SQLite store)
    /// instead of the exchange alone. containerd keeps nothing, so the default
    /// compares like with like.
    #[arg(long)]
    pub with_forwarders: bool,
    /// eventgate's `spool.fsync` for the run. Publish answers once the event is
    /// durable per this mode; containerd persists nothing, so "none" (events still
    /// written to the OS, surviving a crash of eventgate) is the closest comparison.
    #[arg(long, value_enum, default_value = "batch")]
    pub spool_fsync: SpoolFsync,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum SpoolFsync {
    Always,
    Batch,
    None,
}

impl SpoolFsync {
    pub(super) fn toml(self) -> &'static str {
        match self {
            SpoolFsync::Always => "always",
            SpoolFsync::Batch => "batch",
            SpoolFsync::None => "none",
        }
    }
}

struct Row {
    system: &'static str,
    m: Measurement,
    peak_rss: Option<u64>,
    /// CPU microseconds per delivered event: the daemon's, and the benchmark client's.
    server_cpu_us: f64,
    client_cpu_us: f64,
}

pub async fn run(args: ExchangeArgs) -> Result<ExitCode, CliError> {
    let (eventgate, dir) = super::binary_and_dir()?;
    let bench = ExchangeBench {
        publishers: args.publishers as usize,
        subscribers: args.subscribers as usize,
        events: args.events as usize,
        in_flight: args.in_flight as usize,
        drain_timeout: Duration::from_secs(60),
    };
    let mut systems: Vec<&'static str> = vec!["eventgate"];
    if !args.no_containerd {
        systems.push("containerd");
    }
    let mut rows: Vec<Row> = Vec::new();
    for round in 0..args.rounds {
        // Alternate who goes first so neither always gets the warmer machine.
        let order: Vec<_> = if round % 2 == 0 {
            systems.clone()
        } else {
            systems.iter().rev().copied().collect()
        };
        for system in order {
            let run_dir = dir.path().join(format!("{system}-{round}"));
            std::fs::create_dir_all(&run_dir).map_err(|source| CliError::Io {
                context: format!("cannot create {}", run_dir.display()),
                source,
            })?;
            let daemon = match system {
                "containerd" => Daemon::containerd(&args.containerd, &run_dir).await?,
                _ => {
                    let config = run_dir.join("eventgate.toml");
                    let forwarders = if args.with_forwarders {
                        ""
                    } else {
                        "forwarder = []\n"
                    };
                    let text = format!(
                        "{forwarders}[spool]\nfsync = \"{}\"\n",
                        args.spool_fsync.toml()
                    );
                    std::fs::write(&config, text).map_err(|source| CliError::Io {
                        context: format!("cannot write {}", config.display()),
                        source,
                    })?;
                    let config = config.display().to_string();
                    Daemon::eventgate(&eventgate, &run_dir, &["--config", &config]).await?
                }
            };
            let address = daemon.socket().display().to_string();
            let (server_before, client_before) = (daemon.cpu_time(), own_cpu_time());
            let result = measure(&address, &bench).await;
            let client_cpu = own_cpu_time().saturating_sub(client_before);
            let server_cpu = daemon
                .cpu_time()
                .zip(server_before)
                .map(|(after, before)| after.saturating_sub(before));
            let peak_rss = daemon.peak_rss();
            daemon.stop(Duration::from_secs(5)).await;
            let m = result?;
            let per_event = |d: Duration| d.as_secs_f64() * 1e6 / m.delivered.max(1) as f64;
            let server_cpu_us = server_cpu.map_or(f64::NAN, per_event);
            let client_cpu_us = per_event(client_cpu);
            eprintln!(
                "round {} {system:>10}: {:>9.0} delivered/s, p99 {}, lost {}, cpu/event server {server_cpu_us:.1} µs client {client_cpu_us:.1} µs",
                round + 1,
                m.delivered_per_sec(),
                micros(m.quantile(0.99)),
                m.lost()
            );
            rows.push(Row {
                system,
                m,
                peak_rss,
                server_cpu_us,
                client_cpu_us,
            });
        }
    }
    print_table(&args, &systems, rows);
    Ok(ExitCode::SUCCESS)
}

fn median_row(mut rows: Vec<Row>) -> Option<Row> {
    rows.sort_by(|a, b| a.m.delivered_per_sec().total_cmp(&b.m.delivered_per_sec()));
    let mid = rows.len() / 2;
    rows.into_iter().nth(mid)
}

fn print_table(args: &ExchangeArgs, systems: &[&'static str], rows: Vec<Row>) {
    let mut medians = Vec::new();
    let mut rows = rows;
    for system in systems {
        let (mine, rest): (Vec<Row>, Vec<Row>) =
            rows.into_iter().partition(|r| r.system == *system);
        rows = rest;
        if let Some(row) = median_row(mine) {
            medians.push(row);
        }
    }
    println!(
        "{} publishers x {} subscribers, {} events per publisher, median of {} rounds\n",
        args.publishers, args.subscribers, args.events, args.rounds
    );
    println!(
        "| system | delivered events/s | published events/s | p50 | p99 | p99.9 | lost | server CPU / delivery | client CPU / delivery | server peak RSS |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for row in &medians {
        let m = &row.m;
        println!(
            "| {} | {:.0} | {:.0} | {} | {} | {} | {} | {:.1} µs | {:.1} µs | {} |",
            row.system,
            m.delivered_per_sec(),
            m.published_per_sec(),
            micros(m.quantile(0.5)),
            micros(m.quantile(0.99)),
            micros(m.quantile(0.999)),
            m.lost(),
            row.server_cpu_us,
            row.client_cpu_us,
            row.peak_rss
                .map_or("?".into(), |b| format!("{:.1} MiB", b as f64 / 1048576.0)),
        );
    }
    if let [ours, theirs] = medians.as_slice() {
        println!(
            "\neventgate / containerd: {:.2}x delivered events/s; p99 {:.2}x ({} vs {}); \
             server CPU per delivery {:.2}x; peak RSS {:.2}x",
            ours.m.delivered_per_sec() / theirs.m.delivered_per_sec().max(1e-9),
            ours.m.quantile(0.99) as f64 / theirs.m.quantile(0.99).max(1) as f64,
            micros(ours.m.quantile(0.99)),
            micros(theirs.m.quantile(0.99)),
            ours.server_cpu_us / theirs.server_cpu_us,
            ours.peak_rss.unwrap_or(0) as f64 / theirs.peak_rss.unwrap_or(1).max(1) as f64,
        );
    }
}
