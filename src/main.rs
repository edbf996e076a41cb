use std::process::ExitCode;

use clap::Parser;
use eventgate::cli::{self, Cli};

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    cli::init_tracing(&cli.log);
    match cli::run(cli).await {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {:#}", anyhow::Error::from(error));
            ExitCode::FAILURE
        }
    }
}
