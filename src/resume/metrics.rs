//! The resumers' counters, looked up once per gateway (a labelled `counter!` hashes
//! its key on every call). Described in `metric_table.rs`.

use std::sync::atomic::{AtomicU64, Ordering};

use super::history::Origin;

/// Resumed subscriptions open in this process; `/metrics` sets `eventgate_resumers`
/// from it at each scrape (gauges not set for a second are dropped there).
static ACTIVE: AtomicU64 = AtomicU64::new(0);

pub(crate) fn active() -> u64 {
    ACTIVE.load(Ordering::Relaxed)
}

/// Counts one resumer as open until dropped.
pub(crate) struct Active(());

impl Active {
    pub(crate) fn open() -> Self {
        ACTIVE.fetch_add(1, Ordering::Relaxed);
        Active(())
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        ACTIVE.fetch_sub(1, Ordering::Relaxed);
    }
}

pub(crate) struct Metrics {
    spool: metrics::Counter,
    store: metrics::Counter,
    pub(crate) switched: metrics::Counter,
    pub(crate) cut_off: metrics::Counter,
    pub(crate) missing: metrics::Counter,
}

impl Metrics {
    pub(crate) fn new() -> Self {
        Self {
            spool: metrics::counter!("eventgate_resume_replayed_total", "from" => "spool"),
            store: metrics::counter!("eventgate_resume_replayed_total", "from" => "store"),
            switched: metrics::counter!("eventgate_resume_switched_total"),
            cut_off: metrics::counter!("eventgate_resume_cut_off_total"),
            missing: metrics::counter!("eventgate_resume_missing_total"),
        }
    }

    pub(crate) fn replayed(&self, from: Origin) -> &metrics::Counter {
        match from {
            Origin::Spool => &self.spool,
            Origin::Store => &self.store,
        }
    }

    pub(crate) fn refused(reason: &'static str) {
        metrics::counter!("eventgate_resume_refused_total", "reason" => reason).increment(1);
    }
}
