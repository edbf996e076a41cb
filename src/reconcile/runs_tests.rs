use std::time::{Duration, UNIX_EPOCH};

use super::*;

fn at(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_800_000_000) + Duration::from_millis(ms)
}

fn start(ms: u64) -> Logged {
    Logged {
        at: at(ms),
        action: Action::Start,
    }
}

fn die(ms: u64, code: i32) -> Logged {
    Logged {
        at: at(ms),
        action: Action::Die(code),
    }
}

fn oom(ms: u64) -> Logged {
    Logged {
        at: at(ms),
        action: Action::Oom,
    }
}

/// A log whose oldest event is at `oldest`, holding `events` of container `c`.
fn log(oldest: u64, events: &[Logged]) -> EventLog {
    EventLog {
        oldest: Some(at(oldest)),
        events: events.len() + 1,
        containers: [("c".to_owned(), events.to_vec())].into_iter().collect(),
    }
}

fn run(started: u64, finished: u64, code: i32) -> ManagedExit {
    ManagedExit {
        started_at: Some(at(started)),
        finished_at: Some(at(finished)),
        exit_code: code,
        reason: None,
    }
}

fn exited_task(exited: u64) -> TaskState {
    TaskState {
        pid: 41,
        status: TaskStatus::Stopped,
        exit_status: Some(10),
        exited_at: Some(at(exited)),
        deleted: true,
        ..TaskState::default()
    }
}

fn running_task(started: u64) -> TaskState {
    TaskState {
        pid: 41,
        status: TaskStatus::Running,
        started_at: Some(at(started)),
        ..TaskState::default()
    }
}

fn seen<'a>(recorded: Option<&'a TaskState>, last: Last, restart_count: Option<u64>) -> Seen<'a> {
    Seen {
        id: "c",
        recorded,
        created_at: Some(at(0)),
        last,
        restart_count,
    }
}

#[test]
fn after_a_recorded_exit_every_later_run_but_the_last_is_told_with_its_exit() {
    let recorded = exited_task(1000);
    // The recorded run's die is logged after its exit time; then three runs, the
    // last of which the daemon's side shows exited.
    let events = [
        start(500),
        die(1002, 10),
        start(1200),
        die(1300, 11),
        start(1500),
        oom(1590),
        die(1600, 137),
        start(1800),
        die(1900, 12),
    ];
    let found = gap_runs(
        &seen(Some(&recorded), Last::Exited, Some(3)),
        Some(&log(100, &events)),
    );
    let mut killed = run(1500, 1600, 137);
    killed.reason = Some(OOM_KILLED.to_owned());
    assert_eq!(
        found,
        Some(GapRuns::Logged {
            ended: None,
            runs: vec![run(1200, 1300, 11), killed],
        })
    );
    // Running again: the run under way is the daemon's side's, every ended one told.
    let mut running = events.to_vec();
    running.push(start(2100));
    let found = gap_runs(
        &seen(Some(&recorded), Last::Running, Some(4)),
        Some(&log(100, &running)),
    );
    assert_eq!(found.as_ref().map(GapRuns::count), Some(3));
}

#[test]
fn a_recorded_run_still_under_way_ends_with_its_logged_exit() {
    // containerd published the start at 1000; dockerd logged it just after.
    let recorded = running_task(1000);
    let events = [
        start(400),
        die(450, 1),
        start(1001),
        die(1100, 10),
        start(1300),
        die(1400, 11),
        start(1600),
    ];
    let found = gap_runs(
        &seen(Some(&recorded), Last::Running, Some(2)),
        Some(&log(100, &events)),
    );
    assert_eq!(
        found,
        Some(GapRuns::Logged {
            ended: Some(ManagedExit {
                started_at: None,
                ..run(0, 1100, 10)
            }),
            runs: vec![run(1300, 1400, 11)],
        })
    );
    // Its own exit was the last: the daemon's side tells it, as before.
    let found = gap_runs(
        &seen(Some(&recorded), Last::Exited, Some(0)),
        Some(&log(100, &events[..4])),
    );
    assert_eq!(found, None);
}

#[test]
fn a_container_never_seen_run_is_told_from_its_creation() {
    let events = [
        start(100),
        die(200, 10),
        start(400),
        die(500, 11),
        start(800),
        die(900, 12),
    ];
    let found = gap_runs(&seen(None, Last::Exited, Some(2)), Some(&log(0, &events)));
    assert_eq!(
        found,
        Some(GapRuns::Logged {
            ended: None,
            runs: vec![run(100, 200, 10), run(400, 500, 11)],
        })
    );
    // Nothing before the last: nothing to tell.
    assert_eq!(
        gap_runs(
            &seen(None, Last::Exited, Some(0)),
            Some(&log(0, &events[..2]))
        ),
        None
    );
}

#[test]
fn a_log_that_does_not_reach_back_leaves_the_restart_count() {
    let events = [start(800), die(900, 12)];
    // The log's oldest event is after the container's creation: runs may be gone
    // from it. RestartCount proves two runs before the last.
    let short = log(50, &events);
    let found = gap_runs(&seen(None, Last::Exited, Some(2)), Some(&short));
    assert_eq!(
        found,
        Some(GapRuns::Counted {
            runs: 2,
            after: Some(at(0)),
        })
    );
    // No log at all: the same.
    assert_eq!(gap_runs(&seen(None, Last::Running, Some(2)), None), found);
    // A container the record saw run: its count then is unknown, nothing is proven.
    let recorded = exited_task(10);
    assert_eq!(
        gap_runs(&seen(Some(&recorded), Last::Exited, Some(5)), Some(&short)),
        None
    );
    // Never restarted by its policy, or never started: nothing before the last.
    assert_eq!(gap_runs(&seen(None, Last::Exited, Some(0)), None), None);
    assert_eq!(gap_runs(&seen(None, Last::Other, Some(3)), None), None);
    // A recorded run whose start time is unknown cannot be placed in the log.
    let unplaced = TaskState {
        started_at: None,
        ..running_task(0)
    };
    assert_eq!(
        gap_runs(
            &seen(Some(&unplaced), Last::Exited, Some(2)),
            Some(&log(0, &events))
        ),
        None
    );
}

#[test]
fn a_start_without_a_die_before_it_ends_the_open_run_unknown() {
    let events = [start(100), start(300), die(400, 3), start(600)];
    let found = gap_runs(&seen(None, Last::Running, Some(2)), Some(&log(0, &events)));
    let unknown = ManagedExit {
        started_at: Some(at(100)),
        finished_at: Some(at(300)),
        exit_code: 255,
        reason: None,
    };
    assert_eq!(
        found,
        Some(GapRuns::Logged {
            ended: None,
            runs: vec![unknown, run(300, 400, 3)],
        })
    );
}
