//! One reconcile through the real gateway: `eventgate serve --upstream` with the
//! default configuration (the `file` and `sqlite` forwarders), timed from what it
//! recorded itself, with its memory read from `/proc`.
//!
//! The gateway is started with its upstream's socket path absent, so it starts,
//! finds nothing to connect to and waits; its RSS is read and its peak reset then.
//! A symlink to containerd's socket put at that path wakes it (it watches the
//! socket's directory) and the reconcile runs. The times are the gateway's own:
//! `received_at` of the connected and reconciled markers in its audit store, and the
//! state snapshot's modification time for the save that ends the reconcile.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use rusqlite::{Connection, OptionalExtension};
use serde_json::Value;

use super::super::BenchError;
use super::super::daemon::Daemon;
use crate::markers::{CONNECTED_TOPIC, RECONCILED_TOPIC};

/// The upstream's name in the gateway (and its snapshot's file name).
pub(crate) const UPSTREAM: &str = "node";

/// How long a reconcile of a large node may take on a loaded machine before the
/// benchmark gives up.
const RECONCILE_TIMEOUT: Duration = Duration::from_secs(180);

/// What one gateway start recorded and cost.
#[derive(Clone, Debug)]
pub(crate) struct GatewayRun {
    /// `received_at` of the connected marker to that of the reconciled marker: the
    /// lists, the settle, the diff and recording its events.
    pub to_marker: Duration,
    /// The marker's `list_duration` (connecting for the lists and reading them).
    pub list_duration: Duration,
    /// The marker's `recorded`, by topic.
    pub recorded: BTreeMap<String, u64>,
    /// Rows stored with origin `reconciled` between the two markers.
    pub stored: u64,
    pub baseline: bool,
    /// Whether the state snapshot was saved after the marker, as a reconcile ends.
    pub saved: bool,
    /// The managers above containerd the reconcile asked (the marker's `managers`).
    pub managers: Vec<ManagerSeen>,
    /// The gateway's RSS once started, before its upstream appeared.
    pub rss_before: Option<u64>,
    /// Its peak RSS from then until the snapshot was saved (since its start when the
    /// peak could not be reset: see `peak_since_start`).
    pub peak_rss: Option<u64>,
    pub peak_since_start: bool,
    /// CPU time (user + system) the gateway spent from the trigger to the save.
    pub cpu: Option<Duration>,
}

impl GatewayRun {
    pub(crate) fn events(&self) -> u64 {
        self.recorded.values().sum()
    }

    /// The marker's entry for manager `name` (`cri`, `docker`).
    pub(crate) fn manager(&self, name: &str) -> Option<&ManagerSeen> {
        self.managers.iter().find(|m| m.name == name)
    }
}

/// One entry of the reconciled marker's `managers`: how asking a manager went.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ManagerSeen {
    pub name: String,
    /// `listed`, `absent` or `failed`.
    pub state: String,
    pub error: String,
    pub sandboxes: u64,
    pub containers: u64,
    /// Per-container status calls the reconcile made.
    pub status_calls: u64,
}

/// Starts a gateway on `dir` (its data directory kept between calls), lets it
/// reconcile with the containerd at `containerd_socket` through `link`, and stops it.
pub(crate) async fn reconcile_once(
    eventgate: &Path,
    dir: &Path,
    link: &Path,
    containerd_socket: &Path,
) -> Result<GatewayRun, BenchError> {
    remove_link(link)?;
    let upstream = format!("{UPSTREAM}={}", link.display());
    let gateway = Daemon::eventgate(eventgate, dir, &["--upstream", &upstream]).await?;
    let data = dir.join("eventgate");
    let audit = data.join("audit.db");
    let snapshot = crate::reconcile::snapshot::path(&data, UPSTREAM);
    let since = last_row(&audit)?;

    let rss_before = gateway.rss();
    let peak_since_start = !gateway.reset_peak_rss();
    let cpu_before = gateway.cpu_time();
    let triggered = SystemTime::now();
    std::os::unix::fs::symlink(containerd_socket, link).map_err(|source| BenchError::Io {
        context: format!("cannot link {} to containerd's socket", link.display()),
        source,
    })?;

    let found = wait_reconciled(&audit, since, dir).await;
    // The peak covers the whole reconcile, which ends with the save after the marker.
    let saved = match &found {
        Ok(_) => wait_saved(&snapshot, triggered).await,
        Err(_) => false,
    };
    let peak_rss = gateway.peak_rss();
    let cpu = gateway
        .cpu_time()
        .zip(cpu_before)
        .map(|(after, before)| after.saturating_sub(before));
    gateway.stop(Duration::from_secs(10)).await;
    remove_link(link)?;
    let found = found?;
    Ok(GatewayRun {
        to_marker: found
            .reconciled_at
            .duration_since(found.connected_at)
            .unwrap_or_default(),
        list_duration: found.list_duration,
        recorded: found.recorded,
        stored: found.stored,
        baseline: found.baseline,
        saved,
        managers: found.managers,
        rss_before,
        peak_rss,
        peak_since_start,
        cpu,
    })
}

fn remove_link(link: &Path) -> Result<(), BenchError> {
    match std::fs::remove_file(link) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => Err(BenchError::Io {
            context: format!("cannot remove {}", link.display()),
            source: error,
        }),
        _ => Ok(()),
    }
}

/// The two markers of one reconcile, as stored.
struct Found {
    connected_at: SystemTime,
    reconciled_at: SystemTime,
    list_duration: Duration,
    recorded: BTreeMap<String, u64>,
    stored: u64,
    baseline: bool,
    managers: Vec<ManagerSeen>,
}

fn store_error(what: &'static str) -> impl Fn(rusqlite::Error) -> BenchError {
    move |source| BenchError::Sqlite { what, source }
}

fn open(audit: &Path) -> Option<Connection> {
    crate::store::open_reader(audit, Duration::from_secs(5)).ok()
}

/// The last row stored before the trigger (0 for a fresh store).
fn last_row(audit: &Path) -> Result<i64, BenchError> {
    let Some(conn) = open(audit) else {
        return Ok(0);
    };
    conn.query_row("SELECT coalesce(max(row_id), 0) FROM events", [], |r| {
        r.get(0)
    })
    .map_err(store_error("reading the last row"))
}

async fn wait_reconciled(audit: &Path, since: i64, dir: &Path) -> Result<Found, BenchError> {
    let deadline = Instant::now() + RECONCILE_TIMEOUT;
    loop {
        if let Some(conn) = open(audit)
            && let Some(found) = markers(&conn, since)?
        {
            return Ok(found);
        }
        if Instant::now() > deadline {
            let log = std::fs::read_to_string(dir.join("eventgate.log")).unwrap_or_default();
            return Err(BenchError::Timeout {
                what: format!(
                    "the gateway recorded no reconciled marker within {RECONCILE_TIMEOUT:?}; its log:\n{log}"
                ),
            });
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn markers(conn: &Connection, since: i64) -> Result<Option<Found>, BenchError> {
    let reconciled: Option<(i64, String, String)> = conn
        .query_row(
            "SELECT row_id, received_at, event FROM events \
             WHERE row_id > ?1 AND topic = ?2 ORDER BY row_id LIMIT 1",
            rusqlite::params![since, RECONCILED_TOPIC],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()
        .map_err(store_error("reading the reconciled marker"))?;
    let Some((reconciled_row, reconciled_at, event)) = reconciled else {
        return Ok(None);
    };
    let (connected_row, connected_at): (i64, String) = conn
        .query_row(
            "SELECT row_id, received_at FROM events \
             WHERE row_id > ?1 AND row_id < ?2 AND topic = ?3 ORDER BY row_id DESC LIMIT 1",
            rusqlite::params![since, reconciled_row, CONNECTED_TOPIC],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .map_err(store_error("reading the connected marker"))?;
    let stored: i64 = conn
        .query_row(
            "SELECT count(*) FROM events WHERE row_id > ?1 AND row_id < ?2 AND origin = 'reconciled'",
            rusqlite::params![connected_row, reconciled_row],
            |r| r.get(0),
        )
        .map_err(store_error("counting reconciled rows"))?;
    let event: Value = serde_json::from_str(&event).map_err(|e| BenchError::Failed {
        what: format!("the reconciled marker's JSON does not parse: {e}"),
    })?;
    Ok(Some(Found {
        connected_at: time(&connected_at)?,
        reconciled_at: time(&reconciled_at)?,
        list_duration: duration(&event["list_duration"]).unwrap_or_default(),
        recorded: event["recorded"]
            .as_object()
            .map(|map| {
                map.iter()
                    .map(|(topic, n)| (topic.clone(), number(n)))
                    .collect()
            })
            .unwrap_or_default(),
        stored: stored.max(0) as u64,
        baseline: event["baseline"].as_bool().unwrap_or(false),
        managers: event["managers"]
            .as_array()
            .map(|managers| managers.iter().map(manager).collect())
            .unwrap_or_default(),
    }))
}

fn manager(value: &Value) -> ManagerSeen {
    let text = |field: &str| value[field].as_str().unwrap_or_default().to_owned();
    ManagerSeen {
        name: text("name"),
        state: text("state"),
        error: text("error"),
        sandboxes: number(&value["sandboxes"]),
        containers: number(&value["containers"]),
        status_calls: number(&value["status_calls"]),
    }
}

fn time(text: &str) -> Result<SystemTime, BenchError> {
    humantime::parse_rfc3339(text).map_err(|e| BenchError::Failed {
        what: format!("stored time {text:?} does not parse: {e}"),
    })
}

/// A `google.protobuf.Duration` as the store's JSON has it (`{"nanos", "seconds"}`),
/// or as protobuf's JSON mapping writes it ("0.123456789s").
fn duration(value: &Value) -> Option<Duration> {
    if let Some(text) = value.as_str() {
        let seconds: f64 = text.strip_suffix('s')?.parse().ok()?;
        return Duration::try_from_secs_f64(seconds).ok();
    }
    let seconds = u64::try_from(value["seconds"].as_i64()?).ok()?;
    let nanos = u32::try_from(value["nanos"].as_i64()?).ok()?;
    Some(Duration::new(seconds, nanos))
}

/// A uint64 as protobuf JSON may write it: a number or a string.
fn number(value: &Value) -> u64 {
    value
        .as_u64()
        .or_else(|| value.as_str().and_then(|s| s.parse().ok()))
        .unwrap_or(0)
}

/// Whether the snapshot file was written after `after` within a while (the marker is
/// recorded just before the save, so this is short).
async fn wait_saved(snapshot: &Path, after: SystemTime) -> bool {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let modified = std::fs::metadata(snapshot).and_then(|m| m.modified()).ok();
        if modified.is_some_and(|modified| modified >= after) {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
