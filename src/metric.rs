//! What a module says about a metric it records: its name, kind, unit and `# HELP`
//! text. Each module that records metrics keeps them in a `METRICS` table beside the
//! code that records them (`metric_table.rs` in the module's folder, or the module's
//! one file), as it keeps its own settings; `src/admin/metrics.rs` describes every
//! table to the recorder. A leaf, so that any module can name its metrics without
//! reaching up to `admin`.

use metrics::Unit;

/// How a metric is recorded, which is how Prometheus types it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MetricKind {
    Counter,
    Gauge,
    Histogram,
}

/// One metric as its module describes it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Metric {
    pub(crate) name: &'static str,
    pub(crate) kind: MetricKind,
    pub(crate) unit: Unit,
    pub(crate) help: &'static str,
}

impl Metric {
    pub(crate) const fn counter(name: &'static str, unit: Unit, help: &'static str) -> Self {
        Self {
            name,
            kind: MetricKind::Counter,
            unit,
            help,
        }
    }

    pub(crate) const fn gauge(name: &'static str, unit: Unit, help: &'static str) -> Self {
        Self {
            name,
            kind: MetricKind::Gauge,
            unit,
            help,
        }
    }

    pub(crate) const fn histogram(name: &'static str, unit: Unit, help: &'static str) -> Self {
        Self {
            name,
            kind: MetricKind::Histogram,
            unit,
            help,
        }
    }
}
