//! `eventgate bench upstream`: a real containerd takes a burst of Publish calls while
//! eventgate, subscribed to it with its defaults, stores them; containerd's accepted/s
//! next to eventgate's stored/s, measured in the same run.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use super::exchange::{Signing, SpoolFsync};
use crate::bench::signing::{EVERY_ROWS, INTERVAL};
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
    /// Signed checkpoints per configuration measured (comma-separated): `off` (the
    /// default) or `on`: `[signing]` with a key the benchmark writes, `interval =
    /// "1s"`, `every_rows = 10000` (far more often than the defaults, 1m and
    /// 100000); the run fails if such a gateway signed no checkpoint.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "off")]
    pub signing: Vec<Signing>,
    /// The containerd binary (needs root).
    #[arg(long, default_value = "containerd")]
    pub containerd: PathBuf,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Enrich {
    On,
    Off,
}

/// One configuration measured: its settings and its rounds.
struct Configuration {
    fsync: SpoolFsync,
    enrich: Enrich,
    signing: Signing,
    bench: UpstreamBench,
    rounds: Vec<Round>,
}

pub(super) async fn run(args: UpstreamBenchArgs) -> Result<ExitCode, CliError> {
    let (eventgate, dir) = super::binary_and_dir()?;
    let mut configurations: Vec<Configuration> = Vec::new();
    for fsync in &args.spool_fsync {
        for enrich in &args.enrich {
            for signing in &args.signing {
                let bench = UpstreamBench {
                    events: args.events as usize,
                    publishers: args.publishers as usize,
                    in_flight: args.in_flight as usize,
                    timeout: args.timeout,
                    spool_fsync: fsync.toml(),
                    enrich: *enrich == Enrich::On,
                    signing: *signing == Signing::On,
                    containerd: args.containerd.clone(),
                };
                configurations.push(Configuration {
                    fsync: *fsync,
                    enrich: *enrich,
                    signing: *signing,
                    bench,
                    rounds: Vec::new(),
                });
            }
        }
    }
    // The configurations take turns within each round, going first in turn, so
    // drift on the shared machine falls on all of them alike.
    let count = configurations.len();
    for n in 0..args.rounds as usize {
        let order: Vec<usize> = match n % 2 {
            0 => (0..count).collect(),
            _ => (0..count).rev().collect(),
        };
        for i in order {
            let c = &mut configurations[i];
            let r = round(&eventgate, dir.path(), &c.bench, n).await?;
            eprintln!(
                "round {} fsync {:>5} enrich {:>3?} signing {:>3?}: containerd accepted {:>7.0}/s, eventgate stored {:>7.0}/s{}, {} behind when containerd finished{}",
                n + 1,
                c.fsync.toml(),
                c.enrich,
                c.signing,
                r.accepted_per_sec(c.bench.events),
                r.stored_per_sec(),
                if r.stored.is_some() {
                    String::new()
                } else {
                    format!(" (only {} within {:?})", r.stored_events, args.timeout)
                },
                r.behind_when_accepted,
                r.signed.as_ref().map_or(String::new(), |s| format!(
                    ", {} checkpoints in audit.db",
                    s.stored
                )),
            );
            c.rounds.push(r);
        }
    }
    print_table(&args, &configurations);
    print_signing(&args, &configurations);
    Ok(ExitCode::SUCCESS)
}

fn print_table(args: &UpstreamBenchArgs, configurations: &[Configuration]) {
    let events = args.events as usize;
    println!(
        "{} events per round ({} publishers x {} in flight to containerd), the median round of {} by stored / accepted\n",
        events, args.publishers, args.in_flight, args.rounds
    );
    println!(
        "| eventgate | containerd accepted (events/s) | eventgate stored (events/s) | stored / accepted | target | behind when containerd finished | last stored after containerd finished | stored | gateway peak RSS |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for c in configurations {
        // The median round by its ratio: every figure of a row comes from one run.
        let mut rounds: Vec<&Round> = c.rounds.iter().collect();
        rounds.sort_by(|a, b| a.ratio(events).total_cmp(&b.ratio(events)));
        let Some(row) = rounds.get(rounds.len() / 2).copied() else {
            continue;
        };
        let (accepted, stored) = (row.accepted_per_sec(events), row.stored_per_sec());
        println!(
            "| defaults, spool.fsync = \"{}\"{}{} | {:.0} | {:.0} | {:.3} | >= 1.00 | {} | {} | {} of {} | {} |",
            c.fsync.toml(),
            if c.enrich == Enrich::Off {
                ", upstream enrich = false"
            } else {
                ""
            },
            if c.signing == Signing::On {
                ", signing on"
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

/// Each configuration with signing on next to the same one with it off, round by
/// round (the two ran back to back), the checkpoints each signing round signed, and
/// the spread of each side's own rounds (the noise the ratio is read against).
fn print_signing(args: &UpstreamBenchArgs, configurations: &[Configuration]) {
    let events = args.events as usize;
    for on in configurations.iter().filter(|c| c.signing == Signing::On) {
        let Some(off) = configurations
            .iter()
            .find(|c| c.signing == Signing::Off && c.fsync == on.fsync && c.enrich == on.enrich)
        else {
            continue;
        };
        let per_round = |f: &dyn Fn(&Round) -> f64| -> (f64, String) {
            let each: Vec<f64> = on
                .rounds
                .iter()
                .zip(&off.rounds)
                .map(|(a, b)| f(a) / f(b).max(1e-9))
                .collect();
            let text: Vec<String> = each.iter().map(|x| format!("{x:.3}")).collect();
            (super::median(each), text.join(", "))
        };
        println!(
            "\nspool.fsync = \"{}\", enrich {:?}: signing on (`[signing]` `interval = \"{INTERVAL}\"`, `every_rows = {EVERY_ROWS}`) / off, round by round:",
            on.fsync.toml(),
            on.enrich
        );
        let (stored, each) = per_round(&|r| r.stored_per_sec());
        let verdict = if stored >= 0.98 { "met" } else { "NOT met" };
        println!(
            "- eventgate stored events/s: **{stored:.3}x** (target >= 0.98: {verdict}; rounds {each})"
        );
        let (accepted, each) = per_round(&|r| r.accepted_per_sec(events));
        println!("- containerd accepted events/s: {accepted:.3}x (rounds {each})");
        let (ratio, each) = per_round(&|r| r.ratio(events));
        println!("- stored / accepted: {ratio:.3}x (rounds {each})");
        let signed: Vec<String> = on
            .rounds
            .iter()
            .map(|r| {
                r.signed
                    .as_ref()
                    .map_or("?".into(), |s| s.stored.to_string())
            })
            .collect();
        println!(
            "- checkpoints in audit.db per signing round: {}",
            signed.join(", ")
        );
        for (what, c) in [("off", off), ("on", on)] {
            let rates: Vec<f64> = c.rounds.iter().map(Round::stored_per_sec).collect();
            let (min, max) = rates
                .iter()
                .fold((f64::MAX, f64::MIN), |(lo, hi), x| (lo.min(*x), hi.max(*x)));
            if rates.len() >= 2 {
                println!(
                    "- noise: signing {what}, stored events/s from {min:.0} to {max:.0} over its rounds (max / min {:.3}x)",
                    max / min.max(1e-9)
                );
            }
        }
    }
}
