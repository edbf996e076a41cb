//! `eventgate man --out-dir DIR`: the manual pages, one for `eventgate` and one for
//! each subcommand (`eventgate-serve.1`, `eventgate-audit-verify.1`, ...), made
//! from the command line itself, so they say what this binary accepts.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, CommandFactory};

use super::{Cli, CliError};

#[derive(Debug, Args)]
pub struct ManArgs {
    /// The directory to write the pages into (made if missing).
    #[arg(long, value_name = "DIR")]
    pub out_dir: PathBuf,
}

pub(super) fn run(args: ManArgs) -> Result<ExitCode, CliError> {
    let io = |what: &str| {
        let context = format!("{what} {}", args.out_dir.display());
        move |source| CliError::Io { context, source }
    };
    std::fs::create_dir_all(&args.out_dir).map_err(io("cannot create"))?;
    clap_mangen::generate_to(Cli::command(), &args.out_dir)
        .map_err(io("cannot write the manual pages into"))?;
    Ok(ExitCode::SUCCESS)
}
