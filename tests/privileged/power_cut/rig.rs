//! The power-cut rig: the gateway on lazyfs, the load on it, and what a run saw.

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use eventgate::proto::Registry;
use eventgate::proto::containerd::types::Envelope;
use prost::Message as _;
use rdkafka::message::Message;
use rusqlite::{Connection, OpenFlags};

use super::Settings;
use super::lazyfs;
use super::support::containerd::IMAGE;
use super::support::tansu::consume;
use super::support::*;

/// The gateway and the file system under it. Dropped in that order: a mount is only
/// let go of once nothing uses it.
pub struct Rig {
    pub gateway: Gateway,
    pub mount: lazyfs::Mount,
    pub data: PathBuf,
}

impl Drop for Rig {
    fn drop(&mut self) {
        let _ = self.gateway.child.kill();
        let _ = self.gateway.child.wait();
        let _ = self.mount.unmount();
    }
}

/// What one cut found.
pub struct Cut {
    pub at: Instant,
    /// The last sync of a spool segment before the cut: under `fsync = "none"`,
    /// events acknowledged after it may be gone.
    pub spool_synced: Option<Instant>,
    /// Events acknowledged so far that were neither in the spool nor in the log
    /// file after the cut.
    pub missing: Vec<String>,
    pub restart: Duration,
    /// The mount came back with another device number (anonymous device numbers
    /// are shared with the containers' mounts): as after a reboot that renumbers
    /// disks, the file forwarder's record (device, inode) no longer matches.
    pub new_device: bool,
}

impl Rig {
    /// SIGKILL (the machine stops), the unsynced writes dropped, the file system
    /// mounted again with what a disk would hold, then the gateway started as a
    /// supervisor would, with no repair in between.
    pub fn power_cut(&mut self, acked: &Acked) -> Cut {
        self.gateway.kill9();
        let at = Instant::now();
        let spool_synced = self.mount.last_sync_in("spool/segments");
        let acked: Vec<String> = acked
            .lock()
            .unwrap()
            .iter()
            .map(|(id, _)| id.clone())
            .collect();
        let device = || std::fs::metadata(&self.data).map(|m| m.dev()).ok();
        let before = device();
        self.mount.cut().expect("remount after the cut");
        let new_device = device() != before;
        let mut kept = spool_ids(&self.data.join("spool/segments"));
        kept.extend(logged_exits(&self.data.join("events.jsonl")));
        let missing: Vec<String> = acked.into_iter().filter(|id| !kept.contains(id)).collect();
        let started = Instant::now();
        self.gateway.respawn();
        Cut {
            at,
            spool_synced,
            missing,
            restart: started.elapsed(),
            new_device,
        }
    }
}

/// Publisher ids found in the bytes of the spool's segments (the container id is
/// stored as is inside each record's envelope).
pub fn spool_ids(segments: &Path) -> HashSet<String> {
    let pattern = regex::bytes::Regex::new(r"P\dN\d{7}").expect("regex");
    let mut ids = HashSet::new();
    for entry in std::fs::read_dir(segments).into_iter().flatten().flatten() {
        let bytes = std::fs::read(entry.path()).unwrap_or_default();
        for found in pattern.find_iter(&bytes) {
            ids.insert(String::from_utf8_lossy(found.as_bytes()).into_owned());
        }
    }
    ids
}

/// Acknowledged ids, with when the acknowledgement came.
pub type Acked = Arc<Mutex<Vec<(String, Instant)>>>;

/// Publishes `P<publisher>N<n>` events until `stop`; notes each one whose Publish
/// returned OK, with when.
pub async fn publisher(address: String, publisher: usize, stop: Arc<AtomicBool>, acked: Acked) {
    let id = |n| format!("P{publisher}N{n:07}");
    let note = |id| acked.lock().unwrap().push((id, Instant::now()));
    publish_until(&address, &stop, id, note).await;
}

/// Containers run one after another until `stop` (`ctr run --rm`, as
/// `Containerd::run` does): upstream events flowing in.
pub fn containers(socket: PathBuf, fifos: PathBuf, stop: Arc<AtomicBool>, runs: Arc<AtomicUsize>) {
    let mut n = 0;
    while !stop.load(Ordering::SeqCst) {
        let id = format!("pc-{}-{n}", std::process::id());
        n += 1;
        let mut child = std::process::Command::new("ctr")
            .arg("--address")
            .arg(&socket)
            .args(["run", "--rm", "--fifo-dir", path_str(&fifos), IMAGE, &id])
            .args(["/bin/busybox", "sh", "-c", "exit 0"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn ctr run");
        if wait_exit(&mut child, DEADLINE).success() {
            runs.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// Container id -> rows of `/tasks/exit`, from the audit store.
pub fn stored(db: &Path) -> HashMap<String, i64> {
    let Ok(conn) = Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY) else {
        return HashMap::new();
    };
    let Ok(mut statement) = conn.prepare(
        "SELECT json_extract(event, '$.container_id'), count(*) FROM events
         WHERE topic = '/tasks/exit' GROUP BY 1",
    ) else {
        return HashMap::new();
    };
    statement
        .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))
        .and_then(|rows| rows.collect::<Result<_, _>>())
        .unwrap_or_default()
}

/// The upstream containers' events in the audit store, per topic.
pub fn upstream_topics(db: &Path) -> Vec<(String, i64)> {
    let Ok(conn) = Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY) else {
        return Vec::new();
    };
    let Ok(mut statement) = conn.prepare(
        "SELECT topic, count(DISTINCT json_extract(event, '$.container_id')) FROM events
         WHERE json_extract(event, '$.container_id') LIKE 'pc-%' GROUP BY 1 ORDER BY 1",
    ) else {
        return Vec::new();
    };
    statement
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .and_then(|rows| rows.collect::<Result<_, _>>())
        .unwrap_or_default()
}

/// Container ids of the Kafka topic's exit events.
pub fn in_kafka(brokers: &str) -> Vec<String> {
    consume(brokers, "events", 1)
        .iter()
        .filter_map(|m| Envelope::decode(m.payload()?).ok())
        .filter(|e| e.topic == "/tasks/exit")
        .filter_map(|e| {
            let msg = Registry::global().decode(e.event.as_ref()?).ok()?;
            msg.get_field_by_name("container_id")
                .and_then(|v| v.as_str().map(str::to_owned))
        })
        .collect()
}

/// What a run saw, for the assertions and the report.
pub struct Outcome {
    pub seed: u64,
    pub cuts: Vec<Cut>,
    pub acked: Vec<(String, Instant)>,
    pub sqlite: HashMap<String, i64>,
    pub log: Vec<String>,
    pub kafka: Vec<String>,
    pub container_runs: usize,
    pub upstream_exits: usize,
    /// Containers with at least one event of each topic.
    pub upstream_topics: Vec<(String, i64)>,
    pub stats: lazyfs::Stats,
}

impl Outcome {
    fn missing_from<'a>(&'a self, present: &HashSet<&str>) -> Vec<&'a str> {
        self.acked
            .iter()
            .map(|(id, _)| id.as_str())
            .filter(|id| !present.contains(id))
            .collect()
    }

    pub fn missing(&self) -> [(&'static str, Vec<&str>); 3] {
        let sqlite: HashSet<&str> = self.sqlite.keys().map(String::as_str).collect();
        let log: HashSet<&str> = self.log.iter().map(String::as_str).collect();
        let kafka: HashSet<&str> = self.kafka.iter().map(String::as_str).collect();
        [
            ("SQLite", self.missing_from(&sqlite)),
            ("the log file", self.missing_from(&log)),
            ("Kafka", self.missing_from(&kafka)),
        ]
    }

    pub fn doubled_in_sqlite(&self) -> Vec<(&String, &i64)> {
        self.sqlite
            .iter()
            .filter(|(id, n)| id.starts_with('P') && **n > 1)
            .collect()
    }

    pub fn report(&self, settings: &Settings) -> String {
        let lost = self
            .missing()
            .map(|(sink, ids)| format!("{sink} {}", ids.len()));
        let log_twice = self.log.len() - self.log.iter().collect::<HashSet<_>>().len();
        let kafka_twice = self.kafka.len() - self.kafka.iter().collect::<HashSet<_>>().len();
        let restarts: Vec<u128> = self.cuts.iter().map(|c| c.restart.as_millis()).collect();
        let spool_gaps: usize = self.cuts.iter().map(|c| c.missing.len()).sum();
        let new_devices = self.cuts.iter().filter(|c| c.new_device).count();
        format!(
            "spool.fsync = {:?} {} {} (seed {}): {} cuts, {} events acknowledged, {} container runs \
             ({} upstream exits stored; containers per topic {:?}); lost: {}; not in the spool after a cut: {spool_gaps}; \
             doubled in SQLite {}, repeated lines in the log {log_twice}, repeated in Kafka \
             {kafka_twice}; remounted with another device number {new_devices} times; \
             restarts (ms) {restarts:?}; file system: {} fsync, {} fdatasync, \
             {} directory fsync, {} unsynced bytes dropped",
            settings.fsync,
            settings.sqlite.replace('\n', " "),
            settings.file.replace('\n', " "),
            self.seed,
            self.cuts.len(),
            self.acked.len(),
            self.container_runs,
            self.upstream_exits,
            self.upstream_topics,
            lost.join(", "),
            self.doubled_in_sqlite().len(),
            self.stats.fsyncs,
            self.stats.fdatasyncs,
            self.stats.dir_fsyncs,
            self.stats.bytes_lost,
        )
    }
}
