//! `eventgate bench query`: `eventgate query`'s read path on a generated store of
//! millions of events, next to plain rusqlite running the same SQL in the same run.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use crate::bench::micros;
use crate::bench::query::generate::{Generator, Params};
use crate::bench::query::measure::{Measured, cases, max, measure, measure_picture, median};
use crate::bench::query::prepare;
use crate::cli::CliError;

#[derive(Debug, Args)]
pub struct QueryBenchArgs {
    /// Events in the generated store.
    #[arg(long, default_value_t = 10_000_000, value_parser = clap::value_parser!(u64).range(1000..))]
    pub rows: u64,
    /// Days the events' timestamps are spread over.
    #[arg(long, default_value_t = 7, value_parser = clap::value_parser!(u32).range(1..=3650))]
    pub days: u32,
    /// Containers the events are about.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u32).range(10..))]
    pub containers: u32,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The generated store; reused when it was generated with the same parameters.
    #[arg(long, value_name = "PATH", default_value = "data/bench/query.db")]
    pub db: PathBuf,
    /// Timed runs of each indexed query (after one warm-up run).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub runs: u32,
    /// Timed runs of each full-scan query (after one warm-up run).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub scan_runs: u32,
}

fn ms(d: Duration) -> String {
    micros(d.as_micros() as u64)
}

pub(super) async fn run(args: QueryBenchArgs) -> Result<ExitCode, CliError> {
    tokio::task::spawn_blocking(move || run_blocking(args))
        .await
        .map_err(|e| CliError::Usage(format!("the benchmark stopped unexpectedly: {e}")))?
}

fn run_blocking(args: QueryBenchArgs) -> Result<ExitCode, CliError> {
    let params = Params {
        rows: args.rows,
        span_secs: i64::from(args.days) * 86_400,
        containers: args.containers,
        seed: args.seed,
    };
    let mut reported = 0;
    let prepared = prepare(&args.db, &params, &mut |written, elapsed| {
        if written >= reported + 1_000_000 || written == params.rows {
            reported = written;
            eprintln!(
                "generated {written} rows in {:.0} s ({:.0} rows/s)",
                elapsed.as_secs_f64(),
                written as f64 / elapsed.as_secs_f64().max(1e-9)
            );
        }
    })?;
    let gib = prepared.bytes as f64 / 1024.0 / 1024.0 / 1024.0;
    println!(
        "store: {} ({} rows over {} days, {} containers, seed {}; {:.2} GiB, {} bytes/row), {} at {:.0} rows/s",
        prepared.path.display(),
        prepared.rows,
        args.days,
        args.containers,
        args.seed,
        gib,
        prepared.bytes / prepared.rows.max(1),
        match prepared.reused {
            true => "reused; generated",
            false => "generated",
        },
        prepared.rows_per_sec,
    );
    let mut results = Vec::new();
    for case in cases(&params) {
        let runs = match case.full_scan {
            true => args.scan_runs,
            false => args.runs,
        };
        let m = measure(&prepared.path, &case, runs as usize)?;
        eprintln!(
            "{}: {} rows, eventgate median {}, raw median {}",
            case.name,
            m.rows,
            ms(median(&m.eventgate)),
            ms(median(&m.raw))
        );
        results.push(m);
    }
    if let Some(pod) = Generator::new(&params).measured_pod() {
        let m = measure_picture(&prepared.path, &pod, args.runs as usize)?;
        eprintln!(
            "{} of {pod}: {} rows, eventgate median {}, raw median {}",
            m.case.name,
            m.rows,
            ms(median(&m.eventgate)),
            ms(median(&m.raw))
        );
        results.push(m);
    }
    print_table(&args, prepared.rows, &results);
    Ok(ExitCode::SUCCESS)
}

fn print_table(args: &QueryBenchArgs, store_rows: u64, results: &[Measured]) {
    println!(
        "\nwarm cache; median and max of {} runs ({} for full scans) after one warm-up run; rows decoded to events, no output formatting\n",
        args.runs, args.scan_runs
    );
    println!(
        "| query | `eventgate query` arguments | rows returned | eventgate median | eventgate max | same SQL, rusqlite median | rusqlite max | eventgate / rusqlite | full scan rows/s: eventgate, rusqlite |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|");
    for m in results {
        let (eg, raw) = (median(&m.eventgate), median(&m.raw));
        let ratio = eg.as_secs_f64() / raw.as_secs_f64().max(1e-9);
        let scan = match m.case.full_scan {
            true => format!(
                "{:.0}, {:.0}",
                store_rows as f64 / eg.as_secs_f64().max(1e-9),
                store_rows as f64 / raw.as_secs_f64().max(1e-9)
            ),
            false => "-".to_owned(),
        };
        let rows = match m.rows == m.raw_rows {
            true => m.rows.to_string(),
            false => format!("{} (SQL: {})", m.rows, m.raw_rows),
        };
        println!(
            "| {} | `{}` | {rows} | {} | {} | {} | {} | {ratio:.2}x | {scan} |",
            m.case.name,
            m.case.command_line().replace('|', "\\|"),
            ms(eg),
            ms(max(&m.eventgate)),
            ms(raw),
            ms(max(&m.raw)),
        );
    }
    println!(
        "\nthe pod timeline picture: the history UI's timeline of that pod as `eventgate \
         timeline --pod` and /ui draw it (its rows read, the gap markers looked up, the \
         lanes laid out, the SVG written), next to rusqlite reading the pod's rows"
    );
    println!("\nquery plans (EXPLAIN QUERY PLAN of the SQL the filter translates to):\n");
    for m in results {
        println!("- {}: {}", m.case.name, m.plan);
    }
}
