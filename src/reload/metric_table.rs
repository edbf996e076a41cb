//! The metric reloads record.

use metrics::Unit::Count;

use crate::metric::Metric;

pub(crate) const METRICS: &[Metric] = &[Metric::counter(
    "eventgate_config_reloads_total",
    Count,
    "Configuration reloads (SIGHUP, POST /reload), by result: ok or rejected.",
)];
