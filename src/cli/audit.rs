//! `eventgate audit`: the audit store's hash chain (verify it, print its head).
//!
//! Exit codes, as `cmp` and `diff` use them: 0 the store is intact, 1 tampering was
//! found, 2 the store could not be verified (missing, unreadable, an anchor that can
//! no longer be checked, or signed checkpoints that cannot be used).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand};

use super::CliError;
use super::query::StoreLocation;
use crate::note::Verifier;
use crate::store::chain::hex;
use crate::store::verify::checkpoints::{self, CheckpointsError, Verified, archive_problem, count};
use crate::store::verify::shipped;
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
        The chain alone does not catch a chain recomputed after an edit. Signed checkpoints \
        kept off the host do (--key with --checkpoints: the file forwarder's JSON lines, \
        Kafka messages' JSON values one per line, or signed notes as text), and so does a \
        head recorded somewhere the node cannot write (`eventgate audit head`), passed back \
        with --anchor."
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
    /// Write a proof that an event is in the history a signed checkpoint pins (an
    /// inclusion proof, with --row, --seq or --id), or that a newer checkpoint
    /// extends an older one (a consistency proof, with --from): a file anyone can
    /// check with `audit check-proof` and the verifier key, without the store.
    #[command(
        after_help = "Checkpoints are signed notes as the gateway shipped them (the `event.note` of a \
        /eventgate/audit/checkpoint line, or `audit head`'s); without --checkpoint or --to, the \
        newest one the store keeps. The proof is read from the store's Merkle tree: the \
        store must still hold the tree the checkpoints signed. Exit status: 0 written, 2 \
        the proof cannot be made (the message says why), 1 other errors."
    )]
    Prove(super::audit_proof::ProveArgs),
    /// Check a proof `audit prove` wrote (or any proof file of its format) with
    /// nothing but keys: the tree heads' signatures, witnesses' cosignatures if asked,
    /// then the proof's hashes.
    #[command(
        after_help = "Exit status: 0 the proof holds, 1 it does not (a wrong hash, a forged \
        signature, another log, too few witnesses), 2 it cannot be checked (not a proof \
        file, no given key signed it)."
    )]
    CheckProof(super::audit_proof::CheckProofArgs),
}

#[derive(Debug, Args)]
pub struct VerifyArgs {
    #[command(flatten)]
    pub store: super::store::StoreArgs,
    /// Check a central store's copy of this node's rows against the node's own
    /// signed checkpoints (--key, --checkpoints): a PostgreSQL --store that central
    /// gateways fill from Kafka.
    #[arg(long, value_name = "NAME", requires = "checkpoints")]
    pub node: Option<String>,
    /// The node's store whose checkpoints to check against (its id, as the
    /// checkpoints' `store` line says), when they name several.
    #[arg(long, value_name = "STORE_ID", requires = "node")]
    pub node_store: Option<String>,
    /// A hash recorded earlier for a row, as `eventgate audit head` prints it
    /// (ROW_ID:HASH); the row must still have it. May be given more than once.
    #[arg(long, value_name = "ROW_ID:HASH", value_parser = parse_anchor)]
    pub anchor: Vec<Anchor>,
    /// A verifier key (NAME+KEY_ID+KEY, as `audit keygen` printed it): checkpoints
    /// it signed are checked against the store. Give every key the gateway signed
    /// with over the time the checkpoints cover (the old and the new one across a
    /// rotation). Needs --checkpoints.
    // Parsed after clap: clap quotes a value it refuses, and a signer key pasted here
    // by mistake is the secret.
    #[arg(long = "key", value_name = "VERIFIER_KEY", requires = "checkpoints")]
    pub keys: Vec<String>,
    /// Signed checkpoints shipped off the host, `-` for stdin: the file forwarder's
    /// JSON lines (other events in it are skipped), Kafka messages' JSON values (one
    /// per line), or signed notes as text (each note's text, a blank line, its
    /// signature lines). At most 256 MiB and a million notes. Needs --key.
    #[arg(long, value_name = "FILE", requires = "keys")]
    pub checkpoints: Option<PathBuf>,
    /// A witness's key (NAME+KEY_ID+KEY, as `eventgate witness keygen` printed it):
    /// its cosignatures on the checkpoints count. May be given more than once. Needs
    /// --checkpoints.
    #[arg(
        long = "witness-key",
        value_name = "WITNESS_KEY",
        requires = "checkpoints"
    )]
    pub witness_keys: Vec<String>,
    /// How many of the given witnesses must have cosigned the newest checkpoint
    /// (default: 1 when --witness-key is given).
    #[arg(long, value_name = "N", requires = "witness_keys")]
    pub min_witnesses: Option<usize>,
    /// The newest checkpoint may be at most this old (`2h`, `15m`): older means
    /// checkpoints stopped arriving. With witnesses, their cosignature time counts,
    /// not the node's clock. Needs --checkpoints.
    #[arg(long, value_name = "DURATION", value_parser = crate::units::parse_duration, requires = "checkpoints")]
    pub max_age: Option<std::time::Duration>,
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
        AuditCommand::Prove(args) => super::audit_proof::run_prove(args),
        AuditCommand::CheckProof(args) => super::audit_proof::run_check_proof(args),
    })
    .await
    .unwrap_or_else(|e| {
        // Not exit 1: that is reserved for tampering found.
        eprintln!("error: audit stopped unexpectedly: {e}");
        Ok(ExitCode::from(2))
    })
}

fn run_verify(args: VerifyArgs) -> Result<ExitCode, CliError> {
    let spec = args.store.resolve().map_err(|e| match e {
        CliError::Usage(message) => CliError::AuditUsage(message),
        other => other,
    })?;
    let path = match spec {
        crate::query::StoreSpec::Sqlite(path) => path,
        crate::query::StoreSpec::Postgres(target) => return run_verify_central(&target, &args),
    };
    if args.node.is_some() {
        return Err(CliError::AuditUsage(
            "--node checks a central PostgreSQL store (--store postgres://... or a postgres \
             forwarder's name): a SQLite store is checked whole, against its own checkpoints"
                .to_owned(),
        ));
    }
    if let Some(input) = &args.checkpoints {
        return run_verify_checkpoints(&path, &args, input);
    }
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
            print!("{}", summary(&report, &args.anchor));
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `audit verify --store postgres://... --node NAME`: a central copy of one node's
/// rows against that node's signed checkpoints.
fn run_verify_central(
    target: &crate::postgres::Target,
    args: &VerifyArgs,
) -> Result<ExitCode, CliError> {
    let (Some(node), Some(input)) = (&args.node, &args.checkpoints) else {
        return Err(CliError::AuditUsage(
            "a PostgreSQL store holds many nodes' rows, each chained on its own node: check \
             one node's at a time against that node's signed checkpoints (--node NAME --key \
             VERIFIER_KEY --checkpoints FILE)"
                .to_owned(),
        ));
    };
    if !args.anchor.is_empty() || !args.witness_keys.is_empty() || args.max_age.is_some() {
        return Err(CliError::AuditUsage(
            "--anchor, --witness-key and --max-age check a SQLite store; a central copy is \
             checked against the node's checkpoints alone"
                .to_owned(),
        ));
    }
    let shipped = read_shipped(args, input)?;
    if let Some(problem) = archive_problem(&shipped) {
        println!("TAMPERED: {problem}");
        return Ok(ExitCode::from(TAMPERED));
    }
    let options = crate::postgres::verify::Options {
        node: node.clone(),
        store: args.node_store.clone(),
    };
    let started = std::time::Instant::now();
    let report = tokio::runtime::Handle::current()
        .block_on(crate::postgres::verify::verify(target, &shipped, &options))?;
    let elapsed = started.elapsed().as_secs_f64();
    let mut out = String::new();
    let mut line = |name: &str, value: String| out.push_str(&format!("{name:<14}{value}\n"));
    line(
        "copy",
        format!(
            "{} of node {} (node seq {} to {})",
            rows(report.rows),
            report.node,
            report.first_seq.unwrap_or_default(),
            report.last_seq.unwrap_or_default()
        ),
    );
    if let Some(problem) = &report.problem {
        println!(
            "central copy of node {} in {}: TAMPERED: {problem}",
            report.node,
            target.describe()
        );
        print!("{out}");
        println!(
            "({} proven before it, {elapsed:.2} s)",
            rows(report.verified)
        );
        return Ok(ExitCode::from(TAMPERED));
    }
    let start = match report.seeded_at {
        Some(seq) => format!(", from the checkpoint at node seq {seq} (the copy begins after it)"),
        None => ", from the chain's start".to_owned(),
    };
    let newest_seq = report
        .newest
        .as_ref()
        .and_then(|s| s.checkpoint.seq)
        .unwrap_or_default();
    line(
        "proven",
        format!(
            "{} up to node seq {newest_seq}, recomputed as node {} chained them, matching {} of the {} checkpoints of its store {}{start}",
            rows(report.verified),
            report.node,
            report.matched,
            report.checkpoints,
            report.store,
        ),
    );
    if report.unsigned > 0 {
        line(
            "not signed",
            format!(
                "{} after the newest checkpoint: not checked until the node signs past them",
                rows(report.unsigned)
            ),
        );
    }
    if report.newer > 0 {
        line(
            "newer",
            format!(
                "{} past the copy's last row: the node's events after node seq {} have not reached this store (yet)",
                count(report.newer as u64, "checkpoint"),
                report.last_seq.unwrap_or_default()
            ),
        );
    }
    if let Some(newest) = &report.newest {
        line(
            "newest",
            format!(
                "node seq {}, signed at {} by {} ({})",
                newest.checkpoint.seq.unwrap_or_default(),
                checkpoints::time(&newest.checkpoint),
                newest.signed_by.join(" and "),
                shipped.at(newest.line)
            ),
        );
    }
    line("time", format!("{elapsed:.2} s"));
    println!(
        "central copy of node {} in {}: intact",
        report.node,
        target.describe()
    );
    print!("{out}");
    Ok(ExitCode::SUCCESS)
}

/// The checkpoints in `input`, opened with the `--key`s given.
fn read_shipped(args: &VerifyArgs, input: &Path) -> Result<shipped::Shipped, CliError> {
    let mut keys: Vec<Verifier> = Vec::with_capacity(args.keys.len());
    for (number, text) in (1..).zip(&args.keys) {
        let key = Verifier::from_text(text).map_err(|source| {
            verify::VerifyError::from(CheckpointsError::Key { number, source })
        })?;
        // The same key given twice would make every note it signed ambiguous.
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    // Read before the store: no checkpoint can then be newer than what is walked.
    let shipped = match input.to_str() {
        Some("-") => shipped::read(std::io::stdin().lock(), "stdin", &keys),
        _ => {
            let name = input.display().to_string();
            let file = std::fs::File::open(input).map_err(|source| {
                verify::VerifyError::from(CheckpointsError::Read {
                    input: name.clone(),
                    source,
                })
            })?;
            shipped::read(file, &name, &keys)
        }
    }
    .map_err(verify::VerifyError::from)?;
    Ok(shipped)
}

fn run_verify_checkpoints(
    path: &Path,
    args: &VerifyArgs,
    input: &Path,
) -> Result<ExitCode, CliError> {
    let shipped = read_shipped(args, input)?;
    let mut witnesses = Vec::with_capacity(args.witness_keys.len());
    for (number, text) in (1..).zip(&args.witness_keys) {
        let key = crate::tlog::cosignature::WitnessKey::from_text(text).map_err(|source| {
            verify::VerifyError::from(CheckpointsError::WitnessKey { number, source })
        })?;
        if !witnesses.contains(&key) {
            witnesses.push(key);
        }
    }
    let min_witnesses = args
        .min_witnesses
        .unwrap_or(usize::from(!witnesses.is_empty()));
    if min_witnesses > witnesses.len() {
        return Err(CliError::Usage(format!(
            "--min-witnesses {min_witnesses}, but only {} witness keys are given",
            witnesses.len()
        )));
    }
    let options = verify::witnessed::Options {
        witnesses,
        min_witnesses,
        max_age: args.max_age,
        now: std::time::SystemTime::now(),
    };
    let verified = checkpoints::verify_checkpoints(path, &args.anchor, shipped, &options)?;
    let report = &verified.report;
    match &report.problem {
        Some(problem) => {
            let code = tampered(path, problem);
            if let Some(archive) = verified.archive.as_ref().filter(|a| *a != problem) {
                println!("also {archive}");
            }
            match verified.walked {
                true => println!(
                    "({} verified before it, {:.2} s)",
                    rows(report.verified),
                    report.elapsed.as_secs_f64()
                ),
                false => println!("(found in the checkpoints, before the rows were read)"),
            }
            Ok(code)
        }
        // Zero checkpoints checked is no evidence either way.
        None if verified.checked == 0 && verified.tree.roots == 0 => {
            eprintln!(
                "error: none of the {} of store {} could be checked against the store (signed before any row was chained, or only on rows retention deleted before the tree existed): nothing was verified",
                checkpoints::count(verified.of_store as u64, "checkpoint"),
                verified.store.as_deref().unwrap_or("?")
            );
            Ok(ExitCode::from(2))
        }
        None => {
            println!("audit store {}: intact", path.display());
            print!("{}", summary(report, &args.anchor));
            print!("{}", checkpoint_summary(&verified));
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// What the checkpoints showed, after the store's summary.
fn checkpoint_summary(verified: &Verified) -> String {
    let mut out = String::new();
    let mut line = |name: &str, value: String| out.push_str(&format!("{name:<14}{value}\n"));
    let shipped = &verified.shipped;
    let mut checked = format!(
        "{} of {} of store {} match their rows",
        verified.checked,
        count(verified.of_store as u64, "checkpoint"),
        verified.store.as_deref().unwrap_or("?")
    );
    if verified.pruned > 0 {
        checked.push_str(&format!(
            "; {} on rows retention deleted since (not checked)",
            verified.pruned
        ));
    }
    if verified.unchecked > 0 {
        checked.push_str(&format!(
            "; {} signed before any row was chained (nothing to check)",
            verified.unchecked
        ));
    }
    line("checkpoints", checked);
    if verified.tree.roots > 0 || verified.tree.leaves > 0 {
        line(
            "tree",
            format!(
                "{} leaves recomputed from the rows; {} signed tree heads match the store's tree",
                verified.tree.leaves, verified.tree.roots
            ),
        );
    }
    if let Some((newest, at)) = &verified.witnessed.newest {
        line(
            "witnessed",
            format!(
                "{} cosigned by enough witnesses; the newest, row_id {}, first cosigned at {}",
                count(verified.witnessed.witnessed as u64, "checkpoint"),
                newest.checkpoint.row_id,
                chrono::DateTime::<chrono::Utc>::from(*at)
                    .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            ),
        );
    }
    if let Some((store, at)) = &verified.succeeded_by {
        line(
            "succeeded by",
            format!(
                "store {store}, of the same node and forwarder, signing from {}: this store was replaced after these checkpoints",
                chrono::DateTime::<chrono::Utc>::from(*at)
                    .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            ),
        );
    }
    if let Some(newest) = &verified.newest {
        let c = &newest.checkpoint;
        line(
            "newest",
            format!(
                "row_id {} (seq {}), signed at {} by {} ({})",
                c.row_id,
                c.seq.map_or("-".to_owned(), |s| s.to_string()),
                checkpoints::time(c),
                newest.signed_by.join(" and "),
                shipped.at(newest.line)
            ),
        );
    }
    let links = &verified.links;
    let mut linked = format!(
        "{} linked to the one before, {} first of the store",
        links.linked, links.first
    );
    if links.missing > 0 {
        linked.push_str(&format!(
            ", {} whose predecessor was not given",
            links.missing
        ));
        if let Some((row_id, at)) = links.first_missing {
            let at = chrono::DateTime::<chrono::Utc>::from(at)
                .to_rfc3339_opts(chrono::SecondsFormat::Nanos, true);
            linked.push_str(&format!(" (the first: row_id {row_id}, signed at {at})"));
        }
    }
    if links.forks > 0 {
        linked.push_str(&format!(
            ", {} (a checkpoint named as predecessor by more than one)",
            count(links.forks as u64, "fork")
        ));
    }
    line("prev links", linked);
    let mut skipped = Vec::new();
    for (store, (n, node)) in &verified.other_stores {
        skipped.push(format!(
            "{} of store {store} (node {node})",
            count(*n as u64, "checkpoint")
        ));
    }
    if shipped.unknown_notes > 0 {
        let signers: Vec<&str> = shipped.unknown.keys().map(String::as_str).collect();
        skipped.push(format!(
            "{} signed by other keys ({})",
            count(shipped.unknown_notes, "note"),
            signers.join(", ")
        ));
    }
    if shipped.duplicates > 0 {
        skipped.push(format!("{} given again", count(shipped.duplicates, "note")));
    }
    if shipped.other_lines > 0 {
        skipped.push(count(shipped.other_lines, "other line"));
    }
    if !skipped.is_empty() {
        line("skipped", skipped.join("; "));
    }
    out
}

/// The success summary, one fact per line.
fn summary(report: &Report, given: &[Anchor]) -> String {
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
    // Only the anchors given: those of checkpoints are counted apart.
    for anchor in report.anchors.iter().filter(|a| given.contains(a)) {
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
        Err(problem) => return Ok(tampered(&path, &problem)),
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
            }
            _ => println!("no chained rows yet in {}", path.display()),
        },
    }
    let (store, note) = checkpoints::newest_note(&path)?;
    println!("store     {store}");
    // The log's origin, for a witness's configuration: from the newest version 2
    // checkpoint (the node is the gateway's, not the store's).
    let origin = note
        .as_deref()
        .and_then(|n| crate::note::split(n).ok())
        .and_then(|(text, _)| crate::store::checkpoint::Checkpoint::parse(text).ok())
        .filter(|c| c.tree.is_some())
        .map(|c| crate::store::checkpoint::origin(&c.node, &c.store));
    match origin {
        Some(origin) => println!("origin    {origin}"),
        None => println!(
            "origin    NODE/eventgate/{store} (NODE: the gateway's node; the first signed checkpoint names it)"
        ),
    }
    match note {
        // As stored: the store's copy proves nothing by itself (whoever can write the
        // store can put an older note here); the copies shipped off the host do.
        Some(note) => {
            println!(
                "checkpoint the newest signed, as stored (check it and the store with `audit verify --key K --checkpoints FILE`):"
            );
            print!("{note}");
        }
        None => println!(
            "checkpoint none signed yet (without a [signing] key none is; with one, the first comes with the first rows)"
        ),
    }
    Ok(ExitCode::SUCCESS)
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
