//! What a benchmarked eventgate did besides answering its clients, read once a
//! round's deliveries are in: when its default forwarders (`log`, `audit`) held every
//! event, and how its spool and file forwarder used the disk (from its `/metrics`).
//! These say what bounds a row, next to the rate itself.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::BenchError;
use crate::store;
use crate::store::checkpoint::TOPIC;

/// The disk figures of one gateway's whole life (warm-up included).
#[derive(Clone, Debug, Default)]
pub(crate) struct DiskFigures {
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
pub(crate) fn free_admin_address() -> Result<String, BenchError> {
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
pub(crate) async fn disk_figures(admin: &str) -> Result<DiskFigures, BenchError> {
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
        spool_fsync_mean: mean("eventgate_spool_fsync_seconds").map(Duration::from_secs_f64),
        spool_group_mean: mean("eventgate_spool_group_records"),
        file_fsyncs: sum(&body, "eventgate_file_fsync_seconds_count"),
        file_fsync_mean: mean("eventgate_file_fsync_seconds").map(Duration::from_secs_f64),
    })
}

/// The sum of every series of `name` in a Prometheus text exposition.
pub(super) fn sum(text: &str, name: &str) -> f64 {
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
/// `audit.db`) hold `expected` events each, not counting the gateway's own signed
/// checkpoints (a gateway with signing on stores them too); returns when they did,
/// or `None` if they had not within `timeout` (a row that does not keep up says so
/// instead of failing the run).
pub(crate) async fn defaults_hold(
    data_dir: &Path,
    expected: u64,
    timeout: Duration,
) -> Result<Option<Instant>, BenchError> {
    let mut log = LogLines::new(data_dir.join("events.jsonl"));
    let mut audit = AuditRows::new(data_dir.join("audit.db"));
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

/// How a signed checkpoint's line in `events.jsonl` names its topic (once a line).
const CHECKPOINT_LINE: &str = "\"topic\":\"/eventgate/audit/checkpoint\"";

/// Complete lines of the `log` forwarder's file that are not signed checkpoints,
/// reading only what was added since the last look.
struct LogLines {
    path: PathBuf,
    offset: u64,
    /// The last line read, until its newline is written.
    partial: Vec<u8>,
    lines: u64,
}

impl LogLines {
    fn new(path: PathBuf) -> Self {
        Self {
            path,
            offset: 0,
            partial: Vec::new(),
            lines: 0,
        }
    }

    fn count(&mut self) -> Result<u64, BenchError> {
        use std::io::{Read, Seek, SeekFrom};
        let Ok(mut file) = std::fs::File::open(&self.path) else {
            return Ok(0);
        };
        let io = |source| BenchError::Io {
            context: format!("reading {}", self.path.display()),
            source,
        };
        file.seek(SeekFrom::Start(self.offset)).map_err(io)?;
        let read = file.read_to_end(&mut self.partial).map_err(io)?;
        self.offset += read as u64;
        let Some(end) = self.partial.iter().rposition(|&b| b == b'\n') else {
            return Ok(self.lines);
        };
        let complete = &self.partial[..=end];
        let lines = complete.iter().filter(|&&b| b == b'\n').count();
        let checkpoints = String::from_utf8_lossy(complete)
            .matches(CHECKPOINT_LINE)
            .count();
        self.lines += (lines - checkpoints.min(lines)) as u64;
        self.partial.drain(..=end);
        Ok(self.lines)
    }
}

/// Rows of the `audit` forwarder's store that are not signed checkpoints.
struct AuditRows {
    path: PathBuf,
    conn: Option<rusqlite::Connection>,
}

impl AuditRows {
    fn new(path: PathBuf) -> Self {
        Self { path, conn: None }
    }

    fn count(&mut self) -> Result<u64, BenchError> {
        if self.conn.is_none() && self.path.exists() {
            self.conn = store::open_reader(&self.path, Duration::from_secs(5)).ok();
        }
        let Some(conn) = &self.conn else {
            return Ok(0);
        };
        // One statement, so both counts are of the same snapshot.
        conn.query_row(
            "SELECT (SELECT count(*) FROM events) \
             - (SELECT count(*) FROM events WHERE topic = ?1)",
            [TOPIC],
            |row| row.get::<_, i64>(0),
        )
        .map(|n| n.max(0) as u64)
        .map_err(|source| BenchError::Sqlite {
            what: "count stored events",
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn log_lines_leave_out_signed_checkpoints_and_wait_for_whole_lines() {
        use std::io::Write;
        use std::time::SystemTime;

        use crate::event::{Event, EventId, Source};
        use crate::store::checkpoint::Checkpoint;

        let checkpoint = Checkpoint {
            node: "n".into(),
            store: "s".into(),
            row_id: 3,
            seq: Some(3),
            hash: None,
            pruned_rows: 0,
            time: SystemTime::now(),
            prev: None,
            tree: None,
        };
        let envelope = crate::markers::audit_checkpoint(&checkpoint, "note\n", "audit");
        let mut line = Vec::new();
        crate::render::write_event_json(
            &mut line,
            &Event::new(1, EventId::generate(), Source::Internal, envelope),
        );
        let line = String::from_utf8(line).unwrap();
        assert_eq!(line.matches(CHECKPOINT_LINE).count(), 1, "{line}");

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let mut lines = LogLines::new(path.clone());
        assert_eq!(lines.count().unwrap(), 0);
        let mut file = std::fs::File::create(&path).unwrap();
        write!(file, "{{\"topic\":\"/tasks/exit\"}}\n{line}\n{{\"topic\":").unwrap();
        assert_eq!(lines.count().unwrap(), 1);
        writeln!(file, "\"/tasks/exit\"}}").unwrap();
        assert_eq!(lines.count().unwrap(), 2);
    }
}
