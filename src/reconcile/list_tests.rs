use std::time::{Duration, UNIX_EPOCH};

use prost_types::Timestamp;

use super::*;
use crate::proto::containerd::services::containers::v1::container::Runtime;
use crate::proto::containerd::types::Descriptor;

fn ts(seconds: i64, nanos: i32) -> Option<Timestamp> {
    Some(Timestamp { seconds, nanos })
}

#[test]
fn zero_and_absent_timestamps_are_none() {
    assert_eq!(daemon_time(None), None);
    // An unset field on the wire, and Go's zero time.Time as containerd encodes it.
    assert_eq!(daemon_time(ts(0, 0)), None);
    assert_eq!(daemon_time(ts(GO_ZERO_SECONDS, 0)), None);
    assert_eq!(
        daemon_time(ts(1_700_000_000, 5)),
        Some(UNIX_EPOCH + Duration::new(1_700_000_000, 5))
    );
    // Near, but not, zero is a real time.
    assert_eq!(
        daemon_time(ts(0, 1)),
        Some(UNIX_EPOCH + Duration::from_nanos(1))
    );
}

fn process(id: &str, container_id: &str, status: TaskStatus) -> Process {
    Process {
        id: id.into(),
        container_id: container_id.into(),
        pid: 42,
        status: status as i32,
        exit_status: 3,
        exited_at: ts(1_700_000_000, 0),
        ..Default::default()
    }
}

#[test]
fn only_a_stopped_task_has_an_exit() {
    let (id, running) = task_state(process("c1", "", TaskStatus::Running)).unwrap();
    assert_eq!(id, "c1");
    assert_eq!(running.status, TaskStatus::Running);
    assert_eq!(running.pid, 42);
    assert_eq!((running.exit_status, running.exited_at), (None, None));

    let (_, stopped) = task_state(process("c1", "", TaskStatus::Stopped)).unwrap();
    assert_eq!(stopped.exit_status, Some(3));
    assert_eq!(
        stopped.exited_at,
        Some(UNIX_EPOCH + Duration::from_secs(1_700_000_000))
    );
}

#[test]
fn tasks_are_keyed_by_container_and_execs_are_not_tasks() {
    let by_container = task_state(process("", "c1", TaskStatus::Running)).unwrap();
    assert_eq!(by_container.0, "c1");
    let both = task_state(process("c1", "c1", TaskStatus::Running)).unwrap();
    assert_eq!(both.0, "c1");
    assert!(task_state(process("exec-1", "c1", TaskStatus::Running)).is_none());
    assert!(task_state(process("", "", TaskStatus::Running)).is_none());
}

#[test]
fn listed_fields_are_known_even_when_empty() {
    let (id, container) = container_state(Container {
        id: "c1".into(),
        image: "img".into(),
        runtime: Some(Runtime {
            name: "io.containerd.runc.v2".into(),
            options: None,
        }),
        ..Default::default()
    });
    assert_eq!(id, "c1");
    assert_eq!(container.runtime, "io.containerd.runc.v2");
    assert_eq!(container.labels, Some(Labels::new()));
    assert_eq!(container.created_at, None);

    let (name, image) = image_state(Image {
        name: "docker.io/library/busybox:latest".into(),
        target: Some(Descriptor {
            digest: "sha256:ab".into(),
            ..Default::default()
        }),
        ..Default::default()
    });
    assert_eq!(name, "docker.io/library/busybox:latest");
    assert_eq!(image.target_digest.as_deref(), Some("sha256:ab"));
    assert_eq!(image.labels, Some(Labels::new()));
}
