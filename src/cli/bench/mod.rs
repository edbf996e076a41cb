//! `eventgate bench`: rerunnable benchmarks that print a README-ready table.

mod backlog;
mod central;
mod correlate;
mod exchange;
mod exchange_table;
mod fleet;
mod forwarder;
mod query;
mod reconcile;
mod reconcile_cri;
mod replay;
mod resume;
mod soak;
mod spool;
mod tree;
mod ui;
mod upstream;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};

use super::CliError;

#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub which: Which,
}

#[derive(Debug, Subcommand)]
pub enum Which {
    /// Publish/Subscribe throughput and latency: eventgate vs a real containerd,
    /// both started by the benchmark on temporary unix sockets.
    Exchange(exchange::ExchangeArgs),
    /// Forwarder throughput: events published over the socket until the forwarder
    /// holds them all, next to the sink's raw limit measured in the same run.
    Forwarder(forwarder::ForwarderArgs),
    /// Durable spool appends per fsync mode under concurrent publishers, next to the
    /// disk's raw limit and SQLite, measured in the same run.
    Spool(spool::SpoolArgs),
    /// `eventgate query` on a generated store of millions of events (reused between
    /// runs), next to plain rusqlite running the same SQL in the same run.
    Query(query::QueryBenchArgs),
    /// `replay --to-address` into a running eventgate at several --in-flight values,
    /// next to plain Forward calls with the same concurrency in the same run.
    Replay(replay::ReplayBenchArgs),
    /// Reconciling a node of 2,000 containers and 100 tasks through the gateway, next
    /// to containerd's own List calls in the same run (needs root for containerd);
    /// with --cri, a Kubernetes node of 2,000 CRI containers, next to the kubelet's
    /// relist.
    Reconcile(reconcile::ReconcileBenchArgs),
    /// A real containerd takes a burst of Publish calls while eventgate, subscribed
    /// to it with its defaults, stores them: containerd's accepted/s next to
    /// eventgate's stored/s in the same run.
    Upstream(upstream::UpstreamBenchArgs),
    /// Resident memory while a million events pile up in the spool for a kafka
    /// forwarder whose broker is down, after a restart with that backlog, and while
    /// it drains once a broker is up.
    Backlog(backlog::BacklogBenchArgs),
    /// A resumed subscription's catch-up rate from the audit store and from the
    /// spool, each next to the same history read raw in the same run.
    Resume(resume::ResumeBenchArgs),
    /// A central gateway's Kafka source taking in node gateways' messages, with the
    /// defaults and with the spool alone, next to a plain librdkafka consumer
    /// reading the same messages in the same run.
    Fleet(fleet::FleetBenchArgs),
    /// Central ingest into PostgreSQL through one and two central gateways (a kafka
    /// source whose offsets the postgres forwarder's database keeps), next to a raw
    /// COPY of the same rows in the same run; and the pod timeline query on a
    /// generated store (starts its own PostgreSQL cluster and tansu broker).
    Central(central::CentralBenchArgs),
    /// The correlate stage's cost per event (many containers; one crash-looping),
    /// next to rendering the same events as JSON lines in the same run.
    Correlate(correlate::CorrelateBenchArgs),
    /// Mixed load for --duration with a fault every few seconds (SIGKILL of the
    /// gateway, containerd restart, broker restart, disk full, slow sink, reload),
    /// then a check by event id of every sink, the audit chain and the gateway's
    /// memory, open files and threads (needs root, containerd and tansu).
    Soak(soak::SoakBenchArgs),
    /// Ingest into a gateway with its defaults, with and without clients reading the
    /// history page's heaviest answers (/ui) at once, in alternating phases of the
    /// same run.
    Ui(ui::UiBenchArgs),
    /// The audit store's Merkle tree on a generated store of millions of rows: its
    /// insert cost next to plain rusqlite, its bytes per row, inclusion and
    /// consistency proof latency next to the same reads in plain rusqlite, `audit
    /// verify` with and without the tree pass next to a plain scan, and building it
    /// for an older store.
    Tree(tree::TreeBenchArgs),
}

pub(super) async fn run(args: BenchArgs) -> Result<ExitCode, CliError> {
    match args.which {
        Which::Exchange(args) => exchange::run(args).await,
        Which::Forwarder(args) => forwarder::run(args).await,
        Which::Spool(args) => spool::run(args).await,
        Which::Query(args) => query::run(args).await,
        Which::Replay(args) => replay::run(args).await,
        Which::Reconcile(args) => reconcile::run(args).await,
        Which::Upstream(args) => upstream::run(args).await,
        Which::Backlog(args) => backlog::run(args).await,
        Which::Resume(args) => resume::run(args).await,
        Which::Fleet(args) => fleet::run(args).await,
        Which::Central(args) => central::run(args).await,
        Which::Correlate(args) => correlate::run(args).await,
        Which::Soak(args) => soak::run_soak(args).await,
        Which::Ui(args) => ui::run(args).await,
        Which::Tree(args) => tree::run(args).await,
    }
}

/// The running eventgate binary (the daemon a benchmark starts) and a temporary
/// directory for the run, removed when dropped.
fn binary_and_dir() -> Result<(PathBuf, tempfile::TempDir), CliError> {
    let eventgate = std::env::current_exe().map_err(|source| CliError::Io {
        context: "cannot find the eventgate binary".into(),
        source,
    })?;
    let dir = tempfile::Builder::new()
        .prefix("eg-bench")
        .tempdir()
        .map_err(|source| CliError::Io {
            context: "cannot create a temporary directory".into(),
            source,
        })?;
    Ok((eventgate, dir))
}

fn rate(events: usize, elapsed: Duration) -> f64 {
    events as f64 / elapsed.as_secs_f64().max(1e-9)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}
