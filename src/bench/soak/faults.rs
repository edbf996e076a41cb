//! The faults the soak injects, one at a time, each chosen at random.

use std::path::Path;
use std::time::Duration;

use super::super::BenchError;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Fault {
    /// SIGKILL of the gateway, started again at once.
    KillGateway,
    /// containerd (the gateway's upstream) stopped with SIGTERM and started again
    /// on the same root, state and socket.
    RestartContainerd,
    /// The Kafka broker's listener closed (every connection cut, new ones refused)
    /// for 2 to 6 seconds, then open again in front of the same log.
    RestartBroker,
    /// A file taking every free block of the data directory's file system, held a
    /// few seconds and removed.
    DiskFull,
    /// The broker frozen (SIGSTOP) for 2 to 6 seconds: a sink that does not answer.
    SlowSink,
    /// The configuration rewritten (the file forwarder's batch size) and SIGHUP.
    Reload,
}

impl Fault {
    pub(crate) const ALL: [Fault; 6] = [
        Fault::KillGateway,
        Fault::RestartContainerd,
        Fault::RestartBroker,
        Fault::DiskFull,
        Fault::SlowSink,
        Fault::Reload,
    ];

    pub(crate) fn label(self) -> &'static str {
        match self {
            Fault::KillGateway => "SIGKILL of eventgate",
            Fault::RestartContainerd => "containerd restart",
            Fault::RestartBroker => "broker stop and start (down 2-6 s)",
            Fault::DiskFull => "disk full, then freed",
            Fault::SlowSink => "slow sink (broker frozen 2-6 s)",
            Fault::Reload => "reload (SIGHUP, changed batch size)",
        }
    }
}

/// Fills the file system of `path` with one file: every block `fallocate` gives,
/// then writes until ENOSPC. Returns the bytes it took.
pub(super) fn fill(path: &Path) -> Result<u64, BenchError> {
    use std::io::Write;
    use std::os::fd::AsRawFd;
    let io = |source| BenchError::Io {
        context: format!("cannot fill the disk with {}", path.display()),
        source,
    };
    let mut file = std::fs::File::create(path).map_err(io)?;
    let free = free_bytes(path.parent().unwrap_or(path)).unwrap_or(0);
    // Leaves a few pages for the last writes to find and fill.
    let bulk = free.saturating_sub(1 << 16) as libc::off_t;
    if bulk > 0 {
        // SAFETY: fallocate on a file descriptor we own; a failure only returns -1.
        unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, bulk) };
    }
    let end = file.metadata().map_err(io)?.len();
    let mut written = end;
    if end > 0 {
        std::io::Seek::seek(&mut file, std::io::SeekFrom::Start(end)).map_err(io)?;
    }
    let chunk = vec![0x5a_u8; 4096];
    loop {
        match file.write(&chunk) {
            Ok(0) => break,
            Ok(n) => written += n as u64,
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
            Err(e) => return Err(io(e)),
        }
    }
    Ok(written)
}

pub(super) fn free_bytes(dir: &Path) -> Option<u64> {
    crate::spool::space::usage(dir).ok().map(|u| u.free)
}

/// How long a disk stays full, a broker frozen.
pub(super) fn hold(rng: &mut impl rand::Rng, fault: Fault) -> Duration {
    match fault {
        Fault::SlowSink | Fault::RestartBroker => {
            Duration::from_millis(rng.random_range(2000..6000))
        }
        Fault::DiskFull => Duration::from_millis(rng.random_range(2000..5000)),
        _ => Duration::ZERO,
    }
}
