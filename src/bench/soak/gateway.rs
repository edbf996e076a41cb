//! The gateway under soak: `eventgate serve` as a child process, started again
//! whenever it exits, with its resource use sampled from /proc.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

use super::super::BenchError;

/// One look at the gateway's resources.
#[derive(Clone, Copy, Debug)]
pub(super) struct Sample {
    /// Seconds since the soak started.
    pub at: f64,
    /// Which process (0 for the first, counting every start).
    pub life: usize,
    /// Seconds since this process started.
    pub age: f64,
    pub rss_kib: u64,
    pub fds: u64,
    pub threads: u64,
    /// Bytes of the spool directory and of the SQLite store (with its WAL): they
    /// grow with what is stored, so they are shown, not checked for growth.
    pub spool_bytes: u64,
    pub store_bytes: u64,
}

/// How long after a disk fault ends a status-1 exit is still its doing: a failed
/// spool write drains the forwarders for up to `pipeline.drain_timeout` (30 s by
/// default) before the process exits.
const DISK_EXIT_GRACE: Duration = Duration::from_secs(40);

/// How a gateway process ended.
#[derive(Clone, Debug, Default)]
pub(super) struct Exits {
    /// Killed by the soak (SIGKILL fault).
    pub killed: usize,
    /// Exited on its own with status 1 while a disk fault was held or within
    /// [`DISK_EXIT_GRACE`] of its end: a spool write that met the full disk.
    pub status_1: usize,
    /// Every other exit the soak did not cause (status 1 with no disk fault to
    /// explain it included); each one is listed, and each fails the run.
    pub unexpected: Vec<String>,
    /// Starts that failed (exited or not ready in time), each retried.
    pub failed_starts: usize,
}

pub(super) struct Gateway {
    binary: PathBuf,
    data: PathBuf,
    config: PathBuf,
    log: PathBuf,
    child: Option<Child>,
    started: Instant,
    pub lives: usize,
    pub exits: Exits,
    /// The last disk fault: when it began, and when the disk was freed (`None`
    /// while it is held).
    disk_fault: Option<(Instant, Option<Instant>)>,
    /// When the soak began, for the times in exit descriptions.
    soak_started: Instant,
}

impl Gateway {
    pub(super) fn new(binary: &Path, data: &Path, config: &Path, log: &Path) -> Self {
        Self {
            binary: binary.to_path_buf(),
            data: data.to_path_buf(),
            config: config.to_path_buf(),
            log: log.to_path_buf(),
            child: None,
            started: Instant::now(),
            lives: 0,
            exits: Exits::default(),
            disk_fault: None,
            soak_started: Instant::now(),
        }
    }

    /// A disk fault begins: a status-1 exit from now on is its doing.
    pub(super) fn disk_fault_began(&mut self) {
        self.disk_fault = Some((Instant::now(), None));
    }

    /// The disk was freed.
    pub(super) fn disk_fault_ended(&mut self) {
        if let Some((began, None)) = self.disk_fault {
            self.disk_fault = Some((began, Some(Instant::now())));
        }
    }

    /// Whether a disk fault is held, or ended recently enough that the drain it
    /// caused may still be running.
    fn disk_fault_explains_exit(&self) -> bool {
        match self.disk_fault {
            Some((_, None)) => true,
            Some((_, Some(ended))) => ended.elapsed() <= DISK_EXIT_GRACE,
            None => false,
        }
    }

    pub(super) fn data(&self) -> &Path {
        &self.data
    }

    pub(super) fn socket(&self) -> PathBuf {
        self.data.join("eventgate.sock")
    }

    pub(super) fn pid(&self) -> Option<i32> {
        self.child.as_ref()?.id().map(|p| p as i32)
    }

    /// Starts a gateway if none is running (or the last one exited), waiting until
    /// its socket accepts connections. A start that fails is counted; the caller
    /// tries again later.
    pub(super) async fn ensure_running(&mut self) -> Result<bool, BenchError> {
        if let Some(child) = &mut self.child {
            match child.try_wait() {
                Ok(None) => return Ok(true),
                Ok(Some(status)) => {
                    match status.code() {
                        Some(1) if self.disk_fault_explains_exit() => self.exits.status_1 += 1,
                        _ => self.exits.unexpected.push(format!(
                            "{status} at {:.1} s, process {} (no fault active explains it)",
                            self.soak_started.elapsed().as_secs_f64(),
                            self.lives.saturating_sub(1)
                        )),
                    }
                    tracing::warn!(%status, "the gateway exited; starting it again");
                    self.child = None;
                }
                Err(source) => {
                    return Err(BenchError::Io {
                        context: "cannot wait for the gateway".into(),
                        source,
                    });
                }
            }
        }
        self.start().await
    }

    async fn start(&mut self) -> Result<bool, BenchError> {
        let io = |context: String| move |source| BenchError::Io { context, source };
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(io(format!("cannot open {}", self.log.display())))?;
        let stderr = log
            .try_clone()
            .map_err(io(format!("cannot reuse {}", self.log.display())))?;
        let mut command = Command::new(&self.binary);
        command
            .arg("serve")
            .arg("--data-dir")
            .arg(&self.data)
            .arg("--config")
            .arg(&self.config)
            .env("EVENTGATE_LOG", "info")
            .env("EVENTGATE_ADMIN", "127.0.0.1:0")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(stderr)
            .process_group(0)
            .kill_on_drop(true);
        let mut child = command.spawn().map_err(|source| BenchError::Spawn {
            what: "eventgate",
            source,
        })?;
        let deadline = Instant::now() + Duration::from_secs(30);
        let socket = self.socket();
        loop {
            if tokio::net::UnixStream::connect(&socket).await.is_ok() {
                break;
            }
            let exited = matches!(child.try_wait(), Ok(Some(_)));
            if exited || Instant::now() > deadline {
                let _ = child.kill().await;
                self.exits.failed_starts += 1;
                return Ok(false);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.child = Some(child);
        self.started = Instant::now();
        self.lives += 1;
        Ok(true)
    }

    /// SIGKILL, reaped at once.
    pub(super) async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
            self.exits.killed += 1;
        }
    }

    pub(super) fn signal(&self, signal: libc::c_int) -> bool {
        match self.pid() {
            // SAFETY: a plain syscall on our own child's pid.
            Some(pid) => unsafe { libc::kill(pid, signal) == 0 },
            None => false,
        }
    }

    /// SIGTERM and the exit status; SIGKILL after `grace`.
    pub(super) async fn stop(&mut self, grace: Duration) -> Option<String> {
        let mut child = self.child.take()?;
        if let Some(pid) = child.id() {
            // SAFETY: as in `signal`.
            unsafe { libc::kill(pid as i32, libc::SIGTERM) };
        }
        match tokio::time::timeout(grace, child.wait()).await {
            Ok(Ok(status)) => Some(status.to_string()),
            _ => {
                let _ = child.kill().await;
                Some(format!("killed after {grace:?} without exiting"))
            }
        }
    }

    pub(super) fn sample(&self, since: Instant) -> Option<Sample> {
        let pid = self.pid()?;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let field = |name: &str| -> Option<u64> {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        };
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64;
        let file_bytes =
            |name: &str| std::fs::metadata(self.data.join(name)).map_or(0, |m| m.len());
        Some(Sample {
            at: since.elapsed().as_secs_f64(),
            life: self.lives.saturating_sub(1),
            age: self.started.elapsed().as_secs_f64(),
            rss_kib: field("VmRSS")?,
            fds,
            threads: field("Threads")?,
            spool_bytes: dir_bytes(&self.data.join("spool")),
            store_bytes: file_bytes("audit.db") + file_bytes("audit.db-wal"),
        })
    }
}

/// The bytes of the files under `dir` (two levels: the spool's segments are in a
/// directory of their own).
fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| match entry.metadata() {
            Ok(meta) if meta.is_dir() => std::fs::read_dir(entry.path()).map_or(0, |inner| {
                inner
                    .flatten()
                    .filter_map(|e| e.metadata().ok())
                    .map(|m| m.len())
                    .sum()
            }),
            Ok(meta) => meta.len(),
            Err(_) => 0,
        })
        .sum()
}
