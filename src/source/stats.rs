//! What a running source has done, for `/status`, `/readyz` and `eventgate status`.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

/// Shared between a source's consumer (each restart's) and the admin endpoint.
#[derive(Debug, Default)]
pub(crate) struct SourceStats {
    pub(crate) name: String,
    pub(crate) topics: Vec<String>,
    pub(crate) group: String,
    /// The consumer's `group.instance.id`, when it has one.
    pub(crate) instance_id: Option<String>,
    taken_in: AtomicU64,
    skipped: AtomicU64,
    restarts: AtomicU64,
    last_error: Mutex<Option<String>>,
    health: Mutex<SourceHealth>,
    assignment: Mutex<Assignment>,
    starved: Mutex<Option<Starved>>,
}

/// The partitions a source's consumer holds, as its rebalance callbacks said.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Assignment {
    /// (topic, partition), in order.
    pub partitions: BTreeSet<(String, i32)>,
    /// The group generation of the last assignment or revocation, once librdkafka
    /// has said.
    pub generation: Option<i32>,
    /// The consumer's member id in that generation.
    pub member_id: Option<String>,
    /// Since when the consumer has held no partition (its start, or the revocation
    /// of its last one); `None` while it holds some. On the monotonic clock for
    /// the decision, and on the wall clock to show.
    pub empty_since: Option<(tokio::time::Instant, SystemTime)>,
}

/// A source that has held no partition for longer than its group's session
/// timeout while messages of its group wait unread in partitions whose committed
/// offsets do not move (src/source/starvation.rs decides).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Starved {
    /// Since when it has held no partition.
    pub since: SystemTime,
    pub session_timeout: Duration,
    /// Unread messages in those partitions.
    pub unread: u64,
    /// The partitions (topic, partition) whose messages wait, in order.
    pub stuck: Vec<(String, i32)>,
}

/// Whether the consumer runs, and since when it has been failing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct SourceHealth {
    /// Its consumer ended and the supervisor is starting a new one.
    pub restarting: bool,
    /// The supervisor has ended (the gateway is stopping): nothing reads.
    pub stopped: bool,
    /// The current streak of consumer errors and restarts; `None` once a message
    /// has been read since.
    pub failing: Option<SourceFailing>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SourceFailing {
    /// The streak's first error.
    pub since: SystemTime,
    /// Its latest error.
    pub last: SystemTime,
    /// Errors and restarts in the streak.
    pub errors: u64,
    pub last_error: String,
}

impl SourceStats {
    pub(crate) fn new(
        name: &str,
        topics: &[String],
        group: &str,
        instance_id: Option<String>,
    ) -> Self {
        Self {
            name: name.to_owned(),
            topics: topics.to_vec(),
            group: group.to_owned(),
            instance_id,
            ..Self::default()
        }
    }

    /// A consumer starts: it holds nothing yet.
    pub(crate) fn assignment_reset(&self) {
        *self.lock_assignment() = Assignment {
            empty_since: Some((tokio::time::Instant::now(), SystemTime::now())),
            ..Assignment::default()
        };
    }

    /// Partitions were assigned: all it holds now, or (`incremental`, the
    /// cooperative protocol) more of them. Returns how many it holds.
    pub(crate) fn assigned(
        &self,
        partitions: &[(String, i32)],
        incremental: bool,
        generation: Option<i32>,
        member_id: Option<String>,
    ) -> usize {
        let mut assignment = self.lock_assignment();
        if !incremental {
            assignment.partitions.clear();
        }
        assignment.partitions.extend(partitions.iter().cloned());
        assignment.generation = generation.or(assignment.generation);
        assignment.member_id = member_id.or(assignment.member_id.take());
        if !assignment.partitions.is_empty() {
            assignment.empty_since = None;
        } else if assignment.empty_since.is_none() {
            assignment.empty_since = Some((tokio::time::Instant::now(), SystemTime::now()));
        }
        assignment.partitions.len()
    }

    /// Partitions were revoked (or lost); `None` revokes all of them. Returns how
    /// many it still holds.
    pub(crate) fn revoked(&self, partitions: Option<&[(String, i32)]>) -> usize {
        let mut assignment = self.lock_assignment();
        match partitions {
            Some(partitions) => {
                for partition in partitions {
                    assignment.partitions.remove(partition);
                }
            }
            None => assignment.partitions.clear(),
        }
        if assignment.partitions.is_empty() && assignment.empty_since.is_none() {
            assignment.empty_since = Some((tokio::time::Instant::now(), SystemTime::now()));
        }
        assignment.partitions.len()
    }

    pub(crate) fn assignment(&self) -> Assignment {
        self.lock_assignment().clone()
    }

    /// Since when (monotonic) the consumer has held no partition; `None` while it
    /// holds some.
    pub(crate) fn held_nothing_since(&self) -> Option<tokio::time::Instant> {
        self.lock_assignment().empty_since.map(|(since, _)| since)
    }

    fn lock_assignment(&self) -> std::sync::MutexGuard<'_, Assignment> {
        self.assignment.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn set_starved(&self, starved: Option<Starved>) {
        *self.starved.lock().unwrap_or_else(|e| e.into_inner()) = starved;
    }

    pub(crate) fn starved(&self) -> Option<Starved> {
        self.starved
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// A message was read (taken in or skipped): the consumer works, and a streak of
    /// errors is over.
    pub(crate) fn read_one(&self) {
        self.lock_health().failing = None;
    }

    pub(crate) fn took_in(&self) {
        self.taken_in.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn skipped_one(&self) {
        self.skipped.fetch_add(1, Ordering::Relaxed);
    }

    /// The consumer ended while the gateway runs; the supervisor starts another.
    pub(crate) fn restarted(&self, error: String) {
        self.restarts.fetch_add(1, Ordering::Relaxed);
        self.lock_health().restarting = true;
        self.consumer_failed(error);
    }

    /// A new consumer has started after a restart.
    pub(crate) fn running_again(&self) {
        self.lock_health().restarting = false;
    }

    /// The supervisor has ended: the gateway is stopping.
    pub(crate) fn stopped(&self) {
        self.lock_health().stopped = true;
    }

    /// A consumer error, a restart, a consumer that cannot start: starts or extends
    /// the streak readiness looks at.
    pub(crate) fn consumer_failed(&self, error: String) {
        self.consumer_failed_at(error, SystemTime::now());
    }

    pub(crate) fn consumer_failed_at(&self, error: String, now: SystemTime) {
        {
            let mut health = self.lock_health();
            let failing = health.failing.get_or_insert_with(|| SourceFailing {
                since: now,
                last: now,
                errors: 0,
                last_error: String::new(),
            });
            failing.last = now;
            failing.errors += 1;
            failing.last_error.clone_from(&error);
        }
        self.failed(error);
    }

    /// The last thing that went wrong, a skipped message included (which is not a
    /// consumer failure).
    pub(crate) fn failed(&self, error: String) {
        *self.last_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(error);
    }

    pub(crate) fn health(&self) -> SourceHealth {
        self.lock_health().clone()
    }

    fn lock_health(&self) -> std::sync::MutexGuard<'_, SourceHealth> {
        self.health.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `(taken in, skipped, restarts, last error)` since the gateway started.
    pub(crate) fn counts(&self) -> (u64, u64, u64, Option<String>) {
        (
            self.taken_in.load(Ordering::Relaxed),
            self.skipped.load(Ordering::Relaxed),
            self.restarts.load(Ordering::Relaxed),
            self.last_error
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn partitions(list: &[i32]) -> Vec<(String, i32)> {
        list.iter().map(|p| ("fleet".to_owned(), *p)).collect()
    }

    fn held(stats: &SourceStats) -> Vec<i32> {
        stats
            .assignment()
            .partitions
            .iter()
            .map(|(_, p)| *p)
            .collect()
    }

    #[test]
    fn assignments_and_revocations_are_kept_with_since_when_it_holds_nothing() {
        let stats = SourceStats::new("fleet", &["fleet".to_owned()], "central", None);
        stats.assignment_reset();
        let started = stats
            .held_nothing_since()
            .expect("a new consumer holds nothing");
        // The eager protocol: each assignment is the whole of it.
        assert_eq!(
            stats.assigned(&partitions(&[2, 0]), false, Some(1), Some("m".into())),
            2
        );
        assert_eq!(held(&stats), [0, 2]);
        assert_eq!(stats.held_nothing_since(), None);
        assert_eq!(stats.assignment().generation, Some(1));
        assert_eq!(stats.revoked(Some(&partitions(&[0, 2]))), 0);
        let revoked = stats
            .held_nothing_since()
            .expect("nothing held after the revocation");
        assert!(revoked >= started);
        assert_eq!(stats.assigned(&partitions(&[1]), false, Some(2), None), 1);
        assert_eq!(held(&stats), [1]);
        assert_eq!(
            stats.assignment().member_id.as_deref(),
            Some("m"),
            "kept when librdkafka does not say"
        );
        // The cooperative protocol: more, then fewer.
        assert_eq!(stats.assigned(&partitions(&[3]), true, Some(3), None), 2);
        assert_eq!(stats.revoked(Some(&partitions(&[1]))), 1);
        assert_eq!(held(&stats), [3]);
        assert_eq!(stats.held_nothing_since(), None);
        // A failed rebalance gives up everything.
        assert_eq!(stats.revoked(None), 0);
        assert!(stats.held_nothing_since().is_some());
        // An empty assignment starts no new "since".
        let since = stats.held_nothing_since();
        assert_eq!(stats.assigned(&[], false, Some(4), None), 0);
        assert_eq!(stats.held_nothing_since(), since);
    }
}
