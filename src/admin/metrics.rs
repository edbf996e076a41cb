//! The Prometheus recorder behind every `metrics::` call in the crate: installed once
//! per process, with real histogram buckets in base units, a `# HELP` line for every
//! metric, and the gauges that are cheaper to compute when scraped than to keep up to
//! date on every event.

use std::sync::OnceLock;
use std::time::SystemTime;

use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use metrics_util::MetricKindMask;

use super::Observed;

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
    // Also before the first connection, which the upstream task's own updates miss.
    for status in observed.upstreams.statuses() {
        let connected = f64::from(u8::from(status.is_connected()));
        metrics::gauge!("eventgate_upstream_connected", "upstream" => status.name).set(connected);
    }
    let ready = super::readiness::check(observed).ready();
    metrics::gauge!("eventgate_ready").set(f64::from(u8::from(ready)));
}

/// `# HELP` text for every metric the crate records (the README's table says the same).
fn describe() {
    use Unit::{Bytes, Count, Seconds};
    let counters: &[(&'static str, &'static str)] = &[
        (
            "eventgate_events_received_total",
            "Events taken into the gateway's order (sequenced, spooled, routed), by source.",
        ),
        (
            "eventgate_events_accepted_total",
            "Events acknowledged to their publisher (durable in the spool), by source.",
        ),
        (
            "eventgate_events_rejected_total",
            "Publish/Forward calls and upstream events refused, by reason.",
        ),
        (
            "eventgate_subscribers_cut_off_total",
            "Subscribers cut off with RESOURCE_EXHAUSTED for falling too far behind.",
        ),
        (
            "eventgate_subscribers_filter_cut_off_total",
            "Subscribers cut off with RESOURCE_EXHAUSTED because their filters could not keep up with the events.",
        ),
        (
            "eventgate_subscribe_rejected_total",
            "Subscribe calls refused, by reason.",
        ),
        (
            "eventgate_resume_replayed_total",
            "Stored events sent to resumed subscriptions (eventgate.services.events.v1 Subscribe), by where they were read: spool or store.",
        ),
        (
            "eventgate_resume_switched_total",
            "Resumed subscriptions that caught up and joined the live stream at their boundary seq.",
        ),
        (
            "eventgate_resume_cut_off_total",
            "Resumed subscriptions cut off with RESOURCE_EXHAUSTED (live events overflowed exchange.subscriber_queue while they caught up or read); the status names the seq to resume after.",
        ),
        (
            "eventgate_resume_refused_total",
            "Resumed subscriptions refused at their start, by reason: out_of_range (older than anything kept), future_position (a seq not given out yet), invalid_argument.",
        ),
        (
            "eventgate_resume_missing_total",
            "Seqs a resumed subscription passed that neither the spool nor the audit store held (dropped under spool.full = \"drop_oldest\", or dead-lettered by the sqlite forwarder).",
        ),
        (
            "eventgate_config_reloads_total",
            "Configuration reloads (SIGHUP, POST /reload), by result: ok or rejected.",
        ),
        (
            "eventgate_reload_refused_total",
            "POST /reload requests refused, by reason: disabled (no admin.reload_token_file) or unauthorized (missing or wrong token).",
        ),
        (
            "eventgate_limit_rejections_total",
            "Calls refused by an exchange.limits setting, by limit.",
        ),
        (
            "eventgate_events_forwarded_total",
            "Events a forwarder delivered (acknowledged by its sink).",
        ),
        (
            "eventgate_forwarder_retries_total",
            "Failed delivery attempts that were retried, per forwarder.",
        ),
        (
            "eventgate_forwarder_dropped_total",
            "Events a forwarder never delivered, by reason (its overflow policy, closed, spool_full, shutdown).",
        ),
        (
            "eventgate_forwarder_failed_total",
            "Events a forwarder gave up on after its errors, by reason (permanent, retries_exhausted).",
        ),
        (
            "eventgate_forwarder_panics_total",
            "Panics in a forwarder's code while delivering, per forwarder (each narrows the batch towards the event that causes it).",
        ),
        (
            "eventgate_forwarder_split_batches_total",
            "Batches a forwarder refused permanently, delivered again in halves to find the events it refuses.",
        ),
        (
            "eventgate_forwarder_restarts_total",
            "Forwarder workers restarted after a panic outside a delivery.",
        ),
        (
            "eventgate_forwarder_checkpoint_failures_total",
            "Checkpoints that could not make a forwarder's output durable; what they covered is sent again from the spool.",
        ),
        (
            "eventgate_forwarder_poison_events_total",
            "Events set aside as dead letters because the forwarder panicked on them (panicked) or the process died on them twice (crashed).",
        ),
        (
            "eventgate_forwarder_spilled_total",
            "Events routed to a forwarder whose queue was full, delivered from the spool instead.",
        ),
        (
            "eventgate_forwarder_blocked_timeouts_total",
            "Publishers refused after waiting block_timeout for room in a forwarder's queue.",
        ),
        (
            "eventgate_dead_letters_total",
            "Events recorded in the dead-letter store, by forwarder and reason.",
        ),
        (
            "eventgate_dead_letter_redelivered_total",
            "Dead letters redelivered successfully, per forwarder.",
        ),
        (
            "eventgate_dead_letter_write_failures_total",
            "Failed writes to the dead-letter store.",
        ),
        (
            "eventgate_spool_fsyncs_total",
            "fdatasync calls on spool segments.",
        ),
        (
            "eventgate_spool_corrupt_records_total",
            "Damaged spool records found and moved aside at start.",
        ),
        (
            "eventgate_spool_dropped_records_total",
            "Records deleted from a full spool (full = drop_oldest) before this forwarder delivered them.",
        ),
        (
            "eventgate_spool_full_timeouts_total",
            "Publishers refused after waiting block_timeout for room in the spool.",
        ),
        (
            "eventgate_spool_read_gaps_total",
            "Gaps found while reading the spool back.",
        ),
        (
            "eventgate_upstream_connects_total",
            "Subscriptions to an upstream established (first connect and reconnects).",
        ),
        (
            "eventgate_upstream_disconnects_total",
            "Subscriptions to an upstream that ended.",
        ),
        (
            "eventgate_upstream_connect_failures_total",
            "Failed attempts to subscribe to an upstream.",
        ),
        (
            "eventgate_upstream_socket_wakeups_total",
            "Backoff waits cut short because an upstream's unix socket was created again.",
        ),
        (
            "eventgate_reconciles_total",
            "Reconciles of an upstream's state with the record, by trigger (connected, interval).",
        ),
        (
            "eventgate_reconcile_events_total",
            "Events a reconcile recorded (origin reconciled), by upstream and topic.",
        ),
        (
            "eventgate_reconcile_failures_total",
            "Reconciles that failed, by stage: list (the daemon's state could not be read), save (the snapshot could not be written), or cri / docker (that manager could not be asked; containerd's lists were used alone).",
        ),
        (
            "eventgate_audit_checkpoints_total",
            "Signed checkpoints of an audit store's chain head published, by sqlite forwarder.",
        ),
        (
            "eventgate_audit_checkpoint_failures_total",
            "Attempts to sign and publish an audit checkpoint that failed (retried), by sqlite forwarder.",
        ),
        (
            "eventgate_upstream_events_total",
            "Events received from an upstream.",
        ),
        (
            "eventgate_upstream_enrich_total",
            "Container records looked up for upstream events, by result: remembered, fetched (the daemon's record was read), absent (the daemon had no such container), event (a /containers/update carried it), listed (a reconcile's lists), error (the call failed; the events are recorded without them).",
        ),
        (
            "eventgate_upstream_events_rejected_total",
            "Upstream events skipped because the exchange refused them, by reason.",
        ),
        (
            "eventgate_file_errors_total",
            "File forwarder I/O errors, by operation.",
        ),
        (
            "eventgate_file_housekeeping_errors_total",
            "Failures compressing or pruning rotated files.",
        ),
        (
            "eventgate_file_raw_payloads_total",
            "Events written with an undecodable payload kept as base64.",
        ),
        ("eventgate_file_rotations_total", "File rotations."),
        (
            "eventgate_file_duplicates_skipped_total",
            "Events of a batch sent again that the file forwarder had already written, skipped.",
        ),
        (
            "eventgate_kafka_messages_total",
            "Kafka messages acknowledged by the broker.",
        ),
        (
            "eventgate_kafka_message_errors_total",
            "Kafka messages whose delivery failed.",
        ),
        (
            "eventgate_kafka_producer_restarts_total",
            "Kafka producers recreated after a fatal error.",
        ),
        (
            "eventgate_kafka_queue_full_total",
            "Times librdkafka's producer queue was full and the forwarder waited.",
        ),
        (
            "eventgate_kafka_topics_created_total",
            "Kafka topics created by the forwarder.",
        ),
        (
            "eventgate_sqlite_rows_total",
            "Rows the SQLite forwarder handled, by outcome (inserted, duplicate).",
        ),
        (
            "eventgate_sqlite_errors_total",
            "SQLite forwarder errors, by class.",
        ),
        (
            "eventgate_correlate_held_total",
            "Events a forwarder's correlate stage held back, by reason (duplicate, similar, rate_limited); each is counted in an aggregate sent in their place.",
        ),
        (
            "eventgate_correlate_aggregates_total",
            "Aggregates (eventgate.events.v1.Correlated) a forwarder's correlate stage sent.",
        ),
        (
            "eventgate_correlate_state_resets_total",
            "Times a correlate stage found no saved state as of the position it resumed from and started afresh (what it held back then is not in any aggregate).",
        ),
        (
            "eventgate_source_events_total",
            "Events a [[source]] appended to the exchange (their offsets are stored for commit once they are durable).",
        ),
        (
            "eventgate_source_skipped_total",
            "Kafka messages a [[source]] could not take in and skipped after logging where they are, by reason (protobuf, json, field, header, payload: not an event; or the exchange's refusal: invalid_namespace, invalid_topic, invalid_timestamp; or too_large for the spool).",
        ),
        (
            "eventgate_source_restarts_total",
            "Times a [[source]]'s consumer ended while the gateway ran (a panic, a failed write) and was started again.",
        ),
        (
            "eventgate_source_errors_total",
            "Errors the Kafka consumer of a [[source]] reported (brokers unreachable, offset commits that failed); librdkafka retries them.",
        ),
    ];
    for (name, help) in counters {
        describe_counter!(*name, Count, *help);
    }
    describe_counter!(
        "eventgate_file_written_bytes_total",
        Bytes,
        "Bytes the file forwarder wrote."
    );
    let gauges: &[(&'static str, Unit, &'static str)] = &[
        (
            "eventgate_ready",
            Count,
            "1 when /readyz answers 200 (every upstream connected, every forwarder able to deliver, the spool below its high-water mark, free disk space above spool.min_free, no spool write failure), else 0.",
        ),
        ("eventgate_subscribers", Count, "Subscribers connected."),
        (
            "eventgate_resumers",
            Count,
            "Resumed subscriptions open (reading history or live).",
        ),
        (
            "eventgate_connections",
            Count,
            "Client connections open on an exchange listener (unix, tcp).",
        ),
        (
            "eventgate_subscribers_unmatched_events",
            Count,
            "Events waiting to be matched against subscribers' filters, summed over subscribers.",
        ),
        (
            "eventgate_forwarder_queue_events",
            Count,
            "Events in a forwarder's in-memory queue.",
        ),
        (
            "eventgate_forwarder_queue_bytes",
            Bytes,
            "Encoded bytes in a forwarder's in-memory queue.",
        ),
        (
            "eventgate_forwarder_backlog_events",
            Count,
            "Events in the spool at or after a forwarder's cursor (not yet finished by it).",
        ),
        (
            "eventgate_forwarder_oldest_unacked_age_seconds",
            Seconds,
            "Age of the oldest event a forwarder has not finished with (0 when caught up).",
        ),
        (
            "eventgate_forwarder_ready",
            Count,
            "1 when the forwarder counts as able to deliver (see /readyz), else 0.",
        ),
        (
            "eventgate_spool_bytes",
            Bytes,
            "Bytes of spool segments on disk.",
        ),
        (
            "eventgate_spool_max_bytes",
            Bytes,
            "The spool's limit (spool.max_bytes).",
        ),
        ("eventgate_spool_segments", Count, "Spool segment files."),
        (
            "eventgate_spool_disk_free_bytes",
            Bytes,
            "Free space on the spool's file system (for unprivileged writers), as last looked at (after writes at most every 10 ms, at least every 250 ms).",
        ),
        (
            "eventgate_spool_disk_min_free_bytes",
            Bytes,
            "The reserve kept free on the spool's file system (spool.min_free, in bytes).",
        ),
        (
            "eventgate_spool_disk_reserve_reached",
            Count,
            "1 while free space is below spool.min_free and events are refused (until it is back above the reserve plus a tenth), else 0.",
        ),
        (
            "eventgate_upstream_connected",
            Count,
            "1 while subscribed to the upstream, else 0.",
        ),
        (
            "eventgate_correlate_held_events",
            Count,
            "Events a forwarder's correlate stage holds back that no aggregate has been sent for yet.",
        ),
        (
            "eventgate_correlate_objects",
            Count,
            "Objects and topics a forwarder's correlate stage tracks (at most correlate.max_objects).",
        ),
        (
            "eventgate_source_inflight_events",
            Count,
            "Events a [[source]] appended and that are not yet durable, with their offsets not yet stored for commit (at most 4096).",
        ),
        (
            "eventgate_upstream_inflight_events",
            Count,
            "Events of the upstream appended to the spool and not yet durable (at most 4096, or 16 MiB of them; at the bound the stream is held).",
        ),
    ];
    for (name, unit, help) in gauges {
        describe_gauge!(*name, *unit, *help);
    }
    let histograms: &[(&'static str, Unit, &'static str)] = &[
        (
            "eventgate_forwarder_batch_events",
            Count,
            "Events per batch handed to a forwarder.",
        ),
        (
            "eventgate_forwarder_batch_bytes",
            Bytes,
            "Encoded bytes per batch handed to a forwarder.",
        ),
        (
            "eventgate_forwarder_delivery_seconds",
            Seconds,
            "From receipt of a batch's oldest event until the sink acknowledged the batch.",
        ),
        (
            "eventgate_reconcile_list_seconds",
            Seconds,
            "Time to list an upstream daemon's namespaces, containers, tasks and images.",
        ),
        (
            "eventgate_filter_matching_rest_seconds",
            Seconds,
            "One rest of the filter matching thread, held to exchange.limits.filter_cpu_percent.",
        ),
        (
            "eventgate_spool_fsync_seconds",
            Seconds,
            "Duration of one spool fdatasync.",
        ),
        (
            "eventgate_spool_group_records",
            Count,
            "Records written to the spool per write (group commit).",
        ),
        (
            "eventgate_file_fsync_seconds",
            Seconds,
            "Duration of one file forwarder fsync.",
        ),
        (
            "eventgate_forwarder_checkpoint_seconds",
            Seconds,
            "Duration of one checkpoint: making a forwarder's output durable before its cursor moves.",
        ),
        (
            "eventgate_file_compress_seconds",
            Seconds,
            "Time to gzip one rotated file.",
        ),
        (
            "eventgate_sqlite_transaction_seconds",
            Seconds,
            "Duration of one SQLite forwarder transaction (one batch).",
        ),
    ];
    for (name, unit, help) in histograms {
        describe_histogram!(*name, *unit, *help);
    }
}
