//! What a benchmarked eventgate did besides answering its clients, read once a
//! round's deliveries are in: when its default forwarders (`log`, `audit`) held every
//! event, and how its spool and file forwarder used the disk (from its `/metrics`).
//! These say what bounds a row, next to the rate itself.

use std::path::Path;
use std::time::{Duration, Instant};

use super::BenchError;
use super::forwarder::Sink;
use super::sink_count::Counter;

/// The disk figures of one gateway's whole life (warm-up included).
#[derive(Clone, Debug, Default)]
pub struct DiskFigures {
    /// fdatasync calls on spool segments.
    pub spool_fsyncs: f64,
    /// Mean time of one spool fdatasync.
    pub spool_fsync_mean: Option<Duration>,
    /// Mean records per spool write group.
    pub spool_group_mean: Option<f64>,
    /// fdatasync calls by file forwarders.
    pub file_fsyncs: f64,
    /// Mean time of one file forwarder fdatasync.
    pub file_fsync_mean: Option<Duration>,
}

/// A loopback address with a free port for a gateway's admin endpoint, so the
/// benchmark can read its metrics (two processes could race for it; the gateway
/// then fails to start and the benchmark says so).
pub fn free_admin_address() -> Result<String, BenchError> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|source| BenchError::Io {
            context: "cannot find a free port".into(),
            source,
        })?
        .port();
    Ok(format!("127.0.0.1:{port}"))
}

/// Reads the gateway's disk figures from its admin endpoint.
pub async fn disk_figures(admin: &str) -> Result<DiskFigures, BenchError> {
    let (status, body) = crate::admin::client::get(admin, "/metrics", Duration::from_secs(5))
        .await
        .map_err(|e| BenchError::Failed {
            what: format!("cannot read the gateway's metrics at {admin}: {e}"),
        })?;
    if status != 200 {
        return Err(BenchError::Failed {
            what: format!("the gateway's /metrics at {admin} answered {status}"),
        });
    }
    let mean = |name: &str| {
        let count = sum(&body, &format!("{name}_count"));
        (count > 0.0).then(|| sum(&body, &format!("{name}_sum")) / count)
    };
    Ok(DiskFigures {
        spool_fsyncs: sum(&body, "eventgate_spool_fsyncs_total"),
        spool_fsync_mean: mean("eventgate_spool_fsync_seconds").map(Duration::from_secs_f64),
        spool_group_mean: mean("eventgate_spool_group_records"),
        file_fsyncs: sum(&body, "eventgate_file_fsync_seconds_count"),
        file_fsync_mean: mean("eventgate_file_fsync_seconds").map(Duration::from_secs_f64),
    })
}

/// The sum of every series of `name` in a Prometheus text exposition.
fn sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let rest = line.strip_prefix(name)?;
            // `name{labels} value` or `name value`, not a longer name sharing the prefix.
            let value = match rest.chars().next()? {
                '{' => rest.rsplit_once('}')?.1,
                ' ' => rest,
                _ => return None,
            };
            value.split_whitespace().next()?.parse::<f64>().ok()
        })
        // Not `sum()`, which starts from -0.0 and prints "-0" when nothing matched.
        .fold(0.0, |total, v| total + v)
}

/// Waits until the default forwarders in `data_dir` (`log`: `events.jsonl`, `audit`:
/// `audit.db`) hold `expected` events each; returns when they did, or `None` if
/// they had not within `timeout` (a row that does not keep up says so instead of
/// failing the run).
pub async fn defaults_hold(
    data_dir: &Path,
    expected: u64,
    timeout: Duration,
) -> Result<Option<Instant>, BenchError> {
    let mut log = Counter::new(&Sink::File, data_dir, 0);
    let mut audit = Counter::new(&Sink::Sqlite, data_dir, 0);
    let deadline = Instant::now() + timeout;
    loop {
        if log.count()? >= expected && audit.count()? >= expected {
            return Ok(Some(Instant::now()));
        }
        if Instant::now() > deadline {
            return Ok(None);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::sum;

    #[test]
    fn sums_every_series_of_exactly_the_named_metric() {
        let text = "# HELP eventgate_spool_fsyncs_total x\n\
                    eventgate_spool_fsyncs_total 12\n\
                    eventgate_spool_fsyncs_total_extra 99\n\
                    eventgate_file_fsync_seconds_count{forwarder=\"log\"} 3\n\
                    eventgate_file_fsync_seconds_count{forwarder=\"b\"} 4.5\n";
        assert_eq!(sum(text, "eventgate_spool_fsyncs_total"), 12.0);
        assert_eq!(sum(text, "eventgate_file_fsync_seconds_count"), 7.5);
        assert_eq!(sum(text, "eventgate_missing"), 0.0);
    }
}
