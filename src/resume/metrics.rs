//! The resumers' counters, looked up once per gateway (a labelled `counter!` hashes
//! its key on every call). Described in `src/admin/metrics.rs`.

use super::history::Origin;

pub(crate) struct Metrics {
    pub(crate) active: metrics::Gauge,
    spool: metrics::Counter,
    store: metrics::Counter,
    pub(crate) switched: metrics::Counter,
    pub(crate) cut_off: metrics::Counter,
    pub(crate) missing: metrics::Counter,
}

impl Metrics {
    pub(crate) fn new() -> Self {
        Self {
            active: metrics::gauge!("eventgate_resumers"),
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
