//! Is a source starved: has its consumer held no partition for longer than its
//! group's session timeout while messages of its group wait unread?
//!
//! A member without partitions is normal for a while (a rebalance, a standby
//! gateway in a group with more members than partitions) and cannot tell on its
//! own whether anything is wrong. What it can see is the group's progress: per
//! partition of the subscribed topics, the high watermark and the group's
//! committed offset. Messages beyond a committed offset that has not moved for a
//! whole session timeout are read by no one; a broker gives the partitions of a
//! silent member to others within a session timeout, so a member that still holds
//! none then is being kept out (tansu 0.6.0 can leave a restarted member there for
//! good; see docs/fleet.md). A standby beside members that read is not starved:
//! their committed offsets move.
//!
//! While its consumer holds nothing, each source samples its group every quarter
//! of the session timeout (1 to 15 s), on a blocking thread with a deadline, so a
//! broker that does not answer stalls neither the runtime nor the next check.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::stats::{SourceStats, Starved};

/// One partition of a subscribed topic, as the brokers and the group's
/// coordinator answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PartitionLag {
    pub topic: String,
    pub partition: i32,
    /// The group's committed offset; `None` when it has committed none.
    pub committed: Option<i64>,
    pub low: i64,
    pub high: i64,
}

/// Where samples come from: the brokers (src/source/kafka/backlog.rs), or a
/// script in tests.
pub(crate) trait Backlog: Send + Sync + 'static {
    /// Every partition of the subscribed topics. Blocking: it asks the brokers.
    fn sample(&self) -> Result<Vec<PartitionLag>, String>;
}

/// The decision, from samples: remembers since when each partition's committed
/// offset has been what it is.
pub(crate) struct Judge {
    session_timeout: Duration,
    /// `start = "latest"`: a partition without a committed offset has nothing
    /// unread (a new member would start at its end).
    start_latest: bool,
    seen: HashMap<(String, i32), (Option<i64>, Instant)>,
}

impl Judge {
    pub(crate) fn new(session_timeout: Duration, start_latest: bool) -> Self {
        Self {
            session_timeout,
            start_latest,
            seen: HashMap::new(),
        }
    }

    /// The consumer holds partitions again: what was seen meanwhile is no
    /// evidence for the next time it holds none.
    pub(crate) fn forget(&mut self) {
        self.seen.clear();
    }

    /// The verdict on a sample taken at `now`, for a consumer that has held no
    /// partition since `held_nothing_since`. `since_wall` is that moment on the
    /// wall clock, to show.
    pub(crate) fn judge(
        &mut self,
        held_nothing_since: Instant,
        since_wall: SystemTime,
        sample: &[PartitionLag],
        now: Instant,
    ) -> Option<Starved> {
        let mut stuck = Vec::new();
        let mut unread = 0u64;
        let mut present = std::collections::HashSet::new();
        for lag in sample {
            let key = (lag.topic.clone(), lag.partition);
            present.insert(key.clone());
            let unchanged_since = match self.seen.get(&key) {
                Some((committed, since)) if *committed == lag.committed => *since,
                _ => {
                    self.seen.insert(key.clone(), (lag.committed, now));
                    now
                }
            };
            let waiting = match lag.committed {
                Some(committed) => lag.high.saturating_sub(committed),
                None if self.start_latest => 0,
                None => lag.high.saturating_sub(lag.low),
            };
            if waiting > 0 && now.duration_since(unchanged_since) >= self.session_timeout {
                stuck.push(key);
                unread += waiting.unsigned_abs();
            }
        }
        // Partitions no longer there (a deleted topic) are no evidence either.
        self.seen.retain(|key, _| present.contains(key));
        if now.duration_since(held_nothing_since) < self.session_timeout || stuck.is_empty() {
            return None;
        }
        stuck.sort();
        Some(Starved {
            since: since_wall,
            session_timeout: self.session_timeout,
            unread,
            stuck,
        })
    }
}

/// Between two samples: a quarter of the session timeout, 1 to 15 s.
pub(crate) fn check_interval(session_timeout: Duration) -> Duration {
    (session_timeout / 4).clamp(Duration::from_secs(1), Duration::from_secs(15))
}

/// How long a sample may take before the check gives up on it (and waits for the
/// same one at the next check, rather than starting another).
const SAMPLE_TIMEOUT: Duration = Duration::from_secs(10);

/// Watches one source until `cancel`: samples its group while its consumer holds
/// no partition and keeps the verdict in `stats` (for `/readyz` and `/status`) and
/// in the gauge `eventgate_source_starved`.
pub(crate) async fn watch(
    stats: Arc<SourceStats>,
    backlog: Arc<dyn Backlog>,
    session_timeout: Duration,
    start_latest: bool,
    cancel: CancellationToken,
) {
    let gauge = metrics::gauge!("eventgate_source_starved", "source" => stats.name.clone());
    gauge.set(0.0);
    let every = check_interval(session_timeout);
    let mut judge = Judge::new(session_timeout, start_latest);
    let mut inflight: Option<JoinHandle<Result<Vec<PartitionLag>, String>>> = None;
    let mut failing = false;
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(every) => {}
        }
        if stats.held_nothing_since().is_none() {
            judge.forget();
            verdict(&stats, &gauge, None);
            continue;
        }
        let mut sampling = inflight.take().unwrap_or_else(|| {
            let backlog = Arc::clone(&backlog);
            tokio::task::spawn_blocking(move || backlog.sample())
        });
        let answer = tokio::select! {
            () = cancel.cancelled() => return,
            answer = tokio::time::timeout(SAMPLE_TIMEOUT, &mut sampling) => answer,
        };
        let sample = match answer {
            Ok(Ok(Ok(sample))) => sample,
            Ok(Ok(Err(error))) => {
                if !failing {
                    tracing::warn!(source = %stats.name, %error, "cannot see the group's unread messages; the source's readiness keeps its last verdict until it can");
                    failing = true;
                }
                continue;
            }
            Ok(Err(error)) => {
                tracing::error!(source = %stats.name, %error, "the check of the group's unread messages failed");
                continue;
            }
            Err(_) => {
                if !failing {
                    tracing::warn!(source = %stats.name, timeout = ?SAMPLE_TIMEOUT, "the brokers did not say in time how many messages the group has unread; waiting for their answer at the next check");
                    failing = true;
                }
                inflight = Some(sampling);
                continue;
            }
        };
        failing = false;
        // The consumer may have got partitions while the brokers answered.
        let Some((since, since_wall)) = stats.assignment().empty_since else {
            judge.forget();
            verdict(&stats, &gauge, None);
            continue;
        };
        let starved = judge.judge(since, since_wall, &sample, Instant::now());
        verdict(&stats, &gauge, starved);
    }
}

/// Keeps the verdict, logging when it changes.
fn verdict(stats: &SourceStats, gauge: &metrics::Gauge, starved: Option<Starved>) {
    let before = stats.starved();
    match (&before, &starved) {
        (None, Some(now)) => tracing::warn!(
            source = %stats.name,
            group = %stats.group,
            unread = now.unread,
            partitions = %partition_list(&now.stuck),
            session_timeout = ?now.session_timeout,
            "the source holds no partition while its group's messages wait unread, longer than the session timeout: not ready"
        ),
        (Some(_), None) => {
            tracing::info!(source = %stats.name, group = %stats.group, "the source is no longer starved")
        }
        _ => {}
    }
    gauge.set(f64::from(u8::from(starved.is_some())));
    stats.set_starved(starved);
}

/// `fleet/0, fleet/1`: partitions as logs and readiness show them.
pub(crate) fn partition_list(partitions: &[(String, i32)]) -> String {
    partitions
        .iter()
        .map(|(topic, partition)| format!("{topic}/{partition}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
#[path = "starvation_tests.rs"]
mod tests;
