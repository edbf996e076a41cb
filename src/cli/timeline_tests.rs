//! The words the timeline of `query --pod` prints for an event.

use std::sync::Arc;

use super::*;
use crate::event::{Clock, Origin, Workload};
use crate::testing;

fn exit(origin: Origin, reason: Option<&str>) -> Event {
    let workload = Workload {
        pod_name: Some("web-7".into()),
        container_name: Some("nginx".into()),
        reason: reason.map(str::to_owned),
        ..Workload::default()
    };
    testing::event(1)
        .at(0)
        .topic("/tasks/exit")
        .json(
            "containerd.events.TaskExit",
            r#"{"container_id":"c1","id":"c1","exit_status":137}"#,
        )
        .origin(origin)
        .workload(Some(Arc::new(workload)))
        .build()
}

/// A reconciled event says whose record it came from (containerd's as before, the
/// CRI's or dockerd's by name) and the manager's reason when there is one.
#[test]
fn reconciled_events_say_whose_record_and_why() {
    let failed = Change::Failed {
        status: 137,
        oom_killed: false,
    };
    let by = |from| Origin::Reconciled {
        clock: Clock::Daemon,
        from,
    };
    for (origin, reason, expected) in [
        (
            Origin::Live,
            None,
            "! exited with status 137: killed (SIGKILL)",
        ),
        (
            Origin::reconciled(Clock::Daemon),
            None,
            "! exited with status 137: killed (SIGKILL) [reconciled]",
        ),
        (
            by(Witness::Cri),
            Some("OOMKilled"),
            "! exited with status 137: killed (SIGKILL) [reconciled by cri, reason OOMKilled]",
        ),
        (
            by(Witness::Docker),
            None,
            "! exited with status 137: killed (SIGKILL) [reconciled by docker]",
        ),
        (
            by(Witness::Cri),
            Some(""),
            "! exited with status 137: killed (SIGKILL) [reconciled by cri]",
        ),
    ] {
        assert_eq!(what(&exit(origin, reason), failed), expected);
    }
}

/// The timeline of a finished record reads an exit that a later `/tasks/oom` explains
/// as the OOM kill it was; a followed timeline, which printed the exit already, says
/// so on the oom's line.
#[test]
fn an_exit_before_its_oom_reads_as_an_oom_kill() {
    let oom = testing::event(2)
        .at(1)
        .topic("/tasks/oom")
        .json("containerd.events.TaskOOM", r#"{"container_id":"c1"}"#)
        .workload(exit(Origin::Live, None).identity.workload.clone())
        .build();
    let events = [exit(Origin::Live, None), oom];
    let mut tally = Tally::default();
    let changes = revised(&mut tally, events.iter());
    assert_eq!(
        what(&events[0], changes[0]),
        "! exited with status 137: OOM-killed"
    );
    assert_eq!(what(&events[1], changes[1]), "! out of memory (/tasks/oom)");
    let followed = Tally::default().add(&events[0]);
    let mut live = Tally::default();
    live.add(&events[0]);
    assert_eq!(
        what(&events[0], followed),
        "! exited with status 137: killed (SIGKILL)"
    );
    assert_eq!(
        what(&events[1], live.add(&events[1])),
        "! out of memory (/tasks/oom): the status 137 exit before it was an OOM kill"
    );
}
