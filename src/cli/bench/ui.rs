//! `eventgate bench ui`: ingest into a gateway with its defaults, without and with
//! `/ui` readers on its admin listener, phases alternating on the same gateway.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use super::{median, rate};
use crate::bench::micros;
use crate::bench::ui::{Gateway, Phase, UiBench};
use crate::cli::CliError;

#[derive(Debug, Args)]
pub struct UiBenchArgs {
    /// Events published per phase.
    #[arg(long, default_value_t = 50_000, value_parser = clap::value_parser!(u32).range(1..))]
    pub events: u32,
    /// Events stored before the first phase, so the readers' answers hit their row caps.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u32).range(0..))]
    pub prefill: u32,
    /// Concurrent HTTP clients reading /ui during a phase with readers.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub readers: u32,
    /// Rounds, each one phase without readers and one with (taking turns going first);
    /// the median is reported.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=50))]
    pub rounds: u32,
    /// Publishing connections.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub publishers: u32,
    /// Calls in flight per connection.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub in_flight: u32,
    /// How long a phase may take until the audit store holds every event.
    #[arg(long, default_value = "300s", value_parser = crate::units::parse_duration)]
    pub timeout: Duration,
}

pub(super) async fn run(args: UiBenchArgs) -> Result<ExitCode, CliError> {
    let (eventgate, dir) = super::binary_and_dir()?;
    let bench = UiBench {
        events: args.events as usize,
        prefill: args.prefill as usize,
        readers: args.readers as usize,
        publishers: args.publishers as usize,
        in_flight: args.in_flight as usize,
        timeout: args.timeout,
    };
    let mut gateway = Gateway::start(&eventgate, dir.path(), &bench).await?;
    let mut rows = Vec::new();
    for round in 0..args.rounds {
        let mut phases = Vec::new();
        for with_readers in [round % 2 == 1, round % 2 == 0] {
            match gateway.phase(&bench, with_readers).await {
                Ok(phase) => phases.push(phase),
                Err(e) => {
                    gateway.stop().await;
                    return Err(e.into());
                }
            }
        }
        let (with, without): (Vec<Phase>, Vec<Phase>) =
            phases.into_iter().partition(|p| p.with_readers);
        if let (Some(without), Some(with)) = (without.first(), with.first()) {
            let row = RoundRow::of(bench.events, without, with);
            eprintln!(
                "round {}: accepted {:.0} -> {:.0} events/s, stored {:.0} -> {:.0} events/s, readers {:.1} answers/s ({} ok, {} busy, {} deadline, {} other)",
                round + 1,
                row.accepted[0],
                row.accepted[1],
                row.stored[0],
                row.stored[1],
                row.answers_per_sec,
                row.mix[0],
                row.mix[1],
                row.mix[2],
                row.mix[3],
            );
            if let Some(what) = with.answers.as_ref().and_then(|a| a.first_other.clone()) {
                eprintln!("round {}: first unexpected answer: {what}", round + 1);
            }
            rows.push(row);
        }
    }
    gateway.stop().await;
    print_table(&args, &rows);
    Ok(ExitCode::SUCCESS)
}

/// One round's figures: `[without, with]` readers where there are two.
#[derive(Clone, Debug, PartialEq)]
struct RoundRow {
    accepted: [f64; 2],
    stored: [f64; 2],
    /// The gateway's CPU over the phase's stored time, in cores.
    gateway_cores: [f64; 2],
    /// This process's (publishers' and readers') CPU, in cores.
    client_cores: [f64; 2],
    answers_per_sec: f64,
    /// 200, 503 busy, 503 deadline, anything else.
    mix: [u64; 4],
    p50: Option<Duration>,
    p99: Option<Duration>,
}

impl RoundRow {
    fn of(events: usize, without: &Phase, with: &Phase) -> Self {
        let cores = |p: &Phase, cpu: Option<Duration>| {
            cpu.map_or(f64::NAN, |c| {
                c.as_secs_f64() / p.stored.as_secs_f64().max(1e-9)
            })
        };
        let answers = with.answers.clone().unwrap_or_default();
        Self {
            accepted: [rate(events, without.accepted), rate(events, with.accepted)],
            stored: [rate(events, without.stored), rate(events, with.stored)],
            gateway_cores: [
                cores(without, without.gateway_cpu),
                cores(with, with.gateway_cpu),
            ],
            client_cores: [
                cores(without, Some(without.client_cpu)),
                cores(with, Some(with.client_cpu)),
            ],
            answers_per_sec: answers.per_sec(),
            mix: [answers.ok, answers.busy, answers.deadline, answers.other],
            p50: answers.quantile(0.5),
            p99: answers.quantile(0.99),
        }
    }

    fn accepted_ratio(&self) -> f64 {
        self.accepted[1] / self.accepted[0]
    }

    fn stored_ratio(&self) -> f64 {
        self.stored[1] / self.stored[0]
    }

    /// The median of each column over `rows`; ratios are the median of the rounds'
    /// ratios (rounds pair phases run back to back, so each ratio is of like with like).
    fn median_of(rows: &[RoundRow]) -> (Self, f64, f64) {
        let col = |f: &dyn Fn(&RoundRow) -> f64| median(rows.iter().map(f).collect());
        let pair = |f: &dyn Fn(&RoundRow) -> [f64; 2]| [col(&|r| f(r)[0]), col(&|r| f(r)[1])];
        let mix = |i: usize| col(&|r| r.mix[i] as f64) as u64;
        let quantile = |f: &dyn Fn(&RoundRow) -> Option<Duration>| {
            let values: Vec<f64> = rows
                .iter()
                .filter_map(|r| f(r).map(|d| d.as_secs_f64()))
                .collect();
            (!values.is_empty()).then(|| Duration::from_secs_f64(median(values)))
        };
        let row = Self {
            accepted: pair(&|r| r.accepted),
            stored: pair(&|r| r.stored),
            gateway_cores: pair(&|r| r.gateway_cores),
            client_cores: pair(&|r| r.client_cores),
            answers_per_sec: col(&|r| r.answers_per_sec),
            mix: [mix(0), mix(1), mix(2), mix(3)],
            p50: quantile(&|r| r.p50),
            p99: quantile(&|r| r.p99),
        };
        (
            row,
            col(&|r| r.accepted_ratio()),
            col(&|r| r.stored_ratio()),
        )
    }
}

fn print_table(args: &UiBenchArgs, rows: &[RoundRow]) {
    println!(
        "{} events per phase ({} publishers x {} in flight) into a gateway with its defaults, {} events stored before; with readers: {} clients looping GET /ui/api/timeline.svg?group=namespace, /ui/api/events?limit=1000 (paging), /ui/api/export?format=csv; median of {} rounds\n",
        args.events, args.publishers, args.in_flight, args.prefill, args.readers, args.rounds
    );
    println!(
        "| round | accepted/s without readers | with readers | with / without | stored/s without readers | with readers | with / without | gateway CPU (cores) without / with | bench process CPU (cores) without / with | readers' answers/s | 200 / 503 busy / 503 deadline / other | answer p50 / p99 |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (i, row) in rows.iter().enumerate() {
        print_row(
            &(i + 1).to_string(),
            row,
            row.accepted_ratio(),
            row.stored_ratio(),
        );
    }
    if !rows.is_empty() {
        let (row, accepted, stored) = RoundRow::median_of(rows);
        print_row("median", &row, accepted, stored);
    }
}

fn print_row(label: &str, r: &RoundRow, accepted: f64, stored: f64) {
    let latency = |d: Option<Duration>| d.map_or("-".into(), |d| micros(d.as_micros() as u64));
    println!(
        "| {label} | {:.0} | {:.0} | {:.2} | {:.0} | {:.0} | {:.2} | {:.2} / {:.2} | {:.2} / {:.2} | {:.1} | {} / {} / {} / {} | {} / {} |",
        r.accepted[0],
        r.accepted[1],
        accepted,
        r.stored[0],
        r.stored[1],
        stored,
        r.gateway_cores[0],
        r.gateway_cores[1],
        r.client_cores[0],
        r.client_cores[1],
        r.answers_per_sec,
        r.mix[0],
        r.mix[1],
        r.mix[2],
        r.mix[3],
        latency(r.p50),
        latency(r.p99),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::ui_readers::Answers;

    fn phase(with_readers: bool, accepted_ms: u64, stored_ms: u64) -> Phase {
        Phase {
            with_readers,
            accepted: Duration::from_millis(accepted_ms),
            stored: Duration::from_millis(stored_ms),
            gateway_cpu: Some(Duration::from_millis(stored_ms)),
            client_cpu: Duration::from_millis(stored_ms / 2),
            answers: with_readers.then(|| Answers {
                ok: 6,
                busy: 2,
                elapsed: Duration::from_secs(2),
                latencies_us: vec![1000; 8],
                ..Answers::default()
            }),
        }
    }

    #[test]
    fn a_round_compares_its_two_phases_and_counts_the_readers_answers() {
        let row = RoundRow::of(1000, &phase(false, 100, 200), &phase(true, 125, 400));
        assert_eq!(row.accepted, [10_000.0, 8_000.0]);
        assert_eq!(row.stored, [5_000.0, 2_500.0]);
        assert_eq!(row.accepted_ratio(), 0.8);
        assert_eq!(row.stored_ratio(), 0.5);
        assert_eq!(row.gateway_cores, [1.0, 1.0]);
        assert_eq!(row.client_cores, [0.5, 0.5]);
        assert_eq!(row.answers_per_sec, 4.0);
        assert_eq!(row.mix, [6, 2, 0, 0]);
        assert_eq!(row.p99, Some(Duration::from_millis(1)));
    }

    #[test]
    fn the_median_ratio_is_of_the_rounds_ratios() {
        let rows = [
            RoundRow::of(1000, &phase(false, 100, 100), &phase(true, 100, 200)),
            RoundRow::of(1000, &phase(false, 50, 100), &phase(true, 100, 100)),
            RoundRow::of(1000, &phase(false, 200, 400), &phase(true, 200, 500)),
        ];
        let (row, accepted, stored) = RoundRow::median_of(&rows);
        // Accepted ratios 1, 0.5, 1; stored ratios 0.5, 1, 0.8.
        assert_eq!(accepted, 1.0);
        assert_eq!(stored, 0.8);
        assert_eq!(row.accepted, [10_000.0, 10_000.0]);
        assert_eq!(row.stored, [10_000.0, 5_000.0]);
        assert_eq!(row.mix, [6, 2, 0, 0]);
    }
}
