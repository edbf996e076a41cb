//! `eventgate bench backlog`: eventgate's resident memory while a million events pile
//! up in the spool for a forwarder whose broker is down, right after a restart with
//! that backlog on disk, and while it drains once the broker is back.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, ValueEnum};

use super::forwarder::find_tansu;
use crate::bench::backlog::{BacklogBench, Forwarders, Memory, Report, mib, run as bench_run};
use crate::cli::CliError;

/// The figure every memory row is held to.
const TARGET: u64 = 64 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Which {
    /// The kafka forwarder alone.
    Kafka,
    /// The default `log` and `audit` forwarders and the kafka one.
    DefaultsAndKafka,
}

#[derive(Debug, Args)]
pub struct BacklogBenchArgs {
    /// Events published while the kafka broker is down (container lifecycles, six
    /// events each).
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u32).range(1..))]
    pub events: u32,
    /// Publishing connections.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub publishers: u32,
    /// Calls in flight per connection.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub in_flight: u32,
    /// The forwarders the gateway runs.
    #[arg(long, value_enum, default_value = "defaults-and-kafka")]
    pub forwarders: Which,
    /// How long the restarted gateway is watched retrying the dead broker.
    #[arg(long, default_value = "30s", value_parser = crate::units::parse_duration)]
    pub after_restart: Duration,
    /// Events published to the restarted gateway during that time.
    #[arg(long, default_value_t = 30_000)]
    pub more_events: u32,
    /// Skip the last phase (a broker comes up and the backlog drains).
    #[arg(long)]
    pub no_drain: bool,
    /// How long the drain may take.
    #[arg(long, default_value = "900s", value_parser = crate::units::parse_duration)]
    pub drain_timeout: Duration,
    /// The tansu binary for the drain phase.
    #[arg(long, default_value = "tansu")]
    pub tansu: PathBuf,
}

pub(super) async fn run(args: BacklogBenchArgs) -> Result<ExitCode, CliError> {
    let (eventgate, dir) = super::binary_and_dir()?;
    let bench = BacklogBench {
        events: args.events as usize,
        publishers: args.publishers as usize,
        in_flight: args.in_flight as usize,
        forwarders: match args.forwarders {
            Which::Kafka => Forwarders::Kafka,
            Which::DefaultsAndKafka => Forwarders::DefaultsAndKafka,
        },
        after_restart: args.after_restart,
        more_events: args.more_events as usize,
        tansu: (!args.no_drain).then(|| find_tansu(&args.tansu)),
        drain_timeout: args.drain_timeout,
    };
    let report = bench_run(&eventgate, dir.path(), &bench).await?;
    print_table(&bench, &report);
    Ok(ExitCode::SUCCESS)
}

fn print_table(bench: &BacklogBench, r: &Report) {
    println!(
        "{} events published ({} publishers x {} in flight) while the kafka broker is down; forwarders: {}; spool defaults (fsync = \"batch\")\n",
        bench.events,
        bench.publishers,
        bench.in_flight,
        bench.forwarders.label()
    );
    println!("| phase | figure | value | target |");
    println!("|---|---|---:|---:|");
    let target = format!("< {} MiB", TARGET >> 20);
    let row = |phase: &str, figure: &str, value: String, target: &str| {
        println!("| {phase} | {figure} | {value} | {target} |");
    };
    let filling = format!("filling the backlog ({} events)", bench.events);
    row(
        &filling,
        "publish rate",
        format!(
            "{:.0} events/s",
            bench.events as f64 / r.fill.as_secs_f64().max(1e-9)
        ),
        "",
    );
    row(&filling, "peak RSS", mark(r.filling.peak), &target);
    row(&filling, "RSS at the end", mib(r.filling.end), "");
    row(&filling, "spool on disk", mib(Some(r.spool_bytes)), "");
    row("stop (SIGTERM)", "until exited", secs(r.stop), "");
    let restart = "restart with the backlog on disk";
    row(
        restart,
        "until the socket accepts",
        secs(r.restart_socket),
        "",
    );
    row(
        restart,
        "until a Publish is acknowledged",
        secs(r.restart_publish),
        "",
    );
    row(
        restart,
        "until /readyz says ready",
        r.restart_ready
            .map_or(format!("not within {:?}", bench.after_restart), secs),
        "",
    );
    row(restart, "RSS when serving", mib(r.restarted.end), &target);
    row(
        restart,
        "peak RSS until serving",
        mark(r.restarted.peak),
        &target,
    );
    let after = format!(
        "{:?} after the restart, retrying the dead broker, {} more events published",
        bench.after_restart, r.more_events
    );
    row(
        &after,
        "peak RSS (from the start)",
        mark(r.after_restart.peak),
        &target,
    );
    row(&after, "RSS at the end", mib(r.after_restart.end), "");
    if let Some(drain) = &r.drain {
        let phase = "the broker comes up: the backlog drains";
        row(
            phase,
            "events delivered",
            format!("{} in {}", drain.delivered, secs(drain.took)),
            "",
        );
        row(
            phase,
            "drain rate",
            format!(
                "{:.0} events/s",
                drain.delivered as f64 / drain.took.as_secs_f64().max(1e-9)
            ),
            "",
        );
        row(
            phase,
            "peak RSS while draining",
            mark(drain.memory.peak),
            &target,
        );
        row(phase, "RSS at the end", mib(drain.memory.end), "");
    }
    let all = [r.filling, r.restarted, r.after_restart]
        .into_iter()
        .chain(r.drain.as_ref().map(|d| d.memory))
        .collect::<Vec<Memory>>();
    let over = all
        .iter()
        .filter_map(|m| m.peak.max(m.end))
        .filter(|&b| b >= TARGET)
        .count();
    println!(
        "\n{}",
        if over == 0 {
            format!("every memory figure is under {} MiB", TARGET >> 20)
        } else {
            format!("{over} phase(s) reached {} MiB or more", TARGET >> 20)
        }
    );
}

/// A memory figure, flagged when it misses the target.
fn mark(bytes: Option<u64>) -> String {
    match bytes {
        Some(b) if b >= TARGET => format!("**{}**", mib(Some(b))),
        other => mib(other),
    }
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}
