//! The README-ready tables and ratios of `eventgate bench exchange`.

use std::time::Duration;

use super::exchange::{ExchangeArgs, RawRun, Row, SpoolFsync, System};
use super::median;
use crate::bench::micros;
use crate::bench::signing::{EVERY_ROWS, INTERVAL};
use crate::bench::spool::Figures;

const TARGET_DEFAULTS: f64 = 0.90;
const TARGET_DISK: f64 = 0.90;
/// Signing never sits on the event path: with it on, within 2% of off.
const TARGET_SIGNING: f64 = 0.98;

pub(super) fn print_table(
    args: &ExchangeArgs,
    systems: &[System],
    group: usize,
    rows: Vec<Row>,
    disk: Vec<RawRun>,
) {
    println!(
        "{} publishers x {} in flight x {} subscribers, {} events per publisher, median of {} rounds\n",
        args.publishers, args.in_flight, args.subscribers, args.events, args.rounds
    );
    println!(
        "| row | configuration | delivered events/s | events/s (each subscriber) | p50 | p99 | p99.9 | lost | server CPU / delivery | client CPU / delivery | server peak RSS |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for system in systems {
        let Some(row) = median_row(&rows, *system) else {
            continue;
        };
        let m = &row.m;
        println!(
            "| {} | {} | {:.0} | {:.0} | {} | {} | {} | {} | {:.1} µs | {:.1} µs | {} |",
            system.label(),
            configuration(args, *system),
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
    if let Some(f) = median_disk(&disk) {
        println!(
            "| raw disk | 1 thread, the same records, 1 write + 1 fdatasync per {group} (publishers x in flight), run before each durable eventgate row; latency per group | - | {:.0} | {} | {} | {} | - | - | - | - |",
            f.events_per_sec(),
            micros(f.latency.value_at_quantile(0.5)),
            micros(f.latency.value_at_quantile(0.99)),
            micros(f.latency.value_at_quantile(0.999)),
        );
    }
    print_disk_table(systems, &rows);
    print_ratios(args, group, &rows, &disk);
}

fn configuration(args: &ExchangeArgs, system: System) -> String {
    match system {
        System::Exchange => format!(
            "`forwarder = []`, `spool.fsync = \"{}\"`",
            args.spool_fsync.toml()
        ),
        System::Defaults => {
            "no config file: `spool.fsync = \"batch\"`, forwarders `log` (file) + `audit` (SQLite)"
                .into()
        }
        System::DefaultsSigning => format!(
            "the defaults + `[signing]`: a new key, `interval = \"{INTERVAL}\"`, `every_rows = {EVERY_ROWS}`"
        ),
        System::DefaultsWitnessed => "the defaults + `[signing]` as above + one `[[signing.witness]]`: an `eventgate witness` on loopback, `witness_timeout = \"1s\"`; the run fails unless checkpoints came back cosigned".into(),
        System::Containerd => "temp config, CRI disabled".into(),
    }
}

/// How each gateway row used the disk, from its metrics (its whole life, warm-up
/// included), and when the defaults' forwarders held every event. A row's time per
/// spool group against its mean fdatasync says how much of the row the disk took.
fn print_disk_table(systems: &[System], rows: &[Row]) {
    let gateways: Vec<&Row> = systems
        .iter()
        .filter(|s| **s != System::Containerd)
        .filter_map(|s| median_row(rows, *s))
        .collect();
    if gateways.is_empty() {
        return;
    }
    println!(
        "\n| row | records per spool fdatasync | time per spool group | spool fdatasync mean | file forwarder fdatasyncs | file fdatasync mean | log + audit hold every event after |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for row in gateways {
        let disk = row.disk.clone().unwrap_or_default();
        let defaults = matches!(
            row.system,
            System::Defaults | System::DefaultsSigning | System::DefaultsWitnessed
        );
        let held = match (defaults, row.held) {
            (true, Some(held)) => format!(
                "{:.2} s ({:.2}x the delivery clock)",
                held.as_secs_f64(),
                held.as_secs_f64() / row.m.elapsed.as_secs_f64().max(1e-9)
            ),
            (true, None) => "not within the drain timeout".into(),
            _ => "-".into(),
        };
        let us = |d: Duration| micros(d.as_micros() as u64);
        let per_group = disk
            .spool_group_mean
            .map(|g| Duration::from_secs_f64(g / row.m.published_per_sec().max(1e-9)));
        println!(
            "| {} | {} | {} | {} | {:.0} | {} | {held} |",
            row.system.label(),
            disk.spool_group_mean
                .map_or("-".into(), |g| format!("{g:.2}")),
            per_group.map_or("-".into(), us),
            disk.spool_fsync_mean.map_or("-".into(), us),
            disk.file_fsyncs,
            disk.file_fsync_mean.map_or("-".into(), us),
        );
    }
}

fn print_ratios(args: &ExchangeArgs, group: usize, rows: &[Row], disk: &[RawRun]) {
    println!("\nRatios: median of the per-round ratios (rows of a round run back to back).");
    let batch = args.spool_fsync == SpoolFsync::Batch;
    // The median, and each round's ratio in round order.
    let per_round = |ours: System, f: &dyn Fn(&Row, u32) -> Option<f64>| -> Option<Ratio> {
        let mut ratios: Vec<(u32, f64)> = rows
            .iter()
            .filter(|r| r.system == ours)
            .filter_map(|r| Some((r.round, f(r, r.round)?)))
            .collect();
        ratios.sort_by_key(|(round, _)| *round);
        let each: Vec<f64> = ratios.into_iter().map(|(_, x)| x).collect();
        (!each.is_empty()).then(|| Ratio {
            median: median(each.clone()),
            each,
        })
    };
    let same_round =
        |system: System, round: u32| rows.iter().find(|r| r.system == system && r.round == round);
    let verdict = |ratio: f64, target: f64| {
        if ratio >= target {
            format!("target >= {target:.2}: met")
        } else {
            format!("target >= {target:.2}: NOT met")
        }
    };
    if batch {
        let a = per_round(System::Defaults, &|r, round| {
            let exchange = same_round(System::Exchange, round)?;
            Some(r.m.delivered_per_sec() / exchange.m.delivered_per_sec().max(1e-9))
        });
        if let Some(a) = a {
            println!(
                "- (a) defaults / exchange only, both `spool.fsync = \"batch\"`, delivered events/s: **{:.2}x** ({}; rounds {a})",
                a.median,
                verdict(a.median, TARGET_DEFAULTS)
            );
        }
    } else if rows.iter().any(|r| r.system == System::Defaults) {
        println!(
            "- (a) defaults / exchange only needs the exchange-only row at `--spool-fsync batch` (the defaults' mode)"
        );
    }
    // Events per second, not deliveries: one record is written per event, however
    // many subscribers receive it.
    let vs_disk = |system: System| {
        per_round(system, &|r, round| {
            let raw = disk
                .iter()
                .find(|d| d.round == round && d.before == system)?;
            Some(r.m.published_per_sec() / raw.figures.events_per_sec().max(1e-9))
        })
    };
    if batch && let Some(b) = vs_disk(System::Exchange) {
        println!(
            "- (b) exchange only, `spool.fsync = \"batch\"` / raw disk at {group} records per fdatasync (run just before it), events/s: **{:.2}x** ({}; rounds {b})",
            b.median,
            verdict(b.median, TARGET_DISK)
        );
    }
    if let Some(b) = vs_disk(System::Defaults) {
        println!(
            "- defaults / raw disk at {group} records per fdatasync, events/s: {:.2}x (rounds {b})",
            b.median
        );
    }
    let vs_containerd = |system: System| {
        per_round(system, &|r, round| {
            let theirs = same_round(System::Containerd, round)?;
            Some(r.m.delivered_per_sec() / theirs.m.delivered_per_sec().max(1e-9))
        })
    };
    for system in [System::Exchange, System::Defaults] {
        if let Some(x) = vs_containerd(system) {
            println!(
                "- {} / containerd, delivered events/s: {:.2}x (rounds {x})",
                system.label(),
                x.median
            );
        }
    }
    print_signing(rows);
    if let (Some(ours), Some(theirs)) = (
        median_row(rows, System::Exchange),
        median_row(rows, System::Containerd),
    ) {
        println!(
            "- exchange only / containerd, median rows: p99 {:.2}x ({} vs {}); server CPU per delivery {:.2}x; peak RSS {:.2}x",
            ours.m.quantile(0.99) as f64 / theirs.m.quantile(0.99).max(1) as f64,
            micros(ours.m.quantile(0.99)),
            micros(theirs.m.quantile(0.99)),
            ours.server_cpu_us / theirs.server_cpu_us,
            ours.peak_rss.unwrap_or(0) as f64 / theirs.peak_rss.unwrap_or(1).max(1) as f64,
        );
    }
}

/// The defaults with signing on next to off, round by round (the two rows of a round
/// ran back to back, taking turns going first), how many checkpoints each signing
/// round signed, and how far the rows' own rounds are apart (the noise the ratio is
/// read against).
fn print_signing(rows: &[Row]) {
    let pairs: Vec<(&Row, &Row)> = rows
        .iter()
        .filter(|r| r.system == System::DefaultsSigning)
        .filter_map(|on| {
            let off = rows
                .iter()
                .find(|r| r.system == System::Defaults && r.round == on.round)?;
            Some((on, off))
        })
        .collect();
    let ratio = |f: &dyn Fn(&Row) -> f64| -> Ratio {
        let each: Vec<f64> = pairs.iter().map(|(on, off)| f(on) / f(off)).collect();
        Ratio {
            median: median(each.clone()),
            each,
        }
    };
    if !pairs.is_empty() {
        let rate = ratio(&|r: &Row| r.m.delivered_per_sec());
        let verdict = if rate.median >= TARGET_SIGNING {
            "met"
        } else {
            "NOT met"
        };
        println!(
            "- signing on / off (defaults + `[signing]` `interval = \"{INTERVAL}\"`, `every_rows = {EVERY_ROWS}` / defaults), delivered events/s: **{:.3}x** (target >= {TARGET_SIGNING:.2}: {verdict}; rounds {rate:.3})",
            rate.median,
        );
        let cpu = ratio(&|r: &Row| r.server_cpu_us);
        println!(
            "- signing on / off, server CPU per delivery: {:.3}x (rounds {cpu:.3})",
            cpu.median
        );
        let p99 = ratio(&|r: &Row| r.m.quantile(0.99) as f64);
        println!(
            "- signing on / off, p99: {:.3}x (rounds {p99:.3})",
            p99.median
        );
    }
    let signed: Vec<String> = rows
        .iter()
        .filter_map(|r| {
            let s = r.signed.as_ref()?;
            Some(format!(
                "{} ({} in audit.db)",
                s.published.map_or("?".into(), |n| n.to_string()),
                s.stored
            ))
        })
        .collect();
    if !signed.is_empty() {
        println!(
            "- checkpoints signed per signing round: {}",
            signed.join(", ")
        );
    }
    let witnessed: Vec<f64> = rows
        .iter()
        .filter(|r| r.system == System::DefaultsWitnessed)
        .filter_map(|on| {
            let off = rows
                .iter()
                .find(|r| r.system == System::DefaultsSigning && r.round == on.round)?;
            Some(on.m.delivered_per_sec() / off.m.delivered_per_sec().max(1e-9))
        })
        .collect();
    if !witnessed.is_empty() {
        println!(
            "- witnessing on / off (defaults + signing + witness / defaults + signing), delivered events/s: **{:.3}x** (rounds {})",
            median(witnessed.clone()),
            witnessed
                .iter()
                .map(|r| format!("{r:.3}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    for system in [
        System::Defaults,
        System::DefaultsSigning,
        System::DefaultsWitnessed,
    ] {
        let rates: Vec<f64> = rows
            .iter()
            .filter(|r| r.system == system)
            .map(|r| r.m.delivered_per_sec())
            .collect();
        if rates.len() < 2 || pairs.is_empty() {
            continue;
        }
        let (min, max) = rates
            .iter()
            .fold((f64::MAX, f64::MIN), |(lo, hi), x| (lo.min(*x), hi.max(*x)));
        println!(
            "- noise: {} delivered events/s from {min:.0} to {max:.0} over its rounds (max / min {:.3}x)",
            system.label(),
            max / min.max(1e-9)
        );
    }
}

struct Ratio {
    median: f64,
    each: Vec<f64>,
}

impl std::fmt::Display for Ratio {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Two decimals unless asked for more (`{ratio:.3}`).
        let digits = f.precision().unwrap_or(2);
        let each: Vec<String> = self.each.iter().map(|x| format!("{x:.digits$}")).collect();
        write!(f, "{}", each.join(", "))
    }
}

/// The median round of `system` by delivered events/s.
fn median_row(rows: &[Row], system: System) -> Option<&Row> {
    let mut mine: Vec<&Row> = rows.iter().filter(|r| r.system == system).collect();
    mine.sort_by(|a, b| a.m.delivered_per_sec().total_cmp(&b.m.delivered_per_sec()));
    mine.get(mine.len() / 2).copied()
}

fn median_disk(disk: &[RawRun]) -> Option<&Figures> {
    let mut sorted: Vec<&Figures> = disk.iter().map(|d| &d.figures).collect();
    sorted.sort_by(|a, b| a.events_per_sec().total_cmp(&b.events_per_sec()));
    sorted.get(sorted.len() / 2).copied()
}
