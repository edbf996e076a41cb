//! `eventgate bench soak`: mixed load for a long time with a fault every few
//! seconds, then a check by event id that every acknowledged event is in every sink
//! (exactly once in SQLite), that the audit store's chain verifies, and that the
//! gateway's memory, open files and threads stayed bounded.

mod broker;
mod check;
mod faults;
mod gateway;
mod load;
pub(crate) mod report;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};

use super::BenchError;
use super::daemon::Daemon;
use broker::{Broker, KafkaTally};
pub(crate) use faults::Fault;
use gateway::Gateway;
pub(crate) use report::Report;

#[derive(Clone, Debug)]
pub(crate) struct Soak {
    pub duration: Duration,
    pub fault_every: Duration,
    pub seed: u64,
    /// Publish calls per second, over all publishers.
    pub rate: f64,
    pub publishers: usize,
    /// Events per second published to containerd, for the upstream subscription.
    pub upstream_rate: f64,
    /// Size of the tmpfs holding the data directory.
    pub disk_bytes: u64,
    pub out: PathBuf,
    pub eventgate: PathBuf,
    pub containerd: PathBuf,
    pub tansu: PathBuf,
}

/// A tmpfs mounted for the soak's life.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, bytes: u64) -> Result<Self, BenchError> {
        create_dir(at)?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o"])
            .arg(format!("size={bytes},mode=0755"))
            .arg("tmpfs")
            .arg(at)
            .output()
            .map_err(|source| BenchError::Spawn {
                what: "mount",
                source,
            })?;
        if !out.status.success() {
            return Err(BenchError::Failed {
                what: format!(
                    "the soak needs root to mount a tmpfs for the data directory on {}: {}",
                    at.display(),
                    String::from_utf8_lossy(&out.stderr).trim()
                ),
            });
        }
        Ok(Self(at.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn create_dir(path: &Path) -> Result<(), BenchError> {
    std::fs::create_dir_all(path).map_err(|source| BenchError::Io {
        context: format!("cannot create {}", path.display()),
        source,
    })
}

fn config_text(upstream: &Path, brokers: &str, log_batch: usize) -> String {
    format!(
        r#"# Written by `eventgate bench soak`.
[spool]
min_free = "16MiB"
segment_bytes = "8MiB"
max_bytes = "256MiB"

[[upstream]]
name = "node"
address = {upstream:?}
enrich = false

[[forwarder]]
name = "audit"
kind = "sqlite"
path = "audit.db"

[[forwarder]]
name = "log"
kind = "file"
path = "events.jsonl"
max_size = 0
batch = {{ events = {log_batch} }}

[[forwarder]]
name = "kafka"
kind = "kafka"
brokers = "{brokers}"
topic = "{topic}"
create_topic = true
partitions = 1
replication_factor = 1
"#,
        topic = broker::TOPIC,
    )
}

fn write(path: &Path, text: &str) -> Result<(), BenchError> {
    std::fs::write(path, text).map_err(|source| BenchError::Io {
        context: format!("cannot write {}", path.display()),
        source,
    })
}

/// How long the end check waits for the sinks to catch up after the last fault.
pub(crate) const DRAIN_TIMEOUT: Duration = Duration::from_secs(600);

/// How often the gateway's resources are sampled: often enough that even the short
/// CI soak has samples to compare.
const SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// Everything the soak runs, owned by its one control loop.
struct Rig {
    soak: Soak,
    gateway: Gateway,
    broker: Broker,
    containerd: Option<Daemon>,
    containerd_dir: PathBuf,
    kafka: KafkaTally,
    config: PathBuf,
    log_batch: usize,
    filler: PathBuf,
    notes: Vec<String>,
}

pub(crate) async fn run(soak: Soak) -> Result<Report, BenchError> {
    create_dir(&soak.out)?;
    let work = tempfile::Builder::new()
        .prefix("eg-soak")
        .tempdir()
        .map_err(|source| BenchError::Io {
            context: "cannot create a temporary directory".into(),
            source,
        })?;
    // A copy of the binary for the whole run: one rebuilt in place meanwhile would
    // otherwise be what the next restart runs (or be missing while it is written).
    let eventgate = work.path().join("eventgate");
    std::fs::copy(&soak.eventgate, &eventgate).map_err(|source| BenchError::Io {
        context: format!("cannot copy {}", soak.eventgate.display()),
        source,
    })?;
    let soak = Soak { eventgate, ..soak };
    let disk = work.path().join("disk");
    let _tmpfs = Tmpfs::mount(&disk, soak.disk_bytes)?;
    let data = disk.join("data");
    let containerd_dir = work.path().join("containerd");
    create_dir(&containerd_dir)?;
    let containerd = Daemon::containerd(&soak.containerd, &containerd_dir).await?;
    let upstream_socket = containerd.socket().to_path_buf();
    let broker = Broker::start(&soak.tansu, work.path()).await?;
    let config = soak.out.join("eventgate.toml");
    write(
        &config,
        &config_text(&upstream_socket, &broker.brokers(), 100),
    )?;
    let gateway = Gateway::new(
        &soak.eventgate,
        &data,
        &config,
        &soak.out.join("eventgate.log"),
    );
    let mut rig = Rig {
        soak: soak.clone(),
        gateway,
        broker,
        containerd: Some(containerd),
        containerd_dir,
        kafka: KafkaTally::default(),
        config,
        log_batch: 100,
        filler: disk.join("filler"),
        notes: Vec::new(),
    };
    if !rig.gateway.ensure_running().await? {
        return Err(BenchError::Failed {
            what: format!(
                "the gateway did not start; see {}",
                soak.out.join("eventgate.log").display()
            ),
        });
    }
    let started = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let publishers: Vec<_> = (0..soak.publishers)
        .map(|p| {
            tokio::spawn(load::publisher(
                rig.gateway.socket(),
                format!("p{p}"),
                soak.rate / soak.publishers as f64,
                Duration::from_secs(5),
                Arc::clone(&stop),
            ))
        })
        .collect();
    let upstream = tokio::spawn(load::publisher(
        upstream_socket,
        "u".into(),
        soak.upstream_rate,
        Duration::from_secs(5),
        Arc::clone(&stop),
    ));

    let mut rng = rand::rngs::StdRng::seed_from_u64(soak.seed);
    let mut faults: BTreeMap<Fault, usize> = BTreeMap::new();
    let mut samples = Vec::new();
    let mut next_sample = started;
    let mut next_fault = started + jitter(&mut rng, soak.fault_every);
    let end = started + soak.duration;
    while Instant::now() < end {
        rig.gateway.ensure_running().await?;
        if Instant::now() >= next_sample {
            samples.extend(rig.gateway.sample(started));
            next_sample += SAMPLE_EVERY;
        }
        if Instant::now() >= next_fault {
            let fault = Fault::ALL[rng.random_range(0..Fault::ALL.len())];
            let hold = faults::hold(&mut rng, fault);
            tracing::info!(fault = fault.label(), ?hold, "injecting a fault");
            rig.inject(fault, hold).await?;
            *faults.entry(fault).or_default() += 1;
            next_fault = Instant::now() + jitter(&mut rng, soak.fault_every);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let faulted = started.elapsed();

    stop.store(true, Ordering::SeqCst);
    let mut acked = Vec::new();
    let mut refused: BTreeMap<String, u64> = BTreeMap::new();
    for publisher in publishers {
        let done = publisher.await.map_err(|e| BenchError::Failed {
            what: format!("a publisher failed: {e}"),
        })?;
        acked.extend(done.acked);
        for (code, n) in done.refused {
            *refused.entry(code).or_default() += n;
        }
    }
    let upstream = upstream.await.map_err(|e| BenchError::Failed {
        what: format!("the upstream publisher failed: {e}"),
    })?;
    let report = rig
        .finish(acked, refused, upstream, faults, samples, faulted, started)
        .await;
    if let Some(containerd) = rig.containerd.take() {
        containerd.stop(Duration::from_secs(10)).await;
    }
    rig.broker.stop().await;
    report
}

/// `every`, give or take half of it.
fn jitter(rng: &mut impl Rng, every: Duration) -> Duration {
    every.mul_f64(rng.random_range(0.5..1.5))
}

impl Rig {
    async fn inject(&mut self, fault: Fault, hold: Duration) -> Result<(), BenchError> {
        match fault {
            Fault::KillGateway => {
                self.gateway.kill().await;
                self.gateway.ensure_running().await?;
            }
            Fault::RestartContainerd => {
                if let Some(containerd) = self.containerd.take() {
                    containerd.stop(Duration::from_secs(10)).await;
                }
                self.containerd =
                    Some(Daemon::containerd(&self.soak.containerd, &self.containerd_dir).await?);
            }
            Fault::RestartBroker => {
                self.broker.unlisten().await;
                tokio::time::sleep(hold).await;
                self.broker.listen().await?;
            }
            Fault::DiskFull => {
                self.gateway.disk_fault_began();
                let taken = faults::fill(&self.filler)?;
                tokio::time::sleep(hold).await;
                let alive = self.gateway.pid().is_some_and(|pid| {
                    std::fs::read_to_string(format!("/proc/{pid}/stat"))
                        .is_ok_and(|s| !s.contains(") Z"))
                });
                std::fs::remove_file(&self.filler).map_err(|source| BenchError::Io {
                    context: format!("cannot remove {}", self.filler.display()),
                    source,
                })?;
                tracing::info!(taken, alive, "disk freed");
                self.gateway.disk_fault_ended();
                self.gateway.ensure_running().await?;
            }
            Fault::SlowSink => {
                self.broker.signal(libc::SIGSTOP);
                tokio::time::sleep(hold).await;
                self.broker.signal(libc::SIGCONT);
            }
            Fault::Reload => {
                self.log_batch = if self.log_batch == 100 { 200 } else { 100 };
                let upstream = self.containerd_dir.join("containerd.sock");
                write(
                    &self.config,
                    &config_text(&upstream, &self.broker.brokers(), self.log_batch),
                )?;
                if !self.gateway.signal(libc::SIGHUP) {
                    self.notes.push("a reload found no gateway running".into());
                }
            }
        }
        Ok(())
    }

    /// Reads the broker's topic to its end.
    async fn read_kafka(&mut self, timeout: Duration) -> Result<(), BenchError> {
        let mut tally = std::mem::take(&mut self.kafka);
        let brokers = self.broker.brokers();
        let (tally, result) = tokio::task::spawn_blocking(move || {
            let result = tally.read_to_end(&brokers, timeout);
            (tally, result)
        })
        .await
        .map_err(|e| BenchError::Failed {
            what: format!("reading Kafka failed: {e}"),
        })?;
        self.kafka = tally;
        result
    }

    #[allow(clippy::too_many_arguments)]
    async fn finish(
        &mut self,
        acked: Vec<String>,
        refused: BTreeMap<String, u64>,
        upstream: load::Published,
        faults: BTreeMap<Fault, usize>,
        samples: Vec<gateway::Sample>,
        faulted: Duration,
        started: Instant,
    ) -> Result<Report, BenchError> {
        let data = self.gateway.data().to_path_buf();
        let db = data.join("audit.db");
        let log = data.join("events.jsonl");
        // Everything back up, then wait until every sink holds every acknowledged
        // event (or the deadline passes and the check below says what is missing).
        let deadline = Instant::now() + DRAIN_TIMEOUT;
        // When each sink (SQLite, file, Kafka) first held every acknowledged event.
        let mut drained = [None; 3];
        while Instant::now() < deadline {
            self.gateway.ensure_running().await?;
            let kafka = self.read_kafka(Duration::from_secs(10)).await;
            let sqlite = check::sqlite_counts(&db).unwrap_or_default();
            let file = check::file_counts(&log).unwrap_or_default();
            let missing = |counts: &std::collections::HashMap<String, u32>| {
                acked.iter().filter(|id| !counts.contains_key(*id)).count()
            };
            let missing = [
                missing(&sqlite),
                missing(&file),
                missing(&self.kafka.counts),
            ];
            for (sink, missing) in missing.iter().enumerate() {
                if *missing == 0 && drained[sink].is_none() {
                    drained[sink] = Some(started.elapsed().saturating_sub(faulted));
                }
            }
            if missing == [0, 0, 0] {
                break;
            }
            tracing::info!(
                ?missing,
                kafka = ?kafka.err(),
                "waiting for the sinks (SQLite, file, Kafka) to hold every acknowledged event"
            );
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        let last_exit = self.gateway.stop(Duration::from_secs(60)).await;
        // What a clean stop left behind is what counts.
        self.read_kafka(Duration::from_secs(30)).await?;
        let sqlite = check::sqlite_counts(&db)?;
        let file = check::file_counts(&log)?;
        let (chain_ok, chain) = check::verify_chain(&self.soak.eventgate, &db).await?;
        let upstream_stored = upstream
            .acked
            .iter()
            .filter(|id| sqlite.contains_key(*id))
            .count();
        Ok(Report {
            duration: faulted,
            seed: self.soak.seed,
            rate: self.soak.rate,
            acked: acked.len(),
            refused,
            upstream_published: upstream.acked.len(),
            upstream_stored,
            faults,
            sqlite: check::compare(&acked, &sqlite, "p"),
            file: check::compare(&acked, &file, "p"),
            kafka: check::compare(&acked, &self.kafka.counts, "p"),
            chain_ok,
            chain,
            exits: self.gateway.exits.clone(),
            lives: self.gateway.lives,
            last_exit,
            drained,
            samples,
            notes: std::mem::take(&mut self.notes),
        })
    }
}
