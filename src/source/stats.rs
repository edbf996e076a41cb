//! What a running source has done, for `/status`, `/readyz` and `eventgate status`.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

/// Shared between a source's consumer (each restart's) and the admin endpoint.
#[derive(Debug, Default)]
pub(crate) struct SourceStats {
    pub(crate) name: String,
    pub(crate) topics: Vec<String>,
    pub(crate) group: String,
    taken_in: AtomicU64,
    skipped: AtomicU64,
    restarts: AtomicU64,
    last_error: Mutex<Option<String>>,
    health: Mutex<SourceHealth>,
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
    pub(crate) fn new(name: &str, topics: &[String], group: &str) -> Self {
        Self {
            name: name.to_owned(),
            topics: topics.to_vec(),
            group: group.to_owned(),
            ..Self::default()
        }
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
