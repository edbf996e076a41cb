//! `eventgate bench`: rerunnable benchmarks that print a README-ready table.

mod exchange;
mod forwarder;
mod query;
mod replay;
mod spool;

use std::process::ExitCode;

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
}

pub async fn run(args: BenchArgs) -> Result<ExitCode, CliError> {
    match args.which {
        Which::Exchange(args) => exchange::run(args).await,
        Which::Forwarder(args) => forwarder::run(args).await,
        Which::Spool(args) => spool::run(args).await,
        Which::Query(args) => query::run(args).await,
        Which::Replay(args) => replay::run(args).await,
    }
}
