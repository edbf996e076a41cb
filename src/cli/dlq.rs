//! `eventgate dlq list|retry|purge`: the dead-letter store from the command line.
//! Safe while a gateway runs on the same store (WAL; each command is one short
//! transaction); `retry` only marks entries, the gateway's workers redeliver them.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::SystemTime;

use clap::{Args, Subcommand, ValueEnum};
use serde_json::{Value, json};

use super::CliError;
use crate::config::Config;
use crate::deadletter::DeadLetterSettings;
use crate::deadletter::{Entry, Store};
use crate::event::Workload;
use crate::render;

#[derive(Debug, Args)]
pub struct DlqArgs {
    #[command(subcommand)]
    pub command: DlqCommand,
}

#[derive(Debug, Subcommand)]
pub enum DlqCommand {
    /// List dead letters, oldest first.
    List(ListArgs),
    /// Request redelivery: the gateway's worker for each entry's forwarder picks it up
    /// (within `dead_letter.poll_interval`, or at the next start).
    Retry(RetryArgs),
    /// Remove dead letters for good.
    Purge(PurgeArgs),
}

/// Where the store is. Without any of these: ./data/deadletters.db, as `serve` uses
/// with no configuration.
#[derive(Debug, Args)]
#[group(multiple = false)]
pub struct Location {
    /// The gateway's data directory (the store is <DIR>/deadletters.db).
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// The gateway's config file: its `dead_letter.path` and forwarder names.
    #[arg(long, short = 'c', value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The dead-letter database file itself.
    #[arg(long, value_name = "PATH")]
    pub db: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Format {
    /// Aligned columns, the error cut short.
    Table,
    /// One JSON object per line: the event as the file forwarder writes it, plus a
    /// `dead_letter` object.
    Json,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub location: Location,
    /// Only this forwarder's entries.
    #[arg(long, value_name = "NAME")]
    pub forwarder: Option<String>,
    /// At most this many entries.
    #[arg(long, value_name = "N")]
    pub limit: Option<u64>,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

#[derive(Debug, Args)]
pub struct RetryArgs {
    #[command(flatten)]
    pub location: Location,
    /// Only this forwarder's entries.
    #[arg(long, value_name = "NAME")]
    pub forwarder: Option<String>,
    /// Only these entries (the ID column of `dlq list`); repeatable.
    #[arg(long = "id", value_name = "N", num_args = 1.., value_parser = clap::value_parser!(i64).range(1..))]
    pub ids: Vec<i64>,
}

#[derive(Debug, Args)]
pub struct PurgeArgs {
    #[command(flatten)]
    pub location: Location,
    /// Only this forwarder's entries.
    #[arg(long, value_name = "NAME", conflicts_with = "all")]
    pub forwarder: Option<String>,
    /// Every forwarder's entries (needed to purge without --forwarder).
    #[arg(long)]
    pub all: bool,
    /// Only entries that died before this UTC time, e.g. 2024-05-01T10:00:00Z.
    #[arg(long, value_name = "RFC3339", value_parser = parse_time)]
    pub before: Option<SystemTime>,
}

fn parse_time(text: &str) -> Result<SystemTime, String> {
    humantime::parse_rfc3339(text)
        .map_err(|e| format!("{text:?} is not an RFC 3339 UTC time like 2024-05-01T10:00:00Z: {e}"))
}

/// The store's path, and the configuration when one was named.
fn locate(location: &Location) -> Result<(PathBuf, Option<Config>), CliError> {
    if let Some(db) = &location.db {
        return Ok((db.clone(), None));
    }
    if let Some(file) = &location.config {
        let config = Config::load(file)?;
        return Ok((config.dead_letter_path(), Some(config)));
    }
    let data_dir = location
        .data_dir
        .clone()
        .unwrap_or_else(|| Config::default().data_dir);
    Ok((data_dir.join(DeadLetterSettings::default().path), None))
}

async fn open(location: &Location) -> Result<(Store, Option<Config>), CliError> {
    let (path, config) = locate(location)?;
    Ok((Store::open(path, false).await?, config))
}

/// A forwarder name that has no entries is most likely a typo: say which exist.
async fn check_forwarder(store: &Store, forwarder: Option<&str>) -> Result<(), CliError> {
    let Some(name) = forwarder else {
        return Ok(());
    };
    if store.has_forwarder(name).await? {
        return Ok(());
    }
    let present = store.forwarders().await?;
    let present = if present.is_empty() {
        "the store is empty".to_owned()
    } else {
        let names: Vec<String> = present.iter().map(|(f, n)| format!("{f} ({n})")).collect();
        format!("forwarders with dead letters: {}", names.join(", "))
    };
    Err(CliError::Usage(format!(
        "no dead letters for forwarder {name:?} in {}; {present}",
        store.path().display()
    )))
}

pub(super) async fn run(args: DlqArgs) -> Result<ExitCode, CliError> {
    match args.command {
        DlqCommand::List(args) => list(args).await,
        DlqCommand::Retry(args) => retry(args).await,
        DlqCommand::Purge(args) => purge(args).await,
    }
}

async fn list(args: ListArgs) -> Result<ExitCode, CliError> {
    let (store, config) = open(&args.location).await?;
    check_forwarder(&store, args.forwarder.as_deref()).await?;
    let entries = store.list(args.forwarder.clone(), args.limit).await?;
    let mut lines = Vec::with_capacity(entries.len() + 2);
    match args.format {
        Format::Json => lines.extend(entries.iter().map(|e| json_line(e).to_string())),
        Format::Table if entries.is_empty() => {
            lines.push(format!("no dead letters in {}", store.path().display()));
        }
        Format::Table => lines.extend(table(&entries)),
    }
    let mut out = std::io::stdout().lock();
    // A closed pipe (`| head`) is the reader saying it has enough.
    for line in &lines {
        if writeln!(out, "{line}").is_err() {
            return Ok(ExitCode::SUCCESS);
        }
    }
    if let Some(config) = config {
        for (forwarder, count) in unconfigured(&store, &config).await? {
            eprintln!(
                "note: forwarder {forwarder:?} is not in the configuration; its {count} dead letter(s) stay here until purged (`dlq retry` cannot deliver them)"
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Forwarders with entries that the configuration does not run.
async fn unconfigured(store: &Store, config: &Config) -> Result<Vec<(String, u64)>, CliError> {
    let mut present = store.forwarders().await?;
    present.retain(|(name, _)| !config.forwarders.iter().any(|f| &f.name == name));
    Ok(present)
}

async fn retry(args: RetryArgs) -> Result<ExitCode, CliError> {
    let (store, config) = open(&args.location).await?;
    check_forwarder(&store, args.forwarder.as_deref()).await?;
    let given = args.ids.len();
    let requested = store.request(args.forwarder, args.ids).await?;
    println!("requested redelivery of {requested} dead letter(s)");
    if given > requested {
        eprintln!(
            "note: {} of the {given} given id(s) matched no dead entry (unknown, of another forwarder, or already requested)",
            given - requested
        );
    }
    if let Some(config) = config {
        for (forwarder, _) in unconfigured(&store, &config).await? {
            eprintln!(
                "note: forwarder {forwarder:?} is not in the configuration; its entries stay requested until a gateway runs it"
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn purge(args: PurgeArgs) -> Result<ExitCode, CliError> {
    if args.forwarder.is_none() && !args.all {
        return Err(CliError::Usage(
            "refusing to purge every forwarder's dead letters without --all; name one with --forwarder NAME".into(),
        ));
    }
    let (store, _) = open(&args.location).await?;
    check_forwarder(&store, args.forwarder.as_deref()).await?;
    let removed = store.purge(args.forwarder, args.before).await?;
    println!("removed {removed} dead letter(s)");
    Ok(ExitCode::SUCCESS)
}

/// `container` and `pod` as the file forwarder's JSON lines show them: each with the
/// keys the record has, left out when it has none.
fn workload_json(object: &mut serde_json::Map<String, Value>, workload: &Workload) {
    let mut container = serde_json::Map::new();
    if !workload.image.is_empty() {
        container.insert("image".into(), json!(workload.image));
    }
    if let Some(kind) = &workload.kind {
        container.insert("kind".into(), json!(kind));
    }
    if !workload.labels.is_empty() {
        container.insert("labels".into(), json!(workload.labels));
    }
    if let Some(name) = &workload.container_name {
        container.insert("name".into(), json!(name));
    }
    let mut pod = serde_json::Map::new();
    for (key, value) in [
        ("name", &workload.pod_name),
        ("namespace", &workload.pod_namespace),
        ("uid", &workload.pod_uid),
    ] {
        if let Some(value) = value {
            pod.insert(key.into(), json!(value));
        }
    }
    for (key, fields) in [("container", container), ("pod", pod)] {
        if !fields.is_empty() {
            object.insert(key.into(), Value::Object(fields));
        }
    }
}

/// The event as the file forwarder's JSON lines show it, plus what the store knows.
fn json_line(entry: &Entry) -> Value {
    let mut object = match entry.decode_envelope() {
        Ok(envelope) => match serde_json::from_str::<Value>(&render::envelope_json(&envelope)) {
            Ok(Value::Object(object)) => object,
            // envelope_json always writes one object; keep the line well-formed anyway.
            _ => serde_json::Map::new(),
        },
        Err(error) => {
            let mut object = serde_json::Map::new();
            object.insert("envelope_error".into(), json!(error.to_string()));
            object
        }
    };
    object.insert("id".into(), json!(entry.event_id));
    object.insert("seq".into(), json!(entry.seq));
    let publisher = entry.publisher.as_ref().map_or(Value::Null, |p| {
        serde_json::from_str(&p.to_json()).unwrap_or(Value::Null)
    });
    object.insert("publisher".into(), publisher);
    object.insert("origin".into(), json!(entry.origin.label()));
    if let Some(clock) = entry.origin.clock() {
        object.insert("origin_clock".into(), json!(clock.label()));
    }
    if let Some(from) = entry.origin.witness() {
        object.insert("reconciled_from".into(), json!(from.label()));
    }
    if let Some(workload) = &entry.workload {
        workload_json(&mut object, workload);
        if let Some(reason) = &workload.reason {
            object.insert("reason".into(), json!(reason));
        }
    }
    object.insert("node".into(), json!(entry.node));
    object.insert(
        "dead_letter".into(),
        json!({
            "id": entry.id,
            "forwarder": entry.forwarder,
            "source": entry.source,
            "received_at": entry.received_at,
            "reason": entry.reason.as_str(),
            "error": entry.error,
            "attempts": entry.attempts,
            "first_attempt_at": entry.first_attempt_at,
            "last_attempt_at": entry.last_attempt_at,
            "dead_at": entry.dead_at,
            "retry_requested_at": entry.retry_requested_at,
            "state": entry.state.as_str(),
        }),
    );
    Value::Object(object)
}

const ERROR_WIDTH: usize = 60;

/// Whole seconds are enough to tell entries apart on screen; JSON has the rest.
fn short_time(text: &str) -> String {
    match text.get(..19) {
        Some(seconds) => format!("{seconds}Z"),
        None => text.to_owned(),
    }
}

fn truncate(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(width - 1).collect();
    cut.push('…');
    cut
}

fn table(entries: &[Entry]) -> Vec<String> {
    let header = [
        "ID",
        "FORWARDER",
        "SEQ",
        "EVENT ID",
        "TOPIC",
        "NAMESPACE",
        "REASON",
        "ATTEMPTS",
        "FIRST ATTEMPT",
        "LAST ATTEMPT",
        "DEAD AT",
        "RETRY",
        "ERROR",
    ]
    .map(String::from);
    let mut rows = vec![header.to_vec()];
    for entry in entries {
        let (topic, namespace) = match entry.decode_envelope() {
            Ok(envelope) => (envelope.topic, envelope.namespace),
            Err(_) => ("(undecodable)".into(), String::new()),
        };
        rows.push(vec![
            entry.id.to_string(),
            entry.forwarder.clone(),
            entry.seq.to_string(),
            entry.event_id.clone(),
            topic,
            namespace,
            entry.reason.as_str().into(),
            entry.attempts.to_string(),
            short_time(&entry.first_attempt_at),
            short_time(&entry.last_attempt_at),
            short_time(&entry.dead_at),
            entry.state.as_str().into(),
            truncate(&entry.error.replace('\n', " "), ERROR_WIDTH),
        ]);
    }
    let columns = header.len();
    let widths: Vec<usize> = (0..columns)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    rows.iter()
        .map(|row| {
            let mut line = String::new();
            for (c, cell) in row.iter().enumerate() {
                if c + 1 == columns {
                    line.push_str(cell);
                } else {
                    let pad = widths[c] - cell.chars().count();
                    line.push_str(cell);
                    line.push_str(&" ".repeat(pad + 2));
                }
            }
            line
        })
        .collect()
}

#[cfg(test)]
#[path = "dlq_tests.rs"]
mod tests;
