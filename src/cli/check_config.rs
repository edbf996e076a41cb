//! `eventgate check-config`: validate a file before deploying it.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::CliError;
use crate::config::{Config, ConfigError};
use crate::forward::Kinds;
use crate::gateway::GatewayError;
use crate::listen::SocketGroup;

#[derive(Debug, Args)]
pub struct CheckConfigArgs {
    /// The TOML file to check.
    pub file: PathBuf,
    /// Also print the effective configuration (file plus defaults).
    #[arg(long)]
    pub print: bool,
}

pub(super) fn run(args: CheckConfigArgs) -> Result<ExitCode, CliError> {
    let config = Config::load(&args.file)?;
    config.check_kinds(&Kinds::default())?;
    // As `serve` opens the spool: a reserve the file system cannot hold would refuse
    // every event. Checked where the data directory is (or would be created).
    crate::spool::space::check_fits(&config.spool_dir(), &config.spool.min_free)
        .map_err(ConfigError::Spool)?;
    let warning =
        crate::spool::space::small_reserve_warning(&config.spool_dir(), &config.spool.min_free);
    // What `serve` would refuse in the data directory: a spool, audit store or
    // dead-letter store a newer eventgate wrote. Read only; nothing is created.
    crate::spool::format::check(&config.spool_dir()).map_err(GatewayError::from)?;
    for path in audit_stores(&config) {
        crate::store::migrate::check_file(&path, &crate::store::migrate::AUDIT)
            .map_err(|e| crate::query::QueryError::from(e.for_store(&path)))?;
    }
    crate::deadletter::check_schema(&config.dead_letter_path())?;
    crate::gateway::refuse_newer_state(&config)?;
    // What `serve` would find at start on this machine: the TLS files and the group.
    if let Some(tls) = &config.exchange.tls {
        tls.apply(
            tonic::transport::Server::builder(),
            config.exchange.limits.handshake_timeout,
        )
        .map_err(GatewayError::from)?;
    }
    if let Some(group) = &config.exchange.socket_group {
        SocketGroup::resolve(group).map_err(GatewayError::from)?;
    }
    println!("{}: ok", args.file.display());
    if let Some(warning) = warning {
        eprintln!("warning: {warning}");
    }
    if args.print {
        print!("{}", config.to_toml(&Kinds::default()));
    }
    Ok(ExitCode::SUCCESS)
}

/// Every `sqlite` forwarder's file, as the forwarder resolves it (`path`, default
/// `audit.db`, relative to `data_dir`).
fn audit_stores(config: &Config) -> Vec<PathBuf> {
    config
        .forwarders
        .iter()
        .filter(|f| f.kind == "sqlite")
        .map(|f| {
            let path = f
                .options
                .get("path")
                .and_then(|p| p.as_str())
                .map_or_else(|| PathBuf::from("audit.db"), PathBuf::from);
            config.data_dir.join(path)
        })
        .collect()
}
