//! The end check: by event id, what each sink holds against what was acknowledged.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use super::super::BenchError;
use crate::store;

/// Container id -> rows of exit events in the SQLite store.
pub(super) fn sqlite_counts(db: &Path) -> Result<HashMap<String, u32>, BenchError> {
    let sqlite = |what| move |source| BenchError::Sqlite { what, source };
    let conn = store::open_reader(db, Duration::from_secs(10))?;
    let mut statement = conn
        .prepare(
            "SELECT json_extract(event, '$.container_id'), count(*) FROM events \
             WHERE topic = '/tasks/exit' GROUP BY 1",
        )
        .map_err(sqlite("preparing the count by id"))?;
    let rows = statement
        .query_map([], |r| {
            Ok((
                r.get::<_, Option<String>>(0)?.unwrap_or_default(),
                r.get::<_, i64>(1)?,
            ))
        })
        .map_err(sqlite("counting by id"))?;
    let mut counts = HashMap::new();
    for row in rows {
        let (id, n) = row.map_err(sqlite("reading a count"))?;
        counts.insert(id, n.max(0) as u32);
    }
    Ok(counts)
}

/// Container id -> lines of exit events in the file forwarder's JSON-lines file.
pub(super) fn file_counts(path: &Path) -> Result<HashMap<String, u32>, BenchError> {
    let text = match std::fs::read(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(source) => {
            return Err(BenchError::Io {
                context: format!("cannot read {}", path.display()),
                source,
            });
        }
    };
    let mut counts = HashMap::new();
    for line in text.split(|b| *b == b'\n') {
        // Cheap filter first: the file holds every line the gateway wrote.
        if !line.windows(11).any(|w| w == b"/tasks/exit") {
            continue;
        }
        let Ok(value) = serde_json::from_slice::<serde_json::Value>(line) else {
            continue;
        };
        if value["topic"] != "/tasks/exit" {
            continue;
        }
        if let Some(id) = value["event"]["container_id"].as_str() {
            *counts.entry(id.to_owned()).or_default() += 1;
        }
    }
    Ok(counts)
}

/// One sink's figures against the acknowledged ids.
#[derive(Clone, Debug, Default)]
pub(super) struct SinkCheck {
    /// Acknowledged ids the sink does not hold.
    pub lost: usize,
    /// Acknowledged ids the sink holds more than once.
    pub duplicated: usize,
    /// Ids of the soak's publishers the sink holds that were not acknowledged (a
    /// Publish that timed out or was cut off after the event was durable).
    pub unacknowledged: usize,
    /// A few lost ids, for the report.
    pub lost_examples: Vec<String>,
}

pub(super) fn compare(acked: &[String], counts: &HashMap<String, u32>, prefix: &str) -> SinkCheck {
    let mut check = SinkCheck::default();
    for id in acked {
        match counts.get(id).copied().unwrap_or(0) {
            0 => {
                check.lost += 1;
                if check.lost_examples.len() < 5 {
                    check.lost_examples.push(id.clone());
                }
            }
            1 => {}
            _ => check.duplicated += 1,
        }
    }
    let acked_count = acked.len();
    let ours = counts.keys().filter(|id| id.starts_with(prefix)).count();
    check.unacknowledged = ours.saturating_sub(acked_count - check.lost);
    check
}

/// `eventgate audit verify --db`: the store's hash chain, by the command users run.
pub(super) async fn verify_chain(
    eventgate: &Path,
    db: &Path,
) -> Result<(bool, String), BenchError> {
    let out = tokio::process::Command::new(eventgate)
        .args(["audit", "verify", "--db"])
        .arg(db)
        .output()
        .await
        .map_err(|source| BenchError::Spawn {
            what: "eventgate audit verify",
            source,
        })?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok((out.status.success(), text.trim().to_owned()))
}
