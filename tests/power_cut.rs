//! Power cuts under load (issue 33): the data directory on lazyfs, a file system that
//! keeps only what was synced; publishers and an upstream containerd keep the gateway
//! busy while the power is cut at random points (SIGKILL, then everything unsynced
//! dropped, then the gateway started again on what is left). Per `spool.fsync`:
//! - `batch` and `always`: every event whose Publish returned OK is in the spool (or
//!   already durable in the sinks) after each cut, and at the end in the log file,
//!   in the SQLite store exactly once and in Kafka; `audit verify` passes.
//! - `none`: a cut may lose exactly the events acknowledged since the spool's last
//!   sync (a segment roll), and never an earlier one; nothing doubled, store intact.
//!
//! Each cut is followed by a plain restart: the gateway must open what the cut left
//! without help.

mod support;
// Only this test mounts it: kept out of `support/mod.rs` so the other test binaries
// do not build and link FUSE.
#[path = "support/lazyfs/mod.rs"]
mod lazyfs;

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use eventgate::proto::Registry;
use eventgate::proto::containerd::types::Envelope;
use prost::Message as _;
use rand::{Rng, SeedableRng};
use rdkafka::message::Message;
use rusqlite::{Connection, OpenFlags};
use support::containerd::{Containerd, IMAGE};
use support::tansu::{Tansu, consume};
use support::*;

/// Small segments, so that segments roll, are deleted and their directory synced
/// between cuts, as over days in production.
const SEGMENT_BYTES: &str = "64KiB";

/// The cuts of one run, one gateway at a time on the machine's two cores.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

struct Settings {
    fsync: &'static str,
    /// Extra keys of the `sqlite` and the `file` forwarder: their own sync settings.
    sqlite: &'static str,
    file: &'static str,
    cuts: usize,
}

fn config(dir: &Path, settings: &Settings, brokers: &str, containerd: &str) -> String {
    let path = dir.join("eventgate.toml");
    std::fs::write(
        &path,
        format!(
            r#"
[spool]
fsync = "{fsync}"
segment_bytes = "{SEGMENT_BYTES}"

[[forwarder]]
name = "audit"
kind = "sqlite"
path = "audit.db"
{sqlite}

[[forwarder]]
name = "log"
kind = "file"
path = "events.jsonl"
{file}

[[forwarder]]
name = "kafka"
kind = "kafka"
brokers = "{brokers}"
topic = "events"
create_topic = true
partitions = 1
replication_factor = 1

[[upstream]]
name = "node"
address = "{containerd}"
reconnect = {{ initial = "50ms", max = "1s" }}
"#,
            fsync = settings.fsync,
            sqlite = settings.sqlite,
            file = settings.file,
        ),
    )
    .expect("write config");
    path_str(&path).to_owned()
}

/// The gateway and the file system under it. Dropped in that order: a mount is only
/// let go of once nothing uses it.
struct Rig {
    gateway: Gateway,
    mount: lazyfs::Mount,
    data: PathBuf,
}

impl Drop for Rig {
    fn drop(&mut self) {
        let _ = self.gateway.child.kill();
        let _ = self.gateway.child.wait();
        let _ = self.mount.unmount();
    }
}

/// What one cut found.
struct Cut {
    at: Instant,
    /// The last sync of a spool segment before the cut: under `fsync = "none"`,
    /// events acknowledged after it may be gone.
    spool_synced: Option<Instant>,
    /// Events acknowledged so far that were neither in the spool nor in the log
    /// file after the cut.
    missing: Vec<String>,
    restart: Duration,
    /// The mount came back with another device number (anonymous device numbers
    /// are shared with the containers' mounts): as after a reboot that renumbers
    /// disks, the file forwarder's record (device, inode) no longer matches.
    new_device: bool,
}

impl Rig {
    /// SIGKILL (the machine stops), the unsynced writes dropped, the file system
    /// mounted again with what a disk would hold, then the gateway started as a
    /// supervisor would, with no repair in between.
    fn power_cut(&mut self, acked: &Acked) -> Cut {
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
fn spool_ids(segments: &Path) -> HashSet<String> {
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
type Acked = Arc<Mutex<Vec<(String, Instant)>>>;

/// Publishes `P<publisher>N<n>` events back to back until `stop`, reconnecting
/// after failures; notes each one whose Publish returned OK.
async fn publisher(address: String, publisher: usize, stop: Arc<AtomicBool>, acked: Acked) {
    let mut client = None;
    let mut n = 0u64;
    while !stop.load(Ordering::SeqCst) {
        if client.is_none() {
            client = eventgate::client::connect(&address, Duration::from_millis(500))
                .await
                .ok();
            if client.is_none() {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        }
        let id = format!("P{publisher}N{n:07}");
        n += 1;
        let Some(c) = client.as_mut() else { continue };
        match c.publish(exit_request(&id)).await {
            Ok(_) => acked.lock().unwrap().push((id, Instant::now())),
            // Unknown outcome: may or may not be stored; never published again.
            Err(_) => client = None,
        }
    }
}

/// Containers run one after another until `stop` (`ctr run --rm`, as
/// `Containerd::run` does): upstream events flowing in.
fn containers(socket: PathBuf, fifos: PathBuf, stop: Arc<AtomicBool>, runs: Arc<AtomicUsize>) {
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
fn stored(db: &Path) -> HashMap<String, i64> {
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
fn upstream_topics(db: &Path) -> Vec<(String, i64)> {
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
fn in_kafka(brokers: &str) -> Vec<String> {
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
struct Outcome {
    seed: u64,
    cuts: Vec<Cut>,
    acked: Vec<(String, Instant)>,
    sqlite: HashMap<String, i64>,
    log: Vec<String>,
    kafka: Vec<String>,
    container_runs: usize,
    upstream_exits: usize,
    /// Containers with at least one event of each topic.
    upstream_topics: Vec<(String, i64)>,
    stats: lazyfs::Stats,
}

impl Outcome {
    fn missing_from<'a>(&'a self, present: &HashSet<&str>) -> Vec<&'a str> {
        self.acked
            .iter()
            .map(|(id, _)| id.as_str())
            .filter(|id| !present.contains(id))
            .collect()
    }

    fn missing(&self) -> [(&'static str, Vec<&str>); 3] {
        let sqlite: HashSet<&str> = self.sqlite.keys().map(String::as_str).collect();
        let log: HashSet<&str> = self.log.iter().map(String::as_str).collect();
        let kafka: HashSet<&str> = self.kafka.iter().map(String::as_str).collect();
        [
            ("SQLite", self.missing_from(&sqlite)),
            ("the log file", self.missing_from(&log)),
            ("Kafka", self.missing_from(&kafka)),
        ]
    }

    fn doubled_in_sqlite(&self) -> Vec<(&String, &i64)> {
        self.sqlite
            .iter()
            .filter(|(id, n)| id.starts_with('P') && **n > 1)
            .collect()
    }

    fn report(&self, settings: &Settings) -> String {
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

fn seed() -> u64 {
    std::env::var("POWER_CUT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::rng().random())
}

async fn run(settings: &Settings) -> Outcome {
    let seed = seed();
    eprintln!(
        "power cuts, spool.fsync = {:?}: seed {seed} (POWER_CUT_SEED to repeat)",
        settings.fsync
    );
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let tansu = Tansu::start();
    let containerd = Containerd::start();
    containerd.import_busybox();
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    std::fs::create_dir(&data).expect("mount point");
    let mount = lazyfs::Mount::new(&data).expect("mount lazyfs (needs root and /dev/fuse)");
    let config = config(
        dir.path(),
        settings,
        &tansu.brokers(),
        &containerd.address(),
    );
    let gateway = Gateway::start_in(dir, &["--config", &config]);
    let address = gateway.address();
    let rig = Arc::new(Mutex::new(Rig {
        gateway,
        mount,
        data: data.clone(),
    }));

    let stop = Arc::new(AtomicBool::new(false));
    let acked: Acked = Arc::default();
    let publishers: Vec<_> = (0..4)
        .map(|p| {
            tokio::spawn(publisher(
                address.clone(),
                p,
                Arc::clone(&stop),
                Arc::clone(&acked),
            ))
        })
        .collect();
    let runs = Arc::new(AtomicUsize::new(0));
    let runner = {
        let socket = containerd.socket.clone();
        let fifos = containerd.dir.path().join("fifo");
        let (stop, runs) = (Arc::clone(&stop), Arc::clone(&runs));
        std::thread::spawn(move || containers(socket, fifos, stop, runs))
    };

    let mut cuts = Vec::new();
    for _ in 0..settings.cuts {
        tokio::time::sleep(Duration::from_millis(rng.random_range(200..2500))).await;
        let (rig, acked) = (Arc::clone(&rig), Arc::clone(&acked));
        let cut = tokio::task::spawn_blocking(move || rig.lock().unwrap().power_cut(&acked))
            .await
            .expect("power cut");
        cuts.push(cut);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::SeqCst);
    for p in publishers {
        p.await.expect("publisher");
    }
    runner.join().expect("container runs");
    let acked = std::mem::take(&mut *acked.lock().unwrap());

    // One last event after everything else: once a sink has it, it has had its
    // chance at every earlier one (forwarders deliver in spool order).
    let mut client = eventgate::client::connect(&address, DEADLINE)
        .await
        .expect("connect");
    client
        .publish(exit_request("END"))
        .await
        .expect("publish the last event");
    let db = data.join("audit.db");
    let sqlite = wait_for("the last event in SQLite", Duration::from_secs(60), || {
        let rows = stored(&db);
        rows.contains_key("END").then_some(rows)
    });
    let log_path = data.join("events.jsonl");
    let log = wait_for("the last event in the log", Duration::from_secs(60), || {
        let lines = logged_exits(&log_path);
        lines.iter().any(|id| id == "END").then_some(lines)
    });
    let brokers = tansu.brokers();
    let kafka = wait_for("the last event in Kafka", Duration::from_secs(60), || {
        let ids = in_kafka(&brokers);
        ids.iter().any(|id| id == "END").then_some(ids)
    });
    let upstream_exits = sqlite.keys().filter(|id| id.starts_with("pc-")).count();
    let upstream_topics = upstream_topics(&db);

    let mut rig = Arc::try_unwrap(rig)
        .ok()
        .expect("the rig, once every cut is done")
        .into_inner()
        .unwrap();
    let status = rig.gateway.terminate();
    assert!(status.success(), "{}", rig.gateway.stderr_text());
    let verify = eventgate()
        .args(["audit", "verify", "--data-dir", path_str(&data)])
        .output()
        .expect("run eventgate audit verify");
    assert!(
        verify.status.success(),
        "audit verify after {} power cuts: {}{}",
        cuts.len(),
        String::from_utf8_lossy(&verify.stdout),
        String::from_utf8_lossy(&verify.stderr)
    );
    let stats = rig.mount.stats();
    drop(rig);
    Outcome {
        seed,
        cuts,
        acked,
        sqlite,
        log,
        kafka,
        container_runs: runs.load(Ordering::SeqCst),
        upstream_exits,
        upstream_topics,
        stats,
    }
}

/// `batch` and `always`: nothing acknowledged is ever lost, nothing doubled.
fn assert_nothing_lost(outcome: &Outcome, settings: &Settings) {
    assert_nothing_lost_but(outcome, settings, None);
}

/// [`assert_nothing_lost`] in every sink but `except`, whose own settings let a
/// power cut take what it was sent.
fn assert_nothing_lost_but(outcome: &Outcome, settings: &Settings, except: Option<&str>) {
    let report = outcome.report(settings);
    eprintln!("{report}");
    assert!(outcome.acked.len() > 200, "too little load: {report}");
    for (i, cut) in outcome.cuts.iter().enumerate() {
        if except.is_some() {
            // The check after each cut counts the log as a copy; not this one.
            break;
        }
        assert!(
            cut.missing.is_empty(),
            "cut {i}: acknowledged, then neither in the spool nor in the log: {:?}\n{report}",
            cut.missing
        );
    }
    for (sink, missing) in outcome.missing() {
        if except == Some(sink) {
            continue;
        }
        assert!(
            missing.is_empty(),
            "acknowledged, missing from {sink}: {missing:?}\n{report}"
        );
    }
    let doubled = outcome.doubled_in_sqlite();
    assert!(
        doubled.is_empty(),
        "stored more than once: {doubled:?}\n{report}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root, /dev/fuse, containerd, runc and tansu; run tests/run.sh"]
async fn power_cuts_under_fsync_batch_lose_no_acknowledged_event() {
    let _one = ONE_AT_A_TIME.lock().await;
    // The sinks' defaults: SQLite `synchronous = normal`, the log synced at checkpoints.
    let settings = Settings {
        fsync: "batch",
        sqlite: "",
        file: "",
        cuts: 12,
    };
    let outcome = run(&settings).await;
    assert_nothing_lost(&outcome, &settings);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root, /dev/fuse, containerd, runc and tansu; run tests/run.sh"]
async fn power_cuts_under_fsync_always_lose_no_acknowledged_event() {
    let _one = ONE_AT_A_TIME.lock().await;
    // The sinks' other settings: they change how much is sent again, never what is kept.
    let settings = Settings {
        fsync: "always",
        sqlite: "synchronous = \"full\"",
        file: "fsync = \"interval\"\nfsync_interval = \"200ms\"",
        cuts: 12,
    };
    let outcome = run(&settings).await;
    assert_nothing_lost(&outcome, &settings);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root, /dev/fuse, containerd, runc and tansu; run tests/run.sh"]
async fn power_cuts_under_fsync_none_lose_only_events_acknowledged_since_the_last_spool_sync() {
    let _one = ONE_AT_A_TIME.lock().await;
    let settings = Settings {
        fsync: "none",
        sqlite: "",
        file: "",
        cuts: 12,
    };
    let outcome = run(&settings).await;
    let report = outcome.report(&settings);
    eprintln!("{report}");
    assert!(outcome.acked.len() > 200, "too little load: {report}");
    let acked_at: HashMap<&str, Instant> = outcome
        .acked
        .iter()
        .map(|(id, at)| (id.as_str(), *at))
        .collect();
    // Each event may be lost only to the first cut after its acknowledgement, and
    // only if that cut came before the spool synced it.
    let may_lose = |id: &str| -> bool {
        let at = acked_at[id];
        outcome
            .cuts
            .iter()
            .find(|cut| cut.at > at)
            .is_some_and(|cut| cut.spool_synced.is_none_or(|synced| synced < at))
    };
    let at_risk = acked_at.keys().filter(|id| may_lose(id)).count();
    eprintln!(
        "spool.fsync = \"none\": {at_risk} of {} acknowledged events were acknowledged after \
         the spool's last sync before a cut (at risk)",
        outcome.acked.len()
    );
    for (i, cut) in outcome.cuts.iter().enumerate() {
        let beyond: Vec<&String> = cut.missing.iter().filter(|id| !may_lose(id)).collect();
        assert!(
            beyond.is_empty(),
            "cut {i}: lost although acknowledged before the spool's last sync: {beyond:?}\n{report}"
        );
    }
    for (sink, missing) in outcome.missing() {
        let beyond: Vec<&&str> = missing.iter().filter(|id| !may_lose(id)).collect();
        assert!(
            beyond.is_empty(),
            "missing from {sink} although acknowledged before the spool's last sync: {beyond:?}\n{report}"
        );
    }
    let doubled = outcome.doubled_in_sqlite();
    assert!(
        doubled.is_empty(),
        "stored more than once: {doubled:?}\n{report}"
    );
}

/// A gateway's first files: the log file and the directories made at start
/// (`checkpoints/`, `state/`) must be in their directories before anything in them
/// counts as durable, or a cut early in the gateway's life takes them whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and /dev/fuse; run tests/run.sh"]
async fn a_new_gateways_log_file_and_checkpoint_survive_a_power_cut() {
    let _one = ONE_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    std::fs::create_dir(&data).expect("mount point");
    let mount = lazyfs::Mount::new(&data).expect("mount lazyfs (needs root and /dev/fuse)");
    let config = dir.path().join("eventgate.toml");
    std::fs::write(
        &config,
        "[[forwarder]]\nname = \"log\"\nkind = \"file\"\npath = \"events.jsonl\"\n",
    )
    .expect("write config");
    let gateway = Gateway::start_in(dir, &["--config", path_str(&config)]);
    let mut rig = Rig {
        gateway,
        mount,
        data: data.clone(),
    };
    let mut client = rig.gateway.client().await;
    let ids: Vec<String> = (0..10).map(|n| format!("first-{n}")).collect();
    for id in &ids {
        client.publish(exit_request(id)).await.expect("publish");
    }
    // The checkpoint (fdatasync of the log, then its record) has happened once the
    // spool's cursors file, written after it, has the log past every event.
    wait_for(
        "the log's cursor persisted",
        Duration::from_secs(10),
        || {
            let cursors = std::fs::read_to_string(data.join("spool/cursors")).ok()?;
            cursors
                .lines()
                .filter_map(|l| l.strip_prefix("log "))
                .any(|n| n.parse::<u64>().is_ok_and(|n| n > 10))
                .then_some(())
        },
    );
    drop(client);
    rig.gateway.kill9();
    rig.mount.cut().expect("remount after the cut");
    assert_eq!(
        logged_exits(&data.join("events.jsonl")),
        ids,
        "the log file, as checkpointed"
    );
    assert!(
        data.join("checkpoints/log.file").is_file(),
        "the log's checkpoint record"
    );
    rig.gateway.respawn();
    let status = rig.gateway.terminate();
    assert!(status.success(), "{}", rig.gateway.stderr_text());
}

/// A sink's own sync setting is its own business: the log file left to the OS
/// (`fsync = "never"`) may lose what it was sent, and the cursor has moved past it,
/// so it is not sent again; SQLite and Kafka lose nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root, /dev/fuse, containerd, runc and tansu; run tests/run.sh"]
async fn power_cuts_with_the_log_file_never_synced_lose_only_its_lines() {
    let _one = ONE_AT_A_TIME.lock().await;
    let settings = Settings {
        fsync: "batch",
        sqlite: "",
        file: "fsync = \"never\"",
        cuts: 8,
    };
    let outcome = run(&settings).await;
    assert_nothing_lost_but(&outcome, &settings, Some("the log file"));
}
