//! What a run of a container is to a reconcile once it ended, and the runs a gap
//! hid behind a container's last one: plain data, shared by the managers' views
//! (`managed`), the daemon's side of a reconcile (`state`), the search for hidden
//! runs (`runs`) and the diff that tells them.

use std::collections::BTreeMap;
use std::time::SystemTime;

/// The exit status containerd (and its CRI plugin) records when a process's real one
/// is unknown.
pub(crate) const UNKNOWN_EXIT_STATUS: u32 = 255;

/// The CRI's reason for a container the kernel's OOM killer ended (dockerd's
/// `State.OOMKilled` is told the same way).
pub(crate) const OOM_KILLED: &str = "OOMKilled";

/// The run that ended, from a manager's per-container status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ManagedExit {
    /// `None` for a container that never started (its start failed).
    pub started_at: Option<SystemTime>,
    pub finished_at: Option<SystemTime>,
    pub exit_code: i32,
    pub reason: Option<String>,
}

/// What dockerd's event log says of containers' runs, as read for a gap.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct EventLog {
    /// The oldest event the log still holds, of any kind: the log tells every run
    /// after it, and nothing before.
    pub oldest: Option<SystemTime>,
    /// How many events it held.
    pub events: usize,
    /// Each container's starts, OOM kills and exits, in the order dockerd logged them.
    pub containers: BTreeMap<String, Vec<Logged>>,
}

/// One event of a container's runs, at dockerd's time for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Logged {
    pub at: SystemTime,
    pub action: Action,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    Start,
    Oom,
    /// The run ended with this exit code (dockerd's `die`).
    Die(i32),
}

/// The runs of one container that the record is missing, before the last one (which
/// the daemon's side shows as any other container's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum GapRuns {
    /// From dockerd's log: the end of the run the record saw start and not end
    /// (`ended`), then whole runs, each with its start, exit code and exit time.
    Logged {
        ended: Option<ManagedExit>,
        runs: Vec<ManagedExit>,
    },
    /// From `RestartCount`: this many whole runs, whose exits and times are unknown;
    /// all of them after `after` (the container's creation) and before the last.
    Counted {
        runs: u64,
        after: Option<SystemTime>,
    },
}

impl GapRuns {
    /// How many runs it tells, counting the end of the recorded run as none.
    pub(crate) fn count(&self) -> u64 {
        match self {
            GapRuns::Logged { runs, .. } => runs.len() as u64,
            GapRuns::Counted { runs, .. } => *runs,
        }
    }
}
