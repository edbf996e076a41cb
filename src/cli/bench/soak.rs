//! `eventgate bench soak`: mixed load with a fault every few seconds, then a check
//! by event id of every sink, the audit chain and the gateway's resources.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use crate::bench::soak::{Soak, run};
use crate::cli::CliError;
use crate::units::parse_duration;

#[derive(Debug, Args)]
pub struct SoakBenchArgs {
    /// How long to load and inject faults (the drain and the check come after).
    #[arg(long, default_value = "60m", value_parser = parse_duration)]
    pub duration: Duration,
    /// Seed of the fault sequence (printed; a random one by default).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Mean time between faults (each one is half to one and a half of it).
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub fault_every: Duration,
    /// Publish calls per second over all publishers.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub rate: u32,
    /// Where the report (soak.md, and soak.json for tools), the resource samples
    /// (resources.csv, one a second), the gateway's config and log go.
    #[arg(long, default_value = "soak-out")]
    pub out: PathBuf,
    /// The containerd binary (needs root).
    #[arg(long, default_value = "containerd")]
    pub containerd: PathBuf,
    /// The tansu binary.
    #[arg(long, default_value = "tansu")]
    pub tansu: PathBuf,
}

pub(super) async fn run_soak(args: SoakBenchArgs) -> Result<ExitCode, CliError> {
    // This very process, even if its file was replaced since it started.
    let eventgate = PathBuf::from("/proc/self/exe");
    let seed = args.seed.unwrap_or_else(rand::random);
    // Room for everything the sinks keep over the run (about 3 KiB per event
    // across the store, the log file and the spool), plus a margin.
    let events = args.rate as u64 * args.duration.as_secs().max(60);
    let disk_bytes = (512 << 20) + events * 3072;
    eprintln!(
        "soak: {:?} at {} Publish/s, a fault every ~{:?}, seed {seed}, report in {}",
        args.duration,
        args.rate,
        args.fault_every,
        args.out.display()
    );
    let soak = Soak {
        duration: args.duration,
        fault_every: args.fault_every,
        seed,
        rate: args.rate as f64,
        publishers: 4,
        upstream_rate: 10.0,
        disk_bytes,
        out: args.out.clone(),
        eventgate,
        containerd: args.containerd,
        tansu: super::forwarder::find_tansu(&args.tansu),
    };
    let report = run(soak).await?;
    let markdown = report.markdown();
    println!("{markdown}");
    let write = |name: &str, text: &str| {
        let path = args.out.join(name);
        std::fs::write(&path, text).map_err(|source| CliError::Io {
            context: format!("cannot write {}", path.display()),
            source,
        })
    };
    write("soak.md", &markdown)?;
    write("resources.csv", &report.csv())?;
    let mut json = report.json().to_string();
    json.push('\n');
    write("soak.json", &json)?;
    Ok(if report.failures().is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
