//! `eventgate bench reconcile`: reconciling a node of many containers through the
//! real gateway, next to containerd's own List calls measured in the same run, and
//! eventgate's own work apart from containerd's.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use crate::bench::BenchError;
use crate::bench::reconcile::{self, NAMESPACE, ReconcileBench, Results, Round};
use crate::cli::CliError;
use crate::upstream::SETTLE;

/// The targets for a node of 2,000 containers and 100 tasks.
const TIME_TARGET: Duration = Duration::from_secs(1);
const MEMORY_TARGET: u64 = 64 << 20;

#[derive(Debug, Args)]
pub struct ReconcileBenchArgs {
    /// Containers on the node (`ctr container create`), those with tasks included.
    #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub containers: u32,
    /// Of those, containers with a running task (`ctr run -d ... sleep`).
    #[arg(long, default_value_t = 100, conflicts_with = "cri", value_parser = clap::value_parser!(u32).range(0..=10_000))]
    pub tasks: u32,
    /// Containers changed while the gateway is down, each round: a third removed, a
    /// third created, the rest relabelled.
    #[arg(long, default_value_t = 100, conflicts_with = "cri", value_parser = clap::value_parser!(u32).range(0..=100_000))]
    pub changed: u32,
    /// Running tasks killed (SIGKILL) while the gateway is down, each round.
    #[arg(long, default_value_t = 20, conflicts_with = "cri", value_parser = clap::value_parser!(u32).range(0..=10_000))]
    pub killed: u32,
    /// Rounds; the median of each figure is reported.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub rounds: u32,
    /// `ctr` calls (CRI calls with --cri) run at once while filling and changing the
    /// node.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub at_once: u32,
    /// The containerd binary (needs root).
    #[arg(long, default_value = "containerd")]
    pub containerd: PathBuf,
    /// The ctr binary.
    #[arg(long, default_value = "ctr")]
    pub ctr: PathBuf,
    /// A Kubernetes node instead: containerd with its CRI plugin, filled through the
    /// CRI as the kubelet does (hostNetwork pods, `--containers` containers created
    /// in them, some started and exited), reconciled through the gateway next to
    /// the kubelet's relist (ListPodSandbox + ListContainers) in the same run.
    #[arg(long)]
    pub cri: bool,
    /// With --cri: pods (running sandboxes) the containers are spread over.
    #[arg(long, default_value_t = 100, requires = "cri", value_parser = clap::value_parser!(u32).range(1..=5_000))]
    pub pods: u32,
    /// With --cri: containers started before the first round; each exits with
    /// status 1, so the CRI keeps them EXITED.
    #[arg(long, default_value_t = 100, requires = "cri", value_parser = clap::value_parser!(u32).range(0..=100_000))]
    pub exited: u32,
    /// With --cri: containers started (each exiting with status 1) while the gateway
    /// is down, each round.
    #[arg(long, default_value_t = 20, requires = "cri", value_parser = clap::value_parser!(u32).range(0..=100_000))]
    pub exited_while_down: u32,
}

pub(super) async fn run(args: ReconcileBenchArgs) -> Result<ExitCode, CliError> {
    if args.cri {
        return super::reconcile_cri::run(args).await;
    }
    let bench = ReconcileBench {
        containerd: args.containerd,
        ctr: args.ctr,
        containers: args.containers as usize,
        tasks: args.tasks as usize,
        changed: args.changed as usize,
        killed: args.killed as usize,
        rounds: args.rounds as usize,
        at_once: args.at_once as usize,
    };
    if let Some(problem) = bench.problem() {
        return Err(CliError::Usage(problem));
    }
    let (eventgate, dir) = super::binary_and_dir()?;
    eprintln!("working in {}", dir.path().display());
    let results = run_or_stop(
        reconcile::run(&eventgate, dir.path(), &bench),
        "the benchmark's tasks, containerd and gateway were stopped",
    )
    .await?;
    print_table(&bench, &results);
    fail_on_problems(
        results.rounds.iter().map(Round::problems),
        "the reconciles did not record what changed",
    )?;
    Ok(ExitCode::SUCCESS)
}

/// Runs a benchmark's rounds until they are done or a signal stops them: dropped,
/// the work removes its tasks and kills its containerd and gateway.
pub(super) async fn run_or_stop<T>(
    work: impl Future<Output = Result<T, BenchError>>,
    stopped: &str,
) -> Result<T, CliError> {
    let stop = crate::cli::serve::shutdown_signal();
    tokio::select! {
        results = work => Ok(results?),
        () = stop => Err(CliError::Bench(BenchError::Failed {
            what: format!("interrupted; {stopped}"),
        })),
    }
}

/// Fails the command with every round's problems, numbered by round.
pub(super) fn fail_on_problems(
    rounds: impl Iterator<Item = Vec<String>>,
    what: &str,
) -> Result<(), CliError> {
    let problems: Vec<String> = rounds
        .enumerate()
        .flat_map(|(n, problems)| {
            problems
                .into_iter()
                .map(move |p| format!("round {}: {p}", n + 1))
        })
        .collect();
    match problems.is_empty() {
        true => Ok(()),
        false => Err(CliError::Bench(BenchError::Failed {
            what: format!("{what}:\n{}", problems.join("\n")),
        })),
    }
}

/// The median of one figure over the rounds.
pub(super) fn median_of<R, T: Copy + Ord>(rounds: &[R], pick: impl Fn(&R) -> T) -> Option<T> {
    let mut values: Vec<T> = rounds.iter().map(pick).collect();
    values.sort();
    values.get(values.len() / 2).copied()
}

fn max_of<T: Copy + Ord>(rounds: &[Round], pick: impl Fn(&Round) -> Option<T>) -> Option<T> {
    rounds.iter().filter_map(pick).max()
}

pub(super) fn time(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1000.0;
    if ms < 1.0 {
        format!("{} µs", d.as_micros())
    } else if ms < 10.0 {
        format!("{ms:.1} ms")
    } else if ms < 1000.0 {
        format!("{ms:.0} ms")
    } else {
        format!("{:.2} s", d.as_secs_f64())
    }
}

pub(super) fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
}

fn size(bytes: u64) -> String {
    if bytes < 1 << 20 {
        format!("{:.0} KiB", bytes as f64 / 1024.0)
    } else {
        mib(bytes)
    }
}

pub(super) fn ratio(d: Duration, peer: Duration) -> String {
    format!("{:.2}x", d.as_secs_f64() / peer.as_secs_f64().max(1e-9))
}

pub(super) fn opt<T>(value: Option<T>, show: impl Fn(T) -> String) -> String {
    value.map_or("-".into(), show)
}

fn print_table(bench: &ReconcileBench, results: &Results) {
    let rounds = &results.rounds;
    let Some(last) = rounds.last() else {
        return;
    };
    let removed = bench.changed / 3;
    println!(
        "A node of {} containers ({} with a running task) and {} image in namespace {NAMESPACE:?}, \
         filled with ctr in {:.0} s. Each round, while the gateway was down: {} containers created, \
         {} relabelled, {} removed, {} tasks killed. Median of {}.\n",
        last.list.containers,
        last.list.tasks,
        1,
        results.filled_in.as_secs_f64(),
        removed,
        bench.changed - 2 * removed,
        removed,
        bench.killed,
        match rounds.len() {
            1 => "1 round".to_owned(),
            n => format!("{n} rounds"),
        },
    );
    println!(
        "| | measured | time | / raw list_node | with the {} s settle | list_duration (marker) | events recorded (expected) | gateway CPU | peak RSS | RSS before |",
        SETTLE.as_secs()
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let Some(raw) = median_of(rounds, |r| r.list.time) else {
        return;
    };
    let growth = median_of(rounds, |r| r.list.peak_growth);
    println!(
        "| 1a | raw peer: `list_node` alone (connect, containerd's List calls) | {} | 1.00x | - | - | - | - | {} | - |",
        time(raw),
        opt(growth.flatten(), |g| format!("+{} (bench process)", mib(g))),
    );
    let ctr = median_of(rounds, |r| r.ctr).unwrap_or_default();
    println!(
        "| 1b | reference: `ctr container ls` + `task ls` + `image ls` | {} | {} | - | - | - | - | - | - |",
        time(ctr),
        ratio(ctr, raw)
    );
    for (row, name, pick) in [
        (
            "2a",
            "gateway, fresh data dir (baseline): connected → reconciled marker, minus the settle",
            (|r: &Round| &r.baseline) as fn(&Round) -> &reconcile::gateway::GatewayRun,
        ),
        (
            "2b",
            "gateway, same data dir restarted after the changes",
            |r: &Round| &r.changed,
        ),
    ] {
        let whole = median_of(rounds, |r| pick(r).to_marker).unwrap_or_default();
        let net = whole.saturating_sub(SETTLE);
        let listed = median_of(rounds, |r| pick(r).list_duration).unwrap_or_default();
        let cpu = median_of(rounds, |r| pick(r).cpu);
        let peak = median_of(rounds, |r| pick(r).peak_rss);
        let before = median_of(rounds, |r| pick(r).rss_before);
        let run = pick(last);
        let expected = if run.baseline {
            0
        } else {
            last.expected.values().sum()
        };
        println!(
            "| {row} | {name} | {} | {} | {} | {} | {} ({expected}) | {} | {} | {} |",
            time(net),
            ratio(net, raw),
            time(whole),
            time(listed),
            run.events(),
            opt(cpu.flatten(), time),
            opt(peak.flatten(), mib),
            opt(before.flatten(), mib),
        );
    }
    for (row, name, pick) in [
        (
            "3a",
            "library: diff + merged + snapshot save, nothing changed",
            (|r: &Round| &r.library_unchanged) as fn(&Round) -> &reconcile::library::Pass,
        ),
        (
            "3b",
            "library: diff + merged + snapshot save, the round's changes",
            |r: &Round| &r.library_changed,
        ),
    ] {
        let total = median_of(rounds, |r| pick(r).total()).unwrap_or_default();
        let growth = median_of(rounds, |r| pick(r).peak_growth);
        println!(
            "| {row} | {name} (diff {}, merged {}, save {}; snapshot {}) | {} | {} | - | - | {} | - | {} | - |",
            time(median_of(rounds, |r| pick(r).diff).unwrap_or_default()),
            time(median_of(rounds, |r| pick(r).merged).unwrap_or_default()),
            time(median_of(rounds, |r| pick(r).save).unwrap_or_default()),
            size(pick(last).snapshot_bytes),
            time(total),
            ratio(total, raw),
            pick(last).events,
            opt(growth.flatten(), |g| format!("+{} (bench process)", mib(g))),
        );
    }
    print_targets(rounds, raw);
}

fn print_targets(rounds: &[Round], raw: Duration) {
    let net = |r: &Round| {
        r.baseline
            .to_marker
            .max(r.changed.to_marker)
            .saturating_sub(SETTLE)
    };
    let worst = rounds.iter().map(net).max().unwrap_or_default();
    let median = median_of(rounds, net).unwrap_or_default();
    println!(
        "\nTarget: reconcile under {} s (connected → reconciled marker, without the fixed {} s settle): {} \
         (slowest start of the slowest round {}, median {}; {} the raw list_node).",
        TIME_TARGET.as_secs(),
        SETTLE.as_secs(),
        if worst < TIME_TARGET {
            "met"
        } else {
            "NOT met"
        },
        time(worst),
        time(median),
        ratio(median, raw),
    );
    let peak = max_of(rounds, |r| r.baseline.peak_rss.max(r.changed.peak_rss));
    let since_start = rounds
        .iter()
        .any(|r| r.baseline.peak_since_start || r.changed.peak_since_start);
    println!(
        "Target: memory under {} (the gateway's peak RSS during the reconcile{}): {}.",
        mib(MEMORY_TARGET),
        if since_start { ", since its start" } else { "" },
        match peak {
            Some(peak) if peak < MEMORY_TARGET => format!("met (highest {})", mib(peak)),
            Some(peak) => format!("NOT met (highest {})", mib(peak)),
            None => "not measured (no /proc)".into(),
        }
    );
}
