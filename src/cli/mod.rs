//! The `eventgate` command line: one file per subcommand.

mod audit;
mod audit_proof;
#[cfg(feature = "bench")]
mod bench;
mod check_config;
mod completions;
mod dlq;
mod events;
mod man;
mod picture;
mod publish;
mod query;
mod reload;
mod replay;
mod serve;
mod stats;
mod status;
mod store;
mod timeline;
mod top;
mod witness;

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};
use thiserror::Error;

use crate::client::ConnectError;
use crate::config::ConfigError;
use crate::gateway::GatewayError;
use crate::proto::EncodeError;

/// Where `serve` listens by default, and so where the clients look by default.
pub(crate) const DEFAULT_ADDRESS: &str = "./data/eventgate.sock";

#[derive(Debug, Parser)]
#[command(
    name = "eventgate",
    version,
    about = "A containerd-compatible event exchange that forwards and keeps every event",
    long_about = "eventgate serves containerd's Events API (Publish, Forward, Subscribe) on a unix \
                  socket, so `ctr --address <socket> events` and `containerd publish` work against it \
                  unchanged."
)]
pub struct Cli {
    #[command(flatten)]
    pub log: LogArgs,
    #[command(flatten)]
    pub runtime: RuntimeArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the gateway.
    Serve(serve::ServeArgs),
    /// Publish one event (like `containerd publish`, plus JSON input).
    Publish(publish::PublishArgs),
    /// Print events as they happen (like `ctr events`).
    Events(events::EventsArgs),
    /// Validate a configuration file and name the first bad key.
    CheckConfig(check_config::CheckConfigArgs),
    /// Rerunnable benchmarks against the real peers.
    #[cfg(feature = "bench")]
    Bench(bench::BenchArgs),
    /// Dead letters: events forwarders gave up on (list, retry, purge).
    Dlq(dlq::DlqArgs),
    /// Stored events from the audit store (a SQLite file, or PostgreSQL with
    /// --store), filtered like Subscribe.
    Query(query::QueryArgs),
    /// Event counts per topic or namespace per time bucket, from the audit store.
    Stats(stats::StatsArgs),
    /// The timeline picture (one lane per container) from the audit store, as one
    /// self-contained .html or .svg file.
    Timeline(picture::TimelineArgs),
    /// Send stored events again: to a configured forwarder or to another exchange.
    Replay(replay::ReplayArgs),
    /// A running gateway's forwarders, upstreams, subscribers and spool, from its
    /// admin endpoint.
    Status(status::StatusArgs),
    /// `status`, refreshed every second (q or Ctrl-C quits).
    Top(top::TopArgs),
    /// The audit store's hash chain: verify it, print its head; make a key to sign it.
    Audit(audit::AuditArgs),
    /// Make a running gateway read its configuration again and say whether it applied it.
    Reload(reload::ReloadArgs),
    /// A transparency log witness (C2SP tlog-witness): make its key, check its
    /// configuration, run it.
    Witness(witness::WitnessArgs),
    /// Print the completion script for a shell (bash, zsh, fish).
    Completions(completions::CompletionsArgs),
    /// Write the manual pages (eventgate.1 and one per subcommand) into a directory.
    Man(man::ManArgs),
}

#[derive(Debug, Args)]
pub struct LogArgs {
    /// Log level or filter (e.g. "debug", "eventgate=trace"); RUST_LOG wins if set.
    #[arg(long, global = true, default_value = "info", env = "EVENTGATE_LOG")]
    pub log_level: String,
    /// Log line format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

#[derive(Debug, Args)]
pub struct RuntimeArgs {
    /// Threads for async work. 1 (the default) runs everything on one thread: the
    /// gateway's work is I/O and hand-offs, and on small nodes extra busy threads
    /// mostly add scheduler delays (measured: p99 4 ms with 2 threads on 2 cores,
    /// 0.3 ms with 1). Blocking work always runs on its own threads.
    #[arg(long, global = true, default_value_t = 1, env = "EVENTGATE_WORKER_THREADS",
          value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub worker_threads: u16,
}

/// Builds the tokio runtime `--worker-threads` asks for.
pub fn runtime(args: &RuntimeArgs) -> std::io::Result<tokio::runtime::Runtime> {
    if args.worker_threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(args.worker_threads.into())
            .enable_all()
            .build()
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Everything a subcommand can fail with; `main` prints the chain of causes.
#[derive(Debug, Error)]
pub enum CliError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Gateway(#[from] GatewayError),
    #[error(transparent)]
    Connect(#[from] ConnectError),
    #[error(transparent)]
    Encode(#[from] EncodeError),
    #[error("{context}: {code:?}: {message}")]
    Rpc {
        context: &'static str,
        code: tonic::Code,
        message: String,
    },
    #[error("{0}")]
    Usage(String),
    #[error("{context}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[cfg(feature = "bench")]
    #[error(transparent)]
    Bench(#[from] crate::bench::BenchError),
    #[error(transparent)]
    DeadLetter(#[from] crate::deadletter::DeadLetterError),
    #[error(transparent)]
    Query(#[from] crate::query::QueryError),
    #[error(transparent)]
    Replay(#[from] crate::replay::ReplayError),
    #[error(transparent)]
    Verify(#[from] crate::store::verify::VerifyError),
    #[error(transparent)]
    CentralVerify(#[from] crate::postgres::verify::CentralVerifyError),
    /// A usage error of `audit`, whose exit status 1 means tampering found.
    #[error("{0}")]
    AuditUsage(String),
    #[error(transparent)]
    KeyFile(#[from] crate::note::KeyFileError),
    // Not `{0}`: `main` prints the causes after the message, and the proof's error is one.
    #[error("cannot make the proof")]
    Prove(#[from] crate::store::prove::ProveError),
    #[error(transparent)]
    Witness(#[from] crate::witness::ServeError),
}

impl CliError {
    /// 1 for failures in general; 2 when `audit` could not verify, so that 1 from
    /// `audit verify` always means tampering was found.
    pub fn exit_code(&self) -> ExitCode {
        match self {
            CliError::Verify(_)
            | CliError::CentralVerify(_)
            | CliError::AuditUsage(_)
            | CliError::Prove(_) => ExitCode::from(2),
            _ => ExitCode::FAILURE,
        }
    }

    pub(crate) fn rpc(context: &'static str, status: tonic::Status) -> Self {
        CliError::Rpc {
            context,
            code: status.code(),
            message: status.message().to_owned(),
        }
    }
}

/// stderr for the log and console messages: a write that fails (ENOSPC when stderr is
/// a file on the disk that filled, EPIPE) is dropped, never an error or a
/// panic. Losing a log line must not take the gateway down, least of all in the fault
/// the line reports.
pub struct LossyStderr;

impl std::io::Write for LossyStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.write_all(buf)?;
        Ok(buf.len())
    }

    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        // One locked write_all per line, as `std::io::Stderr` does: lines from
        // several threads do not interleave.
        let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), buf);
        Ok(())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = std::io::Write::flush(&mut std::io::stderr());
        Ok(())
    }
}

/// `eprintln!` that never panics: the line is dropped when stderr cannot
/// be written. For messages on the `serve` path.
#[macro_export]
macro_rules! console_error {
    ($($arg:tt)*) => {{
        let _ = ::std::io::Write::write_all(
            &mut $crate::internal::cli::LossyStderr,
            format!("{}\n", format_args!($($arg)*)).as_bytes(),
        );
    }};
}

/// Sets up `tracing` on stderr. `RUST_LOG`, when set, overrides `--log-level`.
pub fn init_tracing(args: &LogArgs) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&args.log_level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| LossyStderr)
        // On a failed write the fmt layer would report it with `eprintln!`, which
        // panics when stderr cannot be written: the very case it reports.
        .log_internal_errors(false)
        .with_ansi(std::io::stderr().is_terminal());
    match args.log_format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

pub async fn run(cli: Cli) -> Result<ExitCode, CliError> {
    match cli.command {
        Command::Serve(args) => serve::run(args).await,
        Command::Publish(args) => publish::run(args).await,
        Command::Events(args) => events::run(args).await,
        Command::CheckConfig(args) => check_config::run(args),
        #[cfg(feature = "bench")]
        Command::Bench(args) => bench::run(args).await,
        Command::Dlq(args) => dlq::run(args).await,
        Command::Query(args) => query::run(args).await,
        Command::Stats(args) => stats::run(args).await,
        Command::Timeline(args) => picture::run(args).await,
        Command::Replay(args) => replay::run(args).await,
        Command::Status(args) => status::run(args).await,
        Command::Top(args) => top::run(args).await,
        Command::Audit(args) => audit::run(args).await,
        Command::Reload(args) => reload::run(args).await,
        Command::Witness(args) => witness::run(args).await,
        Command::Completions(args) => completions::run(args),
        Command::Man(args) => man::run(args),
    }
}
