//! `eventgate audit`: the audit store's hash chain (verify it, print its head).
//!
//! Exit codes, as `cmp` and `diff` use them: 0 the store is intact, 1 tampering was
//! found, 2 the store could not be verified (missing, unreadable, or an anchor that
//! can no longer be checked).

use std::process::ExitCode;

use clap::{Args, Subcommand};

use super::CliError;
use super::query::StoreLocation;
use crate::store::chain::hex;
use crate::store::verify::{self, Anchor, Problem, Report};

#[derive(Debug, Args)]
pub struct AuditArgs {
    #[command(subcommand)]
    pub command: AuditCommand,
}

#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Recompute every row's hash and link and report the first sign of tampering.
    #[command(
        after_help = "Exit status: 0 intact, 1 tampering found, 2 could not verify.\n\
        Record `eventgate audit head` somewhere the node cannot write, and pass it back \
        with --anchor: that catches a chain recomputed after an edit."
    )]
    Verify(VerifyArgs),
    /// Print the chain's head (row_id, seq, time, hash) to record elsewhere.
    Head(HeadArgs),
    /// Create a key that signs checkpoints of the chain head (C2SP signed notes, as
    /// Go's sumdb note): writes the secret signer key to a new file (mode 0600) and
    /// prints the verifier key to give to whoever checks the checkpoints.
    #[command(
        after_help = "The printed verifier key (NAME+KEY_ID+KEY) is what `audit verify --key` \
        takes; give it out freely. The key file is the secret: point `[signing] key` or \
        `serve --signing-key` at it, and keep it readable by eventgate only. An existing \
        file is never overwritten."
    )]
    Keygen(KeygenArgs),
}

#[derive(Debug, Args)]
pub struct VerifyArgs {
    #[command(flatten)]
    pub location: StoreLocation,
    /// A hash recorded earlier for a row, as `eventgate audit head` prints it
    /// (ROW_ID:HASH); the row must still have it. May be given more than once.
    #[arg(long, value_name = "ROW_ID:HASH", value_parser = parse_anchor)]
    pub anchor: Vec<Anchor>,
}

#[derive(Debug, Args)]
pub struct HeadArgs {
    #[command(flatten)]
    pub location: StoreLocation,
}

fn parse_anchor(text: &str) -> Result<Anchor, String> {
    text.parse()
}

/// Tampering found.
const TAMPERED: u8 = 1;

pub(super) async fn run(args: AuditArgs) -> Result<ExitCode, CliError> {
    tokio::task::spawn_blocking(move || match args.command {
        AuditCommand::Verify(args) => run_verify(args),
        AuditCommand::Head(args) => run_head(args),
        AuditCommand::Keygen(args) => run_keygen(args),
    })
    .await
    .unwrap_or_else(|e| {
        // Not exit 1: that is reserved for tampering found.
        eprintln!("error: audit stopped unexpectedly: {e}");
        Ok(ExitCode::from(2))
    })
}

fn run_verify(args: VerifyArgs) -> Result<ExitCode, CliError> {
    let path = args.location.path();
    let report = verify::verify(&path, &args.anchor)?;
    match &report.problem {
        Some(problem) => {
            let code = tampered(&path, problem);
            println!(
                "({} verified before it, {:.2} s)",
                rows(report.verified),
                report.elapsed.as_secs_f64()
            );
            Ok(code)
        }
        None => {
            println!("audit store {}: intact", path.display());
            print!("{}", summary(&report));
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The success summary, one fact per line.
fn summary(report: &Report) -> String {
    let mut out = String::new();
    let mut line = |name: &str, value: String| out.push_str(&format!("{name:<14}{value}\n"));
    let Some(state) = &report.state else {
        return out;
    };
    let opt = |v: Option<i64>| v.map_or("?".to_owned(), |v| v.to_string());
    let first = state.first_row_id.max(state.pruned_row_id + 1);
    line(
        "verified",
        match report.verified {
            0 => rows(0),
            n => format!("{} (row_id {first} to {})", rows(n), state.head_row_id),
        },
    );
    line(
        "legacy",
        format!(
            "{} stored before the chain began (not verified)",
            rows(report.legacy)
        ),
    );
    line(
        "pruned",
        match state.pruned_rows {
            0 => rows(0),
            n => format!(
                "{}, last at {}",
                rows(n.unsigned_abs()),
                state.pruned_at.as_deref().unwrap_or("?")
            ),
        },
    );
    if state.pruned_row_id > 0 {
        line(
            "checkpoint",
            format!(
                "row_id {}, seq {}, {}, hash {}",
                state.pruned_row_id,
                opt(state.pruned_seq),
                state.pruned_timestamp.as_deref().unwrap_or("-"),
                state
                    .pruned_hash
                    .map_or("none (legacy rows)".into(), |h| hex(&h))
            ),
        );
    }
    match (&report.head, state.head_hash) {
        (Some(head), Some(hash)) => {
            line("head", head.to_string());
            line("head hash", hex(&hash));
            line("anchor", format!("{}:{}", head.row_id, hex(&hash)));
        }
        _ => line("head", "none (nothing chained yet)".into()),
    }
    for anchor in &report.anchors {
        line("checked", format!("{anchor} (as recorded)"));
    }
    let secs = report.elapsed.as_secs_f64();
    let rate = match secs > 0.0 {
        true => format!(", {:.0} rows/s", report.verified as f64 / secs),
        false => String::new(),
    };
    line("elapsed", format!("{secs:.2} s{rate}"));
    out
}

fn rows(n: u64) -> String {
    match n {
        1 => "1 row".to_owned(),
        n => format!("{n} rows"),
    }
}

fn run_head(args: HeadArgs) -> Result<ExitCode, CliError> {
    let path = args.location.path();
    match verify::head(&path)? {
        Err(problem) => Ok(tampered(&path, &problem)),
        Ok(head) => match (head.row, head.hash) {
            (Some(row), Some(hash)) => {
                println!("row_id    {}", row.row_id);
                println!(
                    "seq       {}",
                    row.seq.map_or("?".to_owned(), |s| s.to_string())
                );
                println!("time      {}", row.time.as_deref().unwrap_or("-"));
                println!("hash      {}", hex(&hash));
                println!("anchor    {}:{}", row.row_id, hex(&hash));
                Ok(ExitCode::SUCCESS)
            }
            _ => {
                println!("no chained rows yet in {}", path.display());
                Ok(ExitCode::SUCCESS)
            }
        },
    }
}

fn tampered(path: &std::path::Path, problem: &Problem) -> ExitCode {
    println!("audit store {}: TAMPERED", path.display());
    println!("{problem}");
    ExitCode::from(TAMPERED)
}

#[derive(Debug, Args)]
pub struct KeygenArgs {
    /// The key's name, on every signature line: a schema-less URL naming this
    /// gateway's log is customary (`audit.example.com/node-1`). No spaces, no '+'.
    pub name: String,
    /// Where to write the signer key (default: NAME.key in the current directory,
    /// each '/' of the name replaced by '_'). Never overwritten.
    #[arg(long, value_name = "FILE")]
    pub out: Option<std::path::PathBuf>,
}

fn run_keygen(args: KeygenArgs) -> Result<ExitCode, CliError> {
    // A name is often a URL path: its slashes would make the default a path into
    // directories that do not exist.
    let out = args
        .out
        .unwrap_or_else(|| format!("{}.key", args.name.replace('/', "_")).into());
    let signer = crate::note::write_new_key(&out, &args.name)?;
    println!("{}", signer.verifier().to_text());
    eprintln!(
        "wrote the signer key {:?} to {} (mode 0600; keep it secret: it signs checkpoints).\n\
         The verifier key printed above is what `eventgate audit verify --key` takes.",
        signer.name(),
        out.display()
    );
    Ok(ExitCode::SUCCESS)
}
