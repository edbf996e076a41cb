//! `/status`: one JSON document with what `eventgate status` and `top` show. The
//! gateway builds it from the same state readiness reads, so the command needs no
//! parser for the metrics text and sees what metrics cannot carry (why an upstream
//! is down, a forwarder's last error).

use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use super::Observed;
use super::readiness;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Status {
    pub version: String,
    pub uptime_seconds: f64,
    pub ready: bool,
    /// One line per part that is not ready (the /readyz lines).
    pub problems: Vec<String>,
    /// The sequence number the next accepted event will get.
    pub next_seq: u64,
    pub subscribers: u64,
    pub spool: Option<SpoolStatus>,
    pub forwarders: Vec<ForwarderStatus>,
    pub upstreams: Vec<UpstreamStatus>,
    /// Absent in documents of versions before sources.
    #[serde(default)]
    pub sources: Vec<SourceStatus>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct SpoolStatus {
    pub bytes: u64,
    pub max_bytes: u64,
    pub high_water_bytes: u64,
    pub segments: u64,
    /// Free space on its file system and the reserve (`spool.min_free`), when on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_free_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_free_bytes: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct ForwarderStatus {
    pub name: String,
    /// `delivering`, `retrying`, `spilling` or `stopped`.
    pub state: String,
    pub ready: bool,
    pub queue_events: u64,
    pub queue_bytes: u64,
    pub queue_limit_events: u64,
    /// Events in the spool at or after its cursor.
    pub backlog_events: Option<u64>,
    pub oldest_pending_seconds: Option<f64>,
    /// Totals since the gateway started.
    pub delivered: u64,
    pub retries: u64,
    pub dropped: u64,
    pub dead_lettered: u64,
    pub failing_attempts: Option<u32>,
    pub last_error: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct UpstreamStatus {
    pub name: String,
    pub address: String,
    pub connected: bool,
    /// The readiness line: connected for how long, or why not.
    pub detail: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct SourceStatus {
    pub name: String,
    pub topics: Vec<String>,
    pub group: String,
    /// `reading`, `failing`, `restarting` or `stopped` (empty in documents of
    /// versions before source readiness).
    #[serde(default)]
    pub state: String,
    /// False when `/readyz` names it.
    #[serde(default = "ready_by_default")]
    pub ready: bool,
    /// Totals since the gateway started.
    pub taken_in: u64,
    pub skipped: u64,
    pub restarts: u64,
    /// The last thing that went wrong: a skipped message (where it is, and why), a
    /// consumer error, a restart.
    pub last_error: Option<String>,
    /// The partitions its consumer holds (empty in documents of versions before
    /// static membership, as when it holds none).
    #[serde(default)]
    pub partitions: Vec<PartitionRef>,
    /// Since how long it has held no partition; absent while it holds some.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unassigned_seconds: Option<f64>,
    /// The group generation and member id of its last assignment or revocation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member_id: Option<String>,
    /// Its `group.instance.id` (static membership), when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_id: Option<String>,
}

/// One partition of a topic.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PartitionRef {
    pub topic: String,
    pub partition: i32,
}

fn ready_by_default() -> bool {
    true
}

pub(crate) fn collect(observed: &Observed) -> Status {
    let now = SystemTime::now();
    let readiness = readiness::check(observed);
    let spool = observed.spool.as_ref();
    let next_seq = observed.exchange.next_seq();
    let forwarders = observed
        .forwarders
        .list()
        .iter()
        .map(|f| {
            let health = f.health();
            let part = readiness::forwarder(&f.name, &health, observed.readiness, now);
            let state = if health.closed {
                "stopped"
            } else if health.failing.is_some() {
                "retrying"
            } else if health.spilling_since.is_some() {
                "spilling"
            } else {
                "delivering"
            };
            let (queue_events, queue_bytes) = f.depth();
            ForwarderStatus {
                name: f.name.to_string(),
                state: state.into(),
                ready: part.problem.is_none(),
                queue_events: queue_events as u64,
                queue_bytes: queue_bytes as u64,
                queue_limit_events: f.capacity().0 as u64,
                backlog_events: spool.map(|s| next_seq.saturating_sub(s.cursor(&f.name))),
                oldest_pending_seconds: health
                    .oldest_pending
                    .and_then(|t| now.duration_since(t).ok())
                    .map(|age| age.as_secs_f64()),
                delivered: health.delivered,
                retries: health.retries,
                dropped: health.dropped,
                dead_lettered: health.dead_lettered,
                failing_attempts: health.failing.as_ref().map(|f| f.attempts),
                last_error: health.failing.map(|f| f.last_error),
            }
        })
        .collect();
    let upstreams = observed
        .upstreams
        .statuses()
        .into_iter()
        .map(|s| UpstreamStatus {
            connected: s.is_connected(),
            detail: s.to_string(),
            name: s.name,
            address: s.address,
        })
        .collect();
    let sources = observed
        .sources
        .iter()
        .map(|s| {
            let (taken_in, skipped, restarts, last_error) = s.counts();
            let part = readiness::source(s, observed.readiness, now);
            let (state, _) = readiness::source_state(&s.health(), s.starved().is_some(), now);
            let assignment = s.assignment();
            SourceStatus {
                name: s.name.clone(),
                topics: s.topics.clone(),
                group: s.group.clone(),
                state: state.into(),
                ready: part.problem.is_none(),
                taken_in,
                skipped,
                restarts,
                last_error,
                partitions: assignment
                    .partitions
                    .iter()
                    .map(|(topic, partition)| PartitionRef {
                        topic: topic.clone(),
                        partition: *partition,
                    })
                    .collect(),
                unassigned_seconds: assignment
                    .empty_since
                    .map(|(_, since)| now.duration_since(since).map_or(0.0, |d| d.as_secs_f64())),
                generation: assignment.generation,
                member_id: assignment.member_id,
                instance_id: s.instance_id.clone(),
            }
        })
        .collect();
    Status {
        version: env!("CARGO_PKG_VERSION").into(),
        uptime_seconds: now
            .duration_since(observed.started)
            .map_or(0.0, |d| d.as_secs_f64()),
        ready: readiness.ready(),
        problems: readiness.problems(),
        next_seq,
        subscribers: observed.exchange.subscriber_count() as u64,
        spool: spool.map(|s| {
            let stats = s.stats();
            let disk = s.disk();
            SpoolStatus {
                bytes: stats.bytes,
                max_bytes: s.settings().max_bytes.0,
                high_water_bytes: s.settings().high_water_bytes(),
                segments: stats.segments as u64,
                disk_free_bytes: disk.as_ref().map(|d| d.free),
                min_free_bytes: disk.as_ref().map(|d| d.required),
            }
        }),
        forwarders,
        upstreams,
        sources,
    }
}
