//! Every run of a Docker container inside a gap, not only its last.
//!
//! dockerd restarts a container under its restart policy with the same id, and
//! both containerd's lists and dockerd's inspect show the last run only: a container
//! that ran three times while eventgate was away would be recorded with one run.
//! dockerd's event log (its last [`crate::docker::LOG_CAPACITY`] events, in memory)
//! still has each run's start and exit code while it reaches back past what the
//! record knows of the container; then every run is told, each with its own exit.
//! When it does not (a busy host, a long gap, dockerd restarted), `RestartCount`
//! proves how many runs a container the record never saw run made before its last,
//! their exits and times unknown. Of a container the record saw run, with the log
//! gone, only the last run can be told; the marker says so.

use std::time::SystemTime;

use super::run::{Action, EventLog, GapRuns, Logged, ManagedExit, OOM_KILLED, UNKNOWN_EXIT_STATUS};
use super::state::{TaskState, TaskStatus};

/// The last run as the daemon's side shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Last {
    /// Running: containerd's lists have its task.
    Running,
    /// Exited: dockerd's inspect has its exit.
    Exited,
    /// Neither (created and never started, or being removed).
    Other,
}

/// Where the record's knowledge of a container ends, on dockerd's clock (the host's).
#[derive(Debug, Clone, Copy)]
enum Horizon {
    /// Its last recorded run exited then: a run the log shows starting later is not
    /// recorded. (dockerd logs a run's `die` after containerd's exit time, and the
    /// next `start` after that.)
    Exited(SystemTime),
    /// Its last recorded run started then (containerd's `/tasks/start`) and its end is
    /// not recorded: the first start the log shows at or after it is that run's
    /// (dockerd logs `start` once containerd's start returned).
    Running(SystemTime),
    /// No run of it is recorded; dockerd created it then.
    Created(SystemTime),
}

impl Horizon {
    fn at(self) -> SystemTime {
        match self {
            Horizon::Exited(t) | Horizon::Running(t) | Horizon::Created(t) => t,
        }
    }
}

/// One container as a reconcile sees it, for [`gap_runs`].
pub(crate) struct Seen<'a> {
    pub id: &'a str,
    /// The record's task for it (its last recorded run), if any.
    pub recorded: Option<&'a TaskState>,
    /// dockerd's creation time for it.
    pub created_at: Option<SystemTime>,
    pub last: Last,
    /// dockerd's `RestartCount`, where an inspect said.
    pub restart_count: Option<u64>,
}

/// The runs the record is missing before the last one; `None` when there are none,
/// or none can be proven.
pub(crate) fn gap_runs(seen: &Seen<'_>, log: Option<&EventLog>) -> Option<GapRuns> {
    let horizon = match seen.recorded {
        Some(task) if task.deleted || task.status == TaskStatus::Stopped => {
            task.exited_at.map(Horizon::Exited)
        }
        Some(task) => task.started_at.map(Horizon::Running),
        None => seen.created_at.map(Horizon::Created),
    };
    let covered = |log: &EventLog| matches!((log.oldest, horizon), (Some(oldest), Some(h)) if oldest <= h.at());
    if let (Some(log), Some(horizon)) = (log, horizon)
        && covered(log)
    {
        let logged = log.containers.get(seen.id).map(Vec::as_slice);
        return told(logged.unwrap_or_default(), horizon, seen.last);
    }
    // A container the record never saw run: every run since it was last started by
    // hand is after the record's knowledge, and its last run is told as usual.
    match (seen.recorded, seen.restart_count, seen.last) {
        (None, Some(runs), Last::Running | Last::Exited) if runs > 0 => Some(GapRuns::Counted {
            runs,
            after: seen.created_at,
        }),
        _ => None,
    }
}

/// A run the log shows starting, not ended yet.
struct Open {
    started_at: SystemTime,
    oom: bool,
}

fn exit(started_at: Option<SystemTime>, at: SystemTime, code: i32, oom: bool) -> ManagedExit {
    ManagedExit {
        started_at,
        finished_at: Some(at),
        exit_code: code,
        reason: oom.then(|| OOM_KILLED.to_owned()),
    }
}

/// The runs the log shows after `horizon`, less the last one when the daemon's side
/// has it.
fn told(logged: &[Logged], horizon: Horizon, last: Last) -> Option<GapRuns> {
    let mut ended = None;
    let mut runs = Vec::new();
    let mut open: Option<Open> = None;
    // The recorded run, once its start is found (Horizon::Running).
    let mut recorded: Option<Open> = None;
    let mut seeking_recorded = matches!(horizon, Horizon::Running(_));
    for event in logged {
        let before = match horizon {
            Horizon::Exited(t) => event.at <= t,
            Horizon::Running(t) | Horizon::Created(t) => event.at < t,
        };
        if before {
            continue;
        }
        match event.action {
            Action::Start if seeking_recorded => {
                seeking_recorded = false;
                recorded = Some(Open {
                    started_at: event.at,
                    oom: false,
                });
            }
            Action::Start => {
                // dockerd logs a `die` for every run; a start without one before it
                // ends the open run at the latest then, its exit unknown.
                if let Some(run) = open.take() {
                    let code = UNKNOWN_EXIT_STATUS as i32;
                    runs.push(exit(Some(run.started_at), event.at, code, run.oom));
                }
                open = Some(Open {
                    started_at: event.at,
                    oom: false,
                });
            }
            Action::Oom => {
                if let Some(run) = open.as_mut().or(recorded.as_mut()) {
                    run.oom = true;
                }
            }
            Action::Die(code) => {
                if let Some(run) = open.take() {
                    runs.push(exit(Some(run.started_at), event.at, code, run.oom));
                } else if let Some(run) = recorded.take() {
                    ended = Some(exit(None, event.at, code, run.oom));
                } else if seeking_recorded {
                    // The recorded run's end, its start logged before the horizon.
                    seeking_recorded = false;
                    ended = Some(exit(None, event.at, code, false));
                }
                // Otherwise the end of a run that exited at the horizon (logged
                // after its exit time): recorded.
            }
        }
    }
    // The last run is the daemon's side's to tell: the run under way, or the last to
    // end when it exited.
    if last == Last::Exited && open.is_none() && recorded.is_none() && runs.pop().is_none() {
        ended = None;
    }
    let found = GapRuns::Logged { ended, runs };
    match &found {
        GapRuns::Logged { ended: None, runs } if runs.is_empty() => None,
        _ => Some(found),
    }
}

#[cfg(test)]
#[path = "runs_tests.rs"]
mod tests;
