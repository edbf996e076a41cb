//! `eventgate bench exchange`: eventgate's exchange next to containerd's, eventgate
//! with its defaults, and the disk's group-commit limit, all in the same run.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;

use super::exchange_table::print_table;
use crate::bench::daemon::{Daemon, own_cpu_time};
use crate::bench::exchange::{ExchangeBench, Measurement, measure, published_events};
use crate::bench::gateway_round::{DiskFigures, defaults_hold, disk_figures, free_admin_address};
use crate::bench::micros;
use crate::bench::signing::{Signed, SigningKey, checkpoints};
use crate::bench::spool::{Figures, raw};
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
    /// Leave containerd out.
    #[arg(long)]
    pub no_containerd: bool,
    /// Leave out eventgate with its defaults (no config file: `spool.fsync = "batch"`
    /// and the `log` and `audit` forwarders).
    #[arg(long)]
    pub no_defaults: bool,
    /// `spool.fsync` of the exchange-only eventgate (`forwarder = []`). Publish
    /// answers once the event is durable per this mode; containerd persists nothing,
    /// so "none" (events still written to the OS, surviving a crash of eventgate) is
    /// the closest comparison. The defaults row always runs with "batch".
    #[arg(long, value_enum, default_value = "batch")]
    pub spool_fsync: SpoolFsync,
    /// The defaults row with signed checkpoints off, on, or both (`off,on`: two rows
    /// taking turns each round). `on` adds a config file holding only `[signing]`: a
    /// key the benchmark writes, `interval = "1s"`, `every_rows = 10000` (far more
    /// often than the defaults, 1m and 100000); the run fails if such a gateway signed
    /// no checkpoint. `witnessed` is `on` plus an `eventgate witness` on loopback that
    /// every checkpoint is sent to (`[[signing.witness]]`); the run fails unless the
    /// checkpoints come back cosigned. `off,on,witnessed` runs all three in turn.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "off")]
    pub signing: Vec<Signing>,
}

/// Whether a gateway signs checkpoints of its audit store (`[signing]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Signing {
    Off,
    On,
    /// `on`, and every checkpoint sent to a witness the benchmark runs.
    Witnessed,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
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

/// What a row runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum System {
    /// `eventgate serve` with `forwarder = []` and the given `spool.fsync`.
    Exchange,
    /// `eventgate serve` without a config file: what a user gets out of the box.
    Defaults,
    /// The defaults plus `[signing]` (a config file holding nothing else).
    DefaultsSigning,
    /// The defaults plus `[signing]` with a `[[signing.witness]]`: an
    /// `eventgate witness` the benchmark runs, which every checkpoint is sent to.
    DefaultsWitnessed,
    Containerd,
}

impl System {
    pub(super) fn label(self) -> &'static str {
        match self {
            System::Exchange => "eventgate, exchange only",
            System::Defaults => "eventgate, defaults",
            System::DefaultsSigning => "eventgate, defaults + signing",
            System::DefaultsWitnessed => "eventgate, defaults + signing + witness",
            System::Containerd => "containerd",
        }
    }
}

pub(super) struct Row {
    pub system: System,
    pub round: u32,
    pub m: Measurement,
    pub peak_rss: Option<u64>,
    /// CPU microseconds per delivered event: the daemon's (forwarding included,
    /// until the forwarders held every event), and the benchmark client's.
    pub server_cpu_us: f64,
    pub client_cpu_us: f64,
    pub disk: Option<DiskFigures>,
    /// First publish until the default forwarders held every event; `None` if they
    /// had not within the drain timeout.
    pub held: Option<Duration>,
    /// The checkpoints a gateway with signing on had signed.
    pub signed: Option<Signed>,
}

/// One run of the disk's group-commit limit, made right before `before`'s row.
pub(super) struct RawRun {
    pub round: u32,
    pub before: System,
    pub figures: Figures,
}

pub(super) async fn run(args: ExchangeArgs) -> Result<ExitCode, CliError> {
    let (eventgate, dir) = super::binary_and_dir()?;
    let bench = ExchangeBench {
        publishers: args.publishers as usize,
        subscribers: args.subscribers as usize,
        events: args.events as usize,
        in_flight: args.in_flight as usize,
        drain_timeout: Duration::from_secs(60),
    };
    let mut systems = vec![System::Exchange];
    if !args.no_defaults {
        if args.signing.contains(&Signing::Off) {
            systems.push(System::Defaults);
        }
        if args.signing.contains(&Signing::On) {
            systems.push(System::DefaultsSigning);
        }
        if args.signing.contains(&Signing::Witnessed) {
            systems.push(System::DefaultsWitnessed);
        }
    }
    if !args.no_containerd {
        systems.push(System::Containerd);
    }
    // Calls that can share one fdatasync: every call in flight at once.
    let group = bench.publishers * bench.in_flight.max(1);
    // The disk's limit is run right before each durable eventgate row: the disk's
    // sync latency on a shared machine moves within seconds, so a row is compared
    // with the raw run next to it rather than with one run per round.
    let durable = |system: System| match system {
        System::Exchange => args.spool_fsync == SpoolFsync::Batch,
        System::Defaults | System::DefaultsSigning | System::DefaultsWitnessed => true,
        System::Containerd => false,
    };
    let records = Arc::new(if systems.iter().any(|s| durable(*s)) {
        published_events(&bench)
    } else {
        Vec::new()
    });
    let mut rows: Vec<Row> = Vec::new();
    let mut disk: Vec<RawRun> = Vec::new();
    for round in 0..args.rounds {
        // Alternate who goes first so no one always gets the warmer machine.
        let order: Vec<System> = if round % 2 == 0 {
            systems.clone()
        } else {
            systems.iter().rev().copied().collect()
        };
        for system in order {
            if durable(system) {
                let path = dir.path().join(format!("raw-{round}.log"));
                let f = raw(path.clone(), Arc::clone(&records), group, true).await?;
                eprintln!(
                    "round {} {:>24}: {:>9.0} records/s, p50 {} per group of {group}",
                    round + 1,
                    "raw disk",
                    f.events_per_sec(),
                    micros(f.latency.value_at_quantile(0.5)),
                );
                std::fs::remove_file(&path).map_err(|source| CliError::Io {
                    context: format!("cannot remove {}", path.display()),
                    source,
                })?;
                disk.push(RawRun {
                    round,
                    before: system,
                    figures: f,
                });
            }
            let run_dir = dir
                .path()
                .join(format!("{system:?}-{round}").to_lowercase());
            let row = run_one(&args, &bench, &eventgate, &run_dir, system, round).await?;
            eprintln!(
                "round {} {:>24}: {:>9.0} delivered/s, p99 {}, lost {}, cpu/event server {:.1} µs client {:.1} µs",
                round + 1,
                system.label(),
                row.m.delivered_per_sec(),
                micros(row.m.quantile(0.99)),
                row.m.lost(),
                row.server_cpu_us,
                row.client_cpu_us,
            );
            if let Some(signed) = &row.signed {
                eprintln!(
                    "round {} {:>24}: {} checkpoints signed, {} in audit.db",
                    round + 1,
                    "",
                    signed.published.map_or("?".into(), |n| n.to_string()),
                    signed.stored,
                );
            }
            rows.push(row);
            // Each round's gateway starts on an empty data directory; the old one
            // only takes disk space.
            if system != System::Containerd {
                let _ = std::fs::remove_dir_all(&run_dir);
            }
        }
    }
    print_table(&args, &systems, group, rows, disk);
    Ok(ExitCode::SUCCESS)
}

/// One system, one round, in the fresh directory `run_dir`.
async fn run_one(
    args: &ExchangeArgs,
    bench: &ExchangeBench,
    eventgate: &Path,
    run_dir: &Path,
    system: System,
    round: u32,
) -> Result<Row, CliError> {
    std::fs::create_dir_all(run_dir).map_err(|source| CliError::Io {
        context: format!("cannot create {}", run_dir.display()),
        source,
    })?;
    let admin = free_admin_address()?;
    let mut key = None;
    let mut witness: Option<crate::bench::signing::Witness> = None;
    let daemon = match system {
        System::Containerd => Daemon::containerd(&args.containerd, run_dir).await?,
        System::Exchange => {
            let config = run_dir.join("eventgate.toml");
            let text = format!(
                "forwarder = []\n[spool]\nfsync = \"{}\"\n",
                args.spool_fsync.toml()
            );
            std::fs::write(&config, text).map_err(|source| CliError::Io {
                context: format!("cannot write {}", config.display()),
                source,
            })?;
            let config = config.display().to_string();
            let extra = ["--config", &config, "--admin", &admin];
            Daemon::eventgate(eventgate, run_dir, &extra).await?
        }
        System::Defaults => Daemon::eventgate(eventgate, run_dir, &["--admin", &admin]).await?,
        System::DefaultsSigning => {
            let signing = SigningKey::write(run_dir)?;
            let config = run_dir.join("eventgate.toml");
            std::fs::write(&config, signing.config_table()).map_err(|source| CliError::Io {
                context: format!("cannot write {}", config.display()),
                source,
            })?;
            key = Some(signing);
            let config = config.display().to_string();
            let extra = ["--config", &config, "--admin", &admin];
            Daemon::eventgate(eventgate, run_dir, &extra).await?
        }
        System::DefaultsWitnessed => {
            let signing = SigningKey::write(run_dir)?;
            let running = crate::bench::signing::Witness::start(run_dir, &signing).await?;
            let config = run_dir.join("eventgate.toml");
            std::fs::write(&config, running.config_table(&signing)).map_err(|source| {
                CliError::Io {
                    context: format!("cannot write {}", config.display()),
                    source,
                }
            })?;
            key = Some(signing);
            witness = Some(running);
            let config = config.display().to_string();
            let extra = ["--config", &config, "--admin", &admin];
            Daemon::eventgate(eventgate, run_dir, &extra).await?
        }
    };
    let address = daemon.socket().display().to_string();
    let (server_before, client_before) = (daemon.cpu_time(), own_cpu_time());
    let result = measure(&address, bench).await;
    let client_cpu = own_cpu_time().saturating_sub(client_before);
    let m = match result {
        Ok(m) => m,
        Err(e) => {
            daemon.stop(Duration::from_secs(5)).await;
            return Err(e.into());
        }
    };
    let held = match system {
        System::Defaults | System::DefaultsSigning | System::DefaultsWitnessed => {
            let data_dir = run_dir.join("eventgate");
            let stored = m.published + m.warmups;
            defaults_hold(&data_dir, stored, bench.drain_timeout)
                .await?
                .map(|at| at.duration_since(m.started))
        }
        _ => None,
    };
    let disk = match system {
        System::Containerd => None,
        _ => Some(disk_figures(&admin).await?),
    };
    let server_cpu = daemon
        .cpu_time()
        .zip(server_before)
        .map(|(after, before)| after.saturating_sub(before));
    let peak_rss = daemon.peak_rss();
    // After the figures above: a tiny round may end before the first checkpoint,
    // and waiting for it is not the row's work.
    let signed = match &key {
        Some(key) => {
            let data_dir = run_dir.join("eventgate");
            let signed = match &witness {
                Some(witness) => witness.cosigned(&data_dir, key, &admin).await,
                None => checkpoints(&data_dir, key, Some(&admin)).await,
            };
            match signed {
                Ok(signed) => Some(signed),
                Err(e) => {
                    daemon.stop(Duration::from_secs(5)).await;
                    return Err(e.into());
                }
            }
        }
        None => None,
    };
    daemon.stop(Duration::from_secs(5)).await;
    if let Some(witness) = witness {
        witness.stop().await;
    }
    let per_event = |d: Duration| d.as_secs_f64() * 1e6 / m.delivered.max(1) as f64;
    Ok(Row {
        system,
        round,
        server_cpu_us: server_cpu.map_or(f64::NAN, per_event),
        client_cpu_us: per_event(client_cpu),
        m,
        peak_rss,
        disk,
        held,
        signed,
    })
}
