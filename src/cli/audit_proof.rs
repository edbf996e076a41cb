//! `eventgate audit prove` and `audit check-proof`: proofs a user can hand over.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{ArgGroup, Args};
use rusqlite::types::Value;

use super::CliError;
use super::query::StoreLocation;
use crate::note::Verifier;
use crate::store::chain::{COLUMNS, decode_record};
use crate::store::checkpoint::Checkpoint;
use crate::store::prove::{self, ProveError, Which};
use crate::tlog::check::{CheckError, Checked, Shown, check};
use crate::tlog::cosignature::WitnessKey;
use crate::tlog::proof_file::{MAX_FILE, ProofFile};
use crate::tlog::tree_head::encode_hash;

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("what").required(true).args(["row", "seq", "id", "from"])))]
pub struct ProveArgs {
    #[command(flatten)]
    pub location: StoreLocation,
    /// Prove the event stored at this row_id.
    #[arg(long, value_name = "ROW_ID")]
    pub row: Option<i64>,
    /// Prove the event with this seq (refused when the store holds several).
    #[arg(long, value_name = "SEQ")]
    pub seq: Option<i64>,
    /// Prove the event with this id.
    #[arg(long, value_name = "EVENT_ID")]
    pub id: Option<String>,
    /// The signed checkpoint to prove the event against (a file holding the note);
    /// default: the newest the store keeps.
    #[arg(long, value_name = "NOTE_FILE", conflicts_with = "from")]
    pub checkpoint: Option<PathBuf>,
    /// A consistency proof from this older signed checkpoint (a file holding the
    /// note) ...
    #[arg(long, value_name = "NOTE_FILE")]
    pub from: Option<PathBuf>,
    /// ... to this newer one; default: the newest the store keeps.
    #[arg(long, value_name = "NOTE_FILE", requires = "from")]
    pub to: Option<PathBuf>,
    /// Where to write the proof (default: stdout). Written aside and renamed into place.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct CheckProofArgs {
    /// The proof file, `-` for stdin.
    pub file: PathBuf,
    /// A verifier key of the log (NAME+KEY_ID+KEY, as `audit keygen` printed it). May
    /// be given more than once (across a rotation).
    #[arg(long = "key", value_name = "VERIFIER_KEY", required = true)]
    pub keys: Vec<String>,
    /// A witness's key (NAME+KEY_ID+KEY, as `witness keygen` printed it) whose
    /// cosignature counts. May be given more than once.
    #[arg(long = "witness-key", value_name = "WITNESS_KEY")]
    pub witness_keys: Vec<String>,
    /// How many of the given witnesses must have cosigned the (newer) tree head
    /// (default: 1 when witness keys are given, else 0).
    #[arg(long, value_name = "N")]
    pub min_witnesses: Option<usize>,
}

pub(super) fn run_prove(args: ProveArgs) -> Result<ExitCode, CliError> {
    let path = args.location.path();
    let conn = crate::store::open_reader(&path, std::time::Duration::from_secs(5))
        .map_err(|e| CliError::Prove(ProveError::Store(crate::errors::chain(&e))))?;
    let newest = || -> Result<String, CliError> {
        let store = crate::store::checkpoint::head(&conn)
            .map_err(ProveError::Sqlite)?
            .store;
        crate::store::checkpoint::newest_note(&conn, &store)
            .map_err(ProveError::Sqlite)?
            .ok_or_else(|| {
                CliError::Prove(ProveError::Store(format!(
                    "{} keeps no signed checkpoint yet; give one with --checkpoint (or --to)",
                    path.display()
                )))
            })
    };
    let file = match &args.from {
        Some(from) => {
            let old = read_note(from)?;
            let new = match &args.to {
                Some(to) => read_note(to)?,
                None => newest()?,
            };
            prove::consistency(&conn, &old, &new)?
        }
        None => {
            let which = match (&args.row, &args.seq, &args.id) {
                (Some(row), _, _) => Which::Row(*row),
                (_, Some(seq), _) => Which::Seq(*seq),
                (_, _, Some(id)) => Which::Id(id.clone()),
                _ => return Err(CliError::Usage("give --row, --seq, --id or --from".into())),
            };
            let note = match &args.checkpoint {
                Some(file) => read_note(file)?,
                None => newest()?,
            };
            prove::inclusion(&conn, &which, &note)?
        }
    };
    let text = file.to_text();
    match &args.out {
        Some(out) => {
            write_atomically(out, text.as_bytes()).map_err(|source| CliError::Io {
                context: format!("cannot write {}", out.display()),
                source,
            })?;
            eprintln!("wrote {}", out.display());
        }
        None => print!("{text}"),
    }
    Ok(ExitCode::SUCCESS)
}

/// A note file: the note itself, or a checkpoint event's JSON line holding it.
fn read_note(path: &Path) -> Result<String, CliError> {
    let text = read_bounded(path)?;
    if text.trim_start().starts_with('{') {
        let line: serde_json::Value = serde_json::from_str(text.trim()).map_err(|e| {
            CliError::Usage(format!(
                "{}: neither a signed note nor a checkpoint's JSON line: {e}",
                path.display()
            ))
        })?;
        return line["event"]["note"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| {
                CliError::Usage(format!(
                    "{}: a JSON line without event.note (not a /eventgate/audit/checkpoint line)",
                    path.display()
                ))
            });
    }
    Ok(text)
}

fn read_bounded(path: &Path) -> Result<String, CliError> {
    let io = |source| CliError::Io {
        context: format!("cannot read {}", path.display()),
        source,
    };
    let mut bytes = Vec::new();
    let limit = MAX_FILE as u64 + 1;
    if path == Path::new("-") {
        std::io::stdin()
            .take(limit)
            .read_to_end(&mut bytes)
            .map_err(io)?;
    } else {
        std::fs::File::open(path)
            .map_err(io)?
            .take(limit)
            .read_to_end(&mut bytes)
            .map_err(io)?;
    }
    if bytes.len() > MAX_FILE {
        return Err(CliError::Usage(format!(
            "{} is larger than the {MAX_FILE} bytes a proof or note file may have",
            path.display()
        )));
    }
    String::from_utf8(bytes)
        .map_err(|e| CliError::Usage(format!("{} is not UTF-8: {e}", path.display())))
}

fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut file = tempfile::NamedTempFile::new_in(dir)?;
    // A proof is for handing over, not a secret (the temporary file starts 0600).
    std::fs::set_permissions(
        file.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )?;
    file.write_all(bytes)?;
    file.as_file().sync_all()?;
    file.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Not verified: the proof does not hold, or the file cannot be checked.
const FAILED: u8 = 1;
const UNUSABLE: u8 = 2;

pub(super) fn run_check_proof(args: CheckProofArgs) -> Result<ExitCode, CliError> {
    let unusable = |message: String| {
        eprintln!("error: {message}");
        Ok(ExitCode::from(UNUSABLE))
    };
    let mut keys = Vec::new();
    for (number, text) in (1..).zip(&args.keys) {
        match Verifier::from_text(text) {
            Ok(key) => keys.push(key),
            Err(e) => return unusable(format!("--key number {number} cannot be used: {e}")),
        }
    }
    let mut witnesses = Vec::new();
    for (number, text) in (1..).zip(&args.witness_keys) {
        match WitnessKey::from_text(text) {
            Ok(key) => witnesses.push(key),
            Err(e) => {
                return unusable(format!("--witness-key number {number} cannot be used: {e}"));
            }
        }
    }
    let min = args
        .min_witnesses
        .unwrap_or(usize::from(!witnesses.is_empty()));
    if min > witnesses.len() {
        return unusable(format!(
            "--min-witnesses {min} but only {} witness keys given",
            witnesses.len()
        ));
    }
    let text = match read_bounded(&args.file) {
        Ok(text) => text,
        Err(e) => return unusable(e.to_string()),
    };
    let file = match ProofFile::parse(&text) {
        Ok(file) => file,
        Err(e) => return unusable(format!("{}: {e}", args.file.display())),
    };
    match check(&file, &keys, &witnesses, min) {
        Ok(Shown::Included {
            index,
            record,
            head,
        }) => {
            println!("inclusion proof {}: verified", args.file.display());
            println!("leaf      {index} of the tree of {} leaves", head.head.size);
            describe_record(index, &record, &head);
            describe_head("tree head", &head);
            Ok(ExitCode::SUCCESS)
        }
        Ok(Shown::Consistent { old, new }) => {
            println!("consistency proof {}: verified", args.file.display());
            println!(
                "the tree of {} leaves is a prefix of the tree of {} leaves",
                old.head.size, new.head.size
            );
            describe_head("older", &old);
            describe_head("newer", &new);
            Ok(ExitCode::SUCCESS)
        }
        Err(error) if error.is_tampering() => {
            println!("proof {}: FAILED", args.file.display());
            println!("{error}");
            Ok(ExitCode::from(FAILED))
        }
        Err(error @ CheckError::Unusable { .. }) | Err(error) => unusable(error.to_string()),
    }
}

fn describe_head(label: &str, head: &Checked) {
    println!(
        "{label:<9} {} {} {}",
        head.head.origin,
        head.head.size,
        encode_hash(&head.head.root)
    );
    println!("signed by {}", head.signed_by.join(", "));
    for (witness, time) in &head.witnessed {
        let at =
            chrono::DateTime::<chrono::Utc>::from_timestamp(i64::try_from(*time).unwrap_or(0), 0)
                .map_or_else(|| time.to_string(), |t| t.to_rfc3339());
        println!("witness   {witness}, cosigned at {at}");
    }
    if let Ok(checkpoint) = Checkpoint::parse(&head.text) {
        println!(
            "node      {}, store {}, signed at {}",
            checkpoint.node,
            checkpoint.store,
            chrono::DateTime::<chrono::Utc>::from(checkpoint.time)
                .to_rfc3339_opts(chrono::SecondsFormat::Nanos, true)
        );
    }
}

/// The row a record is, when it is one of an audit store's.
fn describe_record(index: u64, record: &[u8], head: &Checked) {
    let Some(values) = decode_record(record) else {
        println!(
            "record    {} bytes (not an eventgate audit row)",
            record.len()
        );
        return;
    };
    let column = |name: &str| -> String {
        let i = COLUMNS
            .iter()
            .position(|c| *c == name)
            .unwrap_or(usize::MAX);
        match values.get(i) {
            Some(Value::Text(t)) => t.clone(),
            Some(Value::Integer(n)) => n.to_string(),
            Some(Value::Null) | None => "-".to_owned(),
            Some(other) => format!("{other:?}"),
        }
    };
    if let Ok(Checkpoint {
        tree: Some(facts), ..
    }) = Checkpoint::parse(&head.text)
    {
        let row_id = i64::try_from(index)
            .ok()
            .and_then(|i| facts.first_row_id.checked_add(i));
        if let Some(row_id) = row_id {
            println!("row_id    {row_id}");
        }
    }
    println!("seq       {}", column("seq"));
    println!("id        {}", column("id"));
    println!(
        "time      {} (received {})",
        column("timestamp"),
        column("received_at")
    );
    println!("namespace {}", column("namespace"));
    println!("topic     {}", column("topic"));
    println!("event     {}", column("event"));
}
