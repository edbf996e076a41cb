//! Forwarder throughput: events published over the socket until the forwarder has
//! all of them, next to the raw limit of the same sink measured in the same run
//! (plain rusqlite inserts, plain librdkafka produce, plain buffered writes of the
//! same rows, messages and lines).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::daemon::Daemon;
use super::load::{as_events, as_pod_events, lifecycle, publish_all, wait_until};
use super::{BenchError, sink_count, sinks};

/// Which sink to measure.
#[derive(Clone, Debug)]
pub(crate) enum Sink {
    /// The exchange with no forwarder: the ceiling of the publish path itself.
    None,
    File,
    Sqlite,
    Kafka {
        brokers: String,
    },
}

impl Sink {
    pub(crate) fn label(&self) -> &'static str {
        match self {
            Sink::None => "none",
            Sink::File => "file",
            Sink::Sqlite => "sqlite",
            Sink::Kafka { .. } => "kafka",
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) struct ForwarderBench {
    pub events: usize,
    pub publishers: usize,
    pub in_flight: usize,
    /// Events per batch, for the forwarder and the raw baseline alike.
    pub batch: usize,
    pub timeout: Duration,
    /// The gateway's `spool.fsync`.
    pub spool_fsync: &'static str,
    /// Events of the raw and in-process rounds carry a pod's workload
    /// ([`super::load::as_pod_events`]); published ones never do.
    pub workloads: bool,
}

/// One round's figures.
#[derive(Debug, Clone)]
pub(crate) struct Round {
    /// First publish until the sink held every event.
    pub gateway: Duration,
    /// Publishing alone (every call answered).
    pub publish: Duration,
    /// The same rows/messages/lines written straight to the sink.
    pub raw: Option<sinks::Raw>,
    /// The same events through the pipeline and forwarder in-process (no gRPC).
    pub pipeline: Option<Duration>,
    pub peak_rss: Option<u64>,
}

/// Runs one round in `dir` for `sink`.
pub(crate) async fn round(
    eventgate: &Path,
    dir: &Path,
    sink: &Sink,
    bench: &ForwarderBench,
    round: usize,
) -> Result<Round, BenchError> {
    let items = Arc::new(lifecycle(bench.events));
    let run_dir = dir.join(format!("{}-{round}", sink.label()));
    create_dir(&run_dir)?;

    let (raw, pipeline) = match sink {
        Sink::None => (None, None),
        _ => {
            // Events of their own for each: an event keeps its decoded payload and
            // JSON once rendered, and the gateway receives events with neither.
            let raw_dir = run_dir.join("raw");
            create_dir(&raw_dir)?;
            let events = match bench.workloads {
                true => as_pod_events,
                false => as_events,
            };
            let raw = sinks::raw(sink, &raw_dir, &events(&items), bench.batch, round).await?;
            let pipeline_dir = run_dir.join("pipeline");
            create_dir(&pipeline_dir)?;
            // A topic of its own, so counting the gateway's messages stays exact.
            let events = events(&items);
            let pipeline =
                sinks::pipeline(sink, &pipeline_dir, &events, bench.batch, round + 1000).await?;
            (Some(raw), Some(pipeline))
        }
    };

    let config = run_dir.join("eventgate.toml");
    let toml = sinks::config(sink, bench.batch, round, bench.spool_fsync);
    std::fs::write(&config, toml).map_err(|source| BenchError::Io {
        context: format!("cannot write {}", config.display()),
        source,
    })?;
    let config_arg = config.display().to_string();
    let daemon = Daemon::eventgate(eventgate, &run_dir, &["--config", &config_arg]).await?;
    let data_dir = run_dir.join("eventgate");
    let address = daemon.socket().display().to_string();
    let start = Instant::now();
    let publish = publish_all(
        &address,
        Arc::clone(&items),
        bench.publishers,
        bench.in_flight,
    )
    .await?;
    let expected = items.len() as u64;
    let mut counter = sink_count::Counter::new(sink, &data_dir, round);
    let mut held = 0;
    let waited = wait_until("", bench.timeout, || {
        held = counter.count()?;
        Ok(held >= expected)
    })
    .await;
    if waited.is_err() {
        return Err(BenchError::Timeout {
            what: format!(
                "the {} forwarder held {held} of {expected} events after {:?}; see {}",
                sink.label(),
                bench.timeout,
                run_dir.join("eventgate.log").display()
            ),
        });
    }
    let gateway = start.elapsed();
    let peak_rss = daemon.peak_rss();
    daemon.stop(Duration::from_secs(10)).await;
    Ok(Round {
        gateway,
        publish,
        raw,
        pipeline,
        peak_rss,
    })
}

fn create_dir(path: &PathBuf) -> Result<(), BenchError> {
    std::fs::create_dir_all(path).map_err(|source| BenchError::Io {
        context: format!("cannot create {}", path.display()),
        source,
    })
}
