//! The Prometheus recorder behind every `metrics::` call in the crate: installed once
//! per process, with real histogram buckets in base units, a `# HELP` line for every
//! metric (from the tables the modules that record them keep), and the gauges that
//! are cheaper to compute when scraped than to keep up to date on every event.

use std::sync::OnceLock;
use std::time::SystemTime;

use metrics::{describe_counter, describe_gauge, describe_histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use metrics_util::MetricKindMask;

use super::Observed;
use crate::metric::{Metric, MetricKind};

/// Seconds: from sub-millisecond fsyncs to a minute of delivery latency.
const SECONDS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0, 300.0,
];
/// Events per batch, records per spool write.
const COUNTS: &[f64] = &[
    1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0,
];
/// Bytes per batch.
const BYTES: &[f64] = &[
    256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0, 16777216.0,
];

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Installs the recorder the first time (later calls, e.g. a second gateway in the
/// same process, share it). `None` when another recorder was installed first: its
/// owner gets the metrics, and /metrics says so.
pub(crate) fn install() -> Option<&'static PrometheusHandle> {
    HANDLE
        .get_or_init(|| {
            let recorder = builder().build_recorder();
            let handle = recorder.handle();
            match metrics::set_global_recorder(recorder) {
                Ok(()) => {
                    describe();
                    Some(handle)
                }
                Err(_) => {
                    tracing::warn!(
                        "another metrics recorder is already installed in this process; /metrics will not show eventgate's metrics"
                    );
                    None
                }
            }
        })
        .as_ref()
}

/// Gauges not set again for this long are dropped from `/metrics`. Every gauge is
/// set at each scrape (`refresh`), so only the series of forwarders and upstreams
/// that are gone (a reload removed them) stop being set, and vanish instead of
/// showing their last value forever.
const GAUGE_IDLE: std::time::Duration = std::time::Duration::from_secs(1);

fn builder() -> PrometheusBuilder {
    let new = || PrometheusBuilder::new().idle_timeout(MetricKindMask::GAUGE, Some(GAUGE_IDLE));
    let plain = new();
    let with_buckets = new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS)
        .and_then(|b| b.set_buckets_for_metric(Matcher::Suffix("_events".into()), COUNTS))
        .and_then(|b| b.set_buckets_for_metric(Matcher::Suffix("_records".into()), COUNTS))
        .and_then(|b| b.set_buckets_for_metric(Matcher::Suffix("_bytes".into()), BYTES));
    match with_buckets {
        Ok(builder) => builder,
        // Only empty bucket lists fail, and ours are constants; summaries would still
        // be valid exposition.
        Err(error) => {
            tracing::warn!(%error, "histogram buckets refused; histograms are exported as summaries");
            plain
        }
    }
}

/// Sets the gauges computed at scrape time: queue depth, backlog, oldest pending
/// event per forwarder, spool use, subscribers and readiness.
pub(crate) fn refresh(observed: &Observed) {
    let now = SystemTime::now();
    let spool = observed.spool.as_ref();
    let next_seq = spool.map(|s| s.next_seq());
    for forwarder in &observed.forwarders.list() {
        let name = forwarder.name.to_string();
        let (events, bytes) = forwarder.depth();
        metrics::gauge!("eventgate_forwarder_queue_events", "forwarder" => name.clone())
            .set(events as f64);
        metrics::gauge!("eventgate_forwarder_queue_bytes", "forwarder" => name.clone())
            .set(bytes as f64);
        if let (Some(spool), Some(next_seq)) = (spool, next_seq) {
            let backlog = next_seq.saturating_sub(spool.cursor(&forwarder.name));
            metrics::gauge!("eventgate_forwarder_backlog_events", "forwarder" => name.clone())
                .set(backlog as f64);
        }
        let health = forwarder.health();
        let age = health
            .oldest_pending
            .and_then(|t| now.duration_since(t).ok())
            .map_or(0.0, |age| age.as_secs_f64());
        metrics::gauge!("eventgate_forwarder_oldest_unacked_age_seconds", "forwarder" => name.clone())
            .set(age);
        let ready = super::readiness::forwarder(&forwarder.name, &health, observed.readiness, now)
            .problem
            .is_none();
        metrics::gauge!("eventgate_forwarder_ready", "forwarder" => name)
            .set(f64::from(u8::from(ready)));
    }
    if let Some(spool) = spool {
        let stats = spool.stats();
        metrics::gauge!("eventgate_spool_bytes").set(stats.bytes as f64);
        metrics::gauge!("eventgate_spool_segments").set(stats.segments as f64);
        metrics::gauge!("eventgate_spool_max_bytes").set(spool.settings().max_bytes.0 as f64);
        if let Some(disk) = spool.disk() {
            metrics::gauge!("eventgate_spool_disk_free_bytes").set(disk.free as f64);
            metrics::gauge!("eventgate_spool_disk_min_free_bytes").set(disk.required as f64);
            metrics::gauge!("eventgate_spool_disk_reserve_reached")
                .set(f64::from(u8::from(disk.low)));
        }
    }
    metrics::gauge!("eventgate_subscribers").set(observed.exchange.subscriber_count() as f64);
    metrics::gauge!("eventgate_resumers").set(crate::resume::active() as f64);
    for open in &observed.connections {
        open.publish();
    }
    metrics::gauge!("eventgate_subscribers_unmatched_events")
        .set(observed.exchange.unmatched_events() as f64);
    // Set where they change too; here so that they stay while nothing changes.
    for source in &observed.sources {
        let held = source.assignment().partitions.len();
        metrics::gauge!("eventgate_source_assigned_partitions", "source" => source.name.clone())
            .set(held as f64);
        metrics::gauge!("eventgate_source_starved", "source" => source.name.clone())
            .set(f64::from(u8::from(source.starved().is_some())));
    }
    // Also before the first connection, which the upstream task's own updates miss.
    for status in observed.upstreams.statuses() {
        let connected = f64::from(u8::from(status.is_connected()));
        metrics::gauge!("eventgate_upstream_connected", "upstream" => status.name).set(connected);
    }
    let ready = super::readiness::check(observed).ready();
    metrics::gauge!("eventgate_ready").set(f64::from(u8::from(ready)));
}

/// Every module's table of the metrics it records, each kept beside the code that
/// records them (docs/observability.md lists the same names; a test holds them to it).
pub(crate) const TABLES: &[&[Metric]] = &[
    crate::exchange::metric_table::METRICS,
    crate::connections::METRICS,
    crate::resume::metric_table::METRICS,
    crate::reload::metric_table::METRICS,
    super::metric_table::METRICS,
    crate::pipeline::metric_table::METRICS,
    crate::spool::metric_table::METRICS,
    crate::upstream::metric_table::METRICS,
    crate::signer::METRICS,
    crate::forward::file::metric_table::METRICS,
    crate::forward::kafka::metric_table::METRICS,
    crate::forward::sqlite::metric_table::METRICS,
    crate::forward::postgres::metric_table::METRICS,
    crate::correlate::metric_table::METRICS,
    crate::source::metric_table::METRICS,
    crate::witness::metric_table::METRICS,
];

/// Gives the recorder every metric's unit and `# HELP` text.
fn describe() {
    for metric in TABLES.iter().flat_map(|table| table.iter()) {
        let Metric {
            name,
            kind,
            unit,
            help,
        } = *metric;
        match kind {
            MetricKind::Counter => describe_counter!(name, unit, help),
            MetricKind::Gauge => describe_gauge!(name, unit, help),
            MetricKind::Histogram => describe_histogram!(name, unit, help),
        }
    }
}

#[cfg(test)]
#[path = "metrics_tests.rs"]
mod tests;
