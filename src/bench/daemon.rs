//! Starting and stopping the daemons a benchmark (or a test) measures: eventgate and
//! a real containerd, each in its own temporary directory with its own socket.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

use super::BenchError;
use super::containerd_config::{containerd_config, containerd_cri_config};

/// A daemon process that is stopped (SIGTERM, then SIGKILL) when dropped.
pub(crate) struct Daemon {
    name: &'static str,
    child: Child,
    socket: PathBuf,
    /// Ready when this TCP address accepts connections (instead of the socket).
    tcp: Option<std::net::SocketAddr>,
    log: PathBuf,
}

impl Daemon {
    /// Starts containerd with a private root, state and socket under `dir`, the CRI
    /// plugin disabled and no network configuration needed.
    pub(crate) async fn containerd(binary: &Path, dir: &Path) -> Result<Self, BenchError> {
        Self::containerd_with(binary, dir, containerd_config).await
    }

    /// [`Daemon::containerd`] with its CRI plugin enabled: pods run `sandbox_image` (a
    /// name in namespace `k8s.io`) as their sandbox and use the host network.
    pub(crate) async fn containerd_cri(
        binary: &Path,
        dir: &Path,
        sandbox_image: &str,
    ) -> Result<Self, BenchError> {
        Self::containerd_with(binary, dir, |dir, socket| {
            containerd_cri_config(dir, socket, sandbox_image)
        })
        .await
    }

    async fn containerd_with(
        binary: &Path,
        dir: &Path,
        config_of: impl FnOnce(&Path, &Path) -> String,
    ) -> Result<Self, BenchError> {
        let config = dir.join("containerd.toml");
        let socket = dir.join("containerd.sock");
        let text = config_of(dir, &socket);
        std::fs::write(&config, text).map_err(|source| BenchError::Io {
            context: format!("cannot write {}", config.display()),
            source,
        })?;
        let mut command = Command::new(binary);
        command.arg("--config").arg(&config);
        // Out of the terminal's process group: a Ctrl-C meant for the benchmark must
        // not stop containerd before the benchmark has removed its tasks through it.
        command.process_group(0);
        Self::spawn("containerd", command, socket, dir.join("containerd.log")).await
    }

    /// Starts `eventgate serve` with its data directory under `dir`.
    pub(crate) async fn eventgate(
        binary: &Path,
        dir: &Path,
        extra: &[&str],
    ) -> Result<Self, BenchError> {
        Self::eventgate_within(binary, dir, extra, Duration::from_secs(30)).await
    }

    /// [`Daemon::eventgate`], waiting up to `ready` for its socket (a gateway opening
    /// a large spool takes longer).
    pub(crate) async fn eventgate_within(
        binary: &Path,
        dir: &Path,
        extra: &[&str],
        ready: Duration,
    ) -> Result<Self, BenchError> {
        let data = dir.join("eventgate");
        let socket = data.join("eventgate.sock");
        let mut command = Command::new(binary);
        command
            .arg("serve")
            .arg("--data-dir")
            .arg(&data)
            .args(extra);
        command.env("EVENTGATE_LOG", "warn");
        // Side by side with any other gateway on the machine.
        command.env("EVENTGATE_ADMIN", "127.0.0.1:0");
        Self::spawn_ready(
            "eventgate",
            command,
            socket,
            None,
            dir.join("eventgate.log"),
            ready,
        )
        .await
    }

    /// Starts a tansu Kafka-protocol broker with in-memory storage on a free loopback
    /// port; returns it with its bootstrap address.
    pub(crate) async fn tansu(binary: &Path, dir: &Path) -> Result<(Self, String), BenchError> {
        Self::tansu_on(binary, dir, free_port()?).await
    }

    /// [`Daemon::tansu`] on a given loopback port (one a gateway was already told to
    /// use while nothing listened there).
    pub(crate) async fn tansu_on(
        binary: &Path,
        dir: &Path,
        port: u16,
    ) -> Result<(Self, String), BenchError> {
        let url = format!("tcp://127.0.0.1:{port}");
        let mut command = Command::new(binary);
        command
            .arg("broker")
            .arg("--storage-engine")
            .arg("memory://tansu/")
            .arg("--listener-url")
            .arg(&url)
            .arg("--advertised-listener-url")
            .arg(&url);
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        let daemon = Self::spawn_ready(
            "tansu",
            command,
            PathBuf::new(),
            Some(addr),
            dir.join("tansu.log"),
            Duration::from_secs(30),
        )
        .await?;
        Ok((daemon, format!("127.0.0.1:{port}")))
    }

    async fn spawn(
        name: &'static str,
        command: Command,
        socket: PathBuf,
        log: PathBuf,
    ) -> Result<Self, BenchError> {
        Self::spawn_ready(name, command, socket, None, log, Duration::from_secs(30)).await
    }

    async fn spawn_ready(
        name: &'static str,
        mut command: Command,
        socket: PathBuf,
        tcp: Option<std::net::SocketAddr>,
        log: PathBuf,
        ready: Duration,
    ) -> Result<Self, BenchError> {
        let log_file = std::fs::File::create(&log).map_err(|source| BenchError::Io {
            context: format!("cannot create {}", log.display()),
            source,
        })?;
        let stderr = log_file.try_clone().map_err(|source| BenchError::Io {
            context: format!("cannot reuse {}", log.display()),
            source,
        })?;
        command
            .stdin(Stdio::null())
            .stdout(log_file)
            .stderr(stderr)
            .kill_on_drop(true);
        let child = command
            .spawn()
            .map_err(|source| BenchError::Spawn { what: name, source })?;
        let mut daemon = Self {
            name,
            child,
            socket,
            tcp,
            log,
        };
        daemon.wait_ready(ready).await?;
        Ok(daemon)
    }

    pub(crate) fn socket(&self) -> &Path {
        &self.socket
    }

    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Peak resident memory so far (VmHWM), in bytes.
    pub(crate) fn peak_rss(&self) -> Option<u64> {
        memory(&self.pid()?.to_string(), "VmHWM")
    }

    /// Resident memory now (VmRSS), in bytes.
    pub(crate) fn rss(&self) -> Option<u64> {
        memory(&self.pid()?.to_string(), "VmRSS")
    }

    /// Makes the peak (VmHWM) start again from the current RSS, so that
    /// [`Daemon::peak_rss`] is the peak from now on. Needs root or the process's
    /// owner; false when it could not be done (the peak then counts from the start).
    pub(crate) fn reset_peak_rss(&self) -> bool {
        self.pid().is_some_and(|pid| reset_peak(&pid.to_string()))
    }

    /// CPU time (user + system) the daemon has used so far.
    pub(crate) fn cpu_time(&self) -> Option<Duration> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid()?)).ok()?;
        // Fields after the parenthesised command name; utime and stime are 14 and 15.
        let rest = stat.rsplit_once(')')?.1;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks: u64 =
            fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
        Some(Duration::from_secs_f64(ticks as f64 / clock_ticks()))
    }

    /// Ready means the socket accepts connections; polled with a deadline.
    async fn wait_ready(&mut self, timeout: Duration) -> Result<(), BenchError> {
        let deadline = Instant::now() + timeout;
        loop {
            let ready = match self.tcp {
                Some(addr) => tokio::net::TcpStream::connect(addr).await.is_ok(),
                None => tokio::net::UnixStream::connect(&self.socket).await.is_ok(),
            };
            if ready {
                return Ok(());
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(BenchError::Exited {
                    what: self.name,
                    status: status.to_string(),
                    log: tail(&self.log),
                });
            }
            if Instant::now() > deadline {
                return Err(BenchError::NotReady {
                    what: self.name,
                    timeout,
                    log: tail(&self.log),
                });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGTERM, then SIGKILL if it has not exited within `grace`.
    pub(crate) async fn stop(mut self, grace: Duration) {
        if let Some(pid) = self.child.id() {
            // SAFETY: plain syscall on a pid we own; a stale pid only yields ESRCH.
            unsafe {
                libc::kill(pid as libc::pid_t, libc::SIGTERM);
            }
        }
        if tokio::time::timeout(grace, self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}

/// A loopback TCP port nothing listens on right now.
pub(crate) fn free_port() -> Result<u16, BenchError> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|addr| addr.port())
        .map_err(|source| BenchError::Io {
            context: "cannot find a free port".into(),
            source,
        })
}

fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 { ticks as f64 } else { 100.0 }
}

/// CPU time (user + system) this process has used so far.
pub(crate) fn own_cpu_time() -> Duration {
    // SAFETY: getrusage only writes into the struct we pass.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return Duration::ZERO;
    }
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// A memory figure of `/proc/<pid>/status` (`VmRSS`, `VmHWM`), in bytes; `pid` may
/// be `self`.
pub(crate) fn memory(pid: &str, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rest = status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))?;
    let kib: u64 = rest.split_whitespace().next()?.parse().ok()?;
    Some(kib * 1024)
}

/// Resets a process's VmHWM to its current RSS (`clear_refs` mode 5).
pub(crate) fn reset_peak(pid: &str) -> bool {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok()
}

/// The last lines of a daemon's log, for error messages.
fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}
