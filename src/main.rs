use std::process::ExitCode;

use clap::Parser;
use eventgate::cli::{self, Cli};

fn main() -> ExitCode {
    let cli = Cli::parse();
    cli::init_tracing(&cli.log);
    let runtime = match cli::runtime(&cli.runtime) {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(cli::run(cli)) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {:#}", anyhow::Error::from(error));
            ExitCode::FAILURE
        }
    }
}
