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
