//! `eventgate reload`: asks a running gateway to read its configuration again, on
//! its admin endpoint (`POST /reload`), and prints what it did or why it refused.
//! `--pid` sends SIGHUP instead, which does the same but answers only in the log.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use super::CliError;
use crate::admin::client::{self, FetchError};
use crate::admin::settings::DEFAULT_LISTEN;
use crate::admin::settings::ReloadToken;
use crate::config::ConfigError;
use crate::units::parse_duration;

#[derive(Debug, Args)]
pub struct ReloadArgs {
    /// The gateway's admin endpoint (its `admin.listen`).
    #[arg(long, value_name = "ADDR", env = "EVENTGATE_ADMIN", default_value = DEFAULT_LISTEN,
          conflicts_with = "pid")]
    pub admin: String,
    /// Send SIGHUP to this process instead; the outcome is then only in its log.
    /// (0 and negative numbers, which kill(2) takes as process groups, are refused.)
    #[arg(long, value_name = "PID", value_parser = clap::value_parser!(i32).range(1..))]
    pub pid: Option<i32>,
    /// How long to wait for the answer: removed and replaced forwarders first
    /// deliver what they have queued, for up to `pipeline.drain_timeout` each.
    #[arg(long, default_value = "2m", value_parser = parse_duration)]
    pub timeout: Duration,
    /// The file holding the token the gateway's `POST /reload` requires (its
    /// `admin.reload_token_file`). Without it, the one named in --config is used.
    #[arg(
        long,
        value_name = "FILE",
        env = "EVENTGATE_RELOAD_TOKEN_FILE",
        conflicts_with = "pid"
    )]
    pub token_file: Option<PathBuf>,
    /// The gateway's configuration file, to find `admin.reload_token_file` in.
    #[arg(
        long,
        short = 'c',
        value_name = "FILE",
        env = "EVENTGATE_CONFIG",
        conflicts_with = "pid"
    )]
    pub config: Option<PathBuf>,
}

/// The token to send: from --token-file, else from the configuration's
/// `admin.reload_token_file`; `None` when neither names one. Only that key is read
/// from the file, so a configuration the reload is about to reject (a bad key)
/// still gets its rejection from the gateway.
fn token(args: &ReloadArgs) -> Result<Option<ReloadToken>, CliError> {
    let path = match (&args.token_file, &args.config) {
        (Some(path), _) => path.clone(),
        (None, Some(config)) => match token_file_in(config)? {
            Some(path) => path,
            None => return Ok(None),
        },
        (None, None) => return Ok(None),
    };
    ReloadToken::read(&path)
        .map(Some)
        .map_err(|problem| CliError::Usage(format!("the reload token (--token-file): {problem}")))
}

/// Exits 0 when the reload was applied, 2 when it was rejected, 1 when the gateway
/// could not be asked.
pub(super) async fn run(args: ReloadArgs) -> Result<ExitCode, CliError> {
    if let Some(pid) = args.pid {
        return hangup(pid);
    }
    let token = token(&args)?;
    let token = token.as_ref().map(ReloadToken::as_str);
    let (code, body) = client::post(&args.admin, "/reload", token, args.timeout)
        .await
        .map_err(|error| CliError::Io {
            context: "cannot ask the gateway to reload".into(),
            source: std::io::Error::other(error),
        })?;
    match code {
        200 => {
            print!("{body}");
            Ok(ExitCode::SUCCESS)
        }
        422 => {
            eprint!("{body}");
            Ok(ExitCode::from(2))
        }
        _ => Err(CliError::Io {
            context: "cannot ask the gateway to reload".into(),
            source: std::io::Error::other(FetchError::Status {
                addr: client::host_port(&args.admin).into(),
                path: "/reload".into(),
                code,
                body,
            }),
        }),
    }
}

/// `admin.reload_token_file` in a configuration file, if it names one.
fn token_file_in(config: &std::path::Path) -> Result<Option<PathBuf>, CliError> {
    let text = std::fs::read_to_string(config).map_err(|source| CliError::Io {
        context: format!(
            "cannot read {} for admin.reload_token_file",
            config.display()
        ),
        source,
    })?;
    let table: toml::Table = toml::from_str(&text).map_err(|error| {
        CliError::Config(ConfigError::Parse {
            origin: format!("in {}", config.display()),
            detail: crate::config::describe_toml_error(&text, &error),
        })
    })?;
    let file = table
        .get("admin")
        .and_then(|admin| admin.get("reload_token_file"))
        .and_then(toml::Value::as_str)
        .map(PathBuf::from);
    Ok(file)
}

fn hangup(pid: i32) -> Result<ExitCode, CliError> {
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    let sent = unsafe { libc::kill(pid, libc::SIGHUP) };
    if sent != 0 {
        return Err(CliError::Io {
            context: format!("cannot send SIGHUP to process {pid}"),
            source: std::io::Error::last_os_error(),
        });
    }
    println!(
        "sent SIGHUP to process {pid}; whether the configuration was applied is in its log (without --pid, the admin endpoint answers here)"
    );
    Ok(ExitCode::SUCCESS)
}
