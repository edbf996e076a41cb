//! What a running source has done, for `/status` and `eventgate status`.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

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

    pub(crate) fn took_in(&self) {
        self.taken_in.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn skipped_one(&self) {
        self.skipped.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn restarted(&self) {
        self.restarts.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn failed(&self, error: String) {
        *self.last_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(error);
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
