//! `eventgate witness`: a transparency log witness (C2SP tlog-witness): make its
//! key, check its configuration, run it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};

use super::CliError;
use crate::witness::{ServeError, WitnessSettings};

#[derive(Debug, Args)]
pub struct WitnessArgs {
    #[command(subcommand)]
    pub command: WitnessCommand,
}

#[derive(Debug, Subcommand)]
pub enum WitnessCommand {
    /// Create the witness's cosigner key (C2SP tlog-cosignature, Ed25519): writes the
    /// secret key to a new file (mode 0600) and prints the witness's verifier key to
    /// give to whoever checks cosignatures.
    #[command(
        after_help = "The printed verifier key (NAME+KEY_ID+KEY, signature type 0x04) is what a \
        log's users check cosignatures with; give it out freely. The key file is the secret: \
        point `key` in the witness's config at it. An existing file is never overwritten."
    )]
    Keygen(KeygenArgs),
    /// Run the witness: serve POST /add-checkpoint (c2sp.org/tlog-witness) until
    /// SIGINT or SIGTERM.
    Serve(ServeArgs),
    /// Validate a witness configuration file (and its key file) and name the first
    /// bad key.
    CheckConfig(CheckConfigArgs),
}

#[derive(Debug, Args)]
pub struct KeygenArgs {
    /// The witness's name, on every cosignature line: a schema-less URL naming the
    /// witness is customary (`witness.example.com/w1`). No spaces, no '+'.
    pub name: String,
    /// Where to write the secret key (default: NAME.key in the current directory,
    /// each '/' of the name replaced by '_'). Never overwritten.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The witness's TOML configuration (see deploy/witness.example.toml).
    #[arg(long, short = 'c', value_name = "FILE")]
    pub config: PathBuf,
    /// Serve on this address (HOST:PORT; port 0 picks a free one); overrides `listen`
    /// (default 127.0.0.1:7380).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Keep the state (witness.db) in this directory; overrides `data_dir`.
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct CheckConfigArgs {
    /// The witness's TOML configuration file.
    pub file: PathBuf,
}

pub(super) async fn run(args: WitnessArgs) -> Result<ExitCode, CliError> {
    match args.command {
        WitnessCommand::Keygen(args) => keygen(args),
        WitnessCommand::Serve(args) => serve(args).await,
        WitnessCommand::CheckConfig(args) => check_config(args),
    }
}

fn keygen(args: KeygenArgs) -> Result<ExitCode, CliError> {
    // A name is often a URL path: its slashes would make the default a path into
    // directories that do not exist.
    let out = args
        .out
        .unwrap_or_else(|| format!("{}.key", args.name.replace('/', "_")).into());
    let cosigner = crate::note::write_new_cosigner(&out, &args.name)?;
    println!("{}", cosigner.witness_key().to_text());
    eprintln!(
        "wrote the witness key {:?} to {} (mode 0600; keep it secret: it cosigns checkpoints).\n\
         The verifier key printed above is what the logs' users check cosignatures with.",
        cosigner.name(),
        out.display()
    );
    Ok(ExitCode::SUCCESS)
}

fn load(file: &std::path::Path) -> Result<(WitnessSettings, String), ServeError> {
    let settings = WitnessSettings::load(file)?;
    Ok((settings, format!("in {}", file.display())))
}

async fn serve(args: ServeArgs) -> Result<ExitCode, CliError> {
    // Before anything else: a stop asked for while starting still stops cleanly.
    let stop = super::serve::shutdown_signal();
    let (mut settings, origin) = load(&args.config)?;
    if let Some(listen) = args.listen {
        settings.listen = listen;
    }
    if let Some(dir) = args.data_dir {
        settings.data_dir = dir;
    }
    crate::witness::serve(&settings, &origin, stop).await?;
    Ok(ExitCode::SUCCESS)
}

fn check_config(args: CheckConfigArgs) -> Result<ExitCode, CliError> {
    let (settings, origin) = load(&args.file)?;
    let (cosigner, logs) = crate::witness::check(&settings, &origin)?;
    println!("{}: ok", args.file.display());
    println!("witness   {}", cosigner.witness_key().to_text());
    println!("listen    {}", settings.listen);
    println!("state     {}", settings.state_path().display());
    for log in &logs {
        let keys: Vec<String> = log.keys.iter().map(|k| k.to_text()).collect();
        println!("log       {} ({})", log.origin, keys.join(", "));
    }
    Ok(ExitCode::SUCCESS)
}
