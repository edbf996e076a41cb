//! `eventgate check-config`: validate a file before deploying it.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::CliError;
use crate::config::Config;
use crate::forward::Kinds;

#[derive(Debug, Args)]
pub struct CheckConfigArgs {
    /// The TOML file to check.
    pub file: PathBuf,
    /// Also print the effective configuration (file plus defaults).
    #[arg(long)]
    pub print: bool,
}

pub fn run(args: CheckConfigArgs) -> Result<ExitCode, CliError> {
    let config = Config::load(&args.file)?;
    config.check_kinds(&Kinds::default())?;
    println!("{}: ok", args.file.display());
    if args.print {
        print!("{}", config.to_toml());
    }
    Ok(ExitCode::SUCCESS)
}
