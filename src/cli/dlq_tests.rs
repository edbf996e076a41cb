//! Rendering dead letters for `dlq list`.

use super::*;

#[test]
fn long_errors_are_cut_on_a_character_boundary() {
    assert_eq!(truncate("short", 10), "short");
    assert_eq!(truncate("ééééééééééé", 5), "éééé…");
    assert_eq!(
        short_time("2024-05-01T10:00:00.123456789Z"),
        "2024-05-01T10:00:00Z"
    );
}

/// A dead letter's `container`, `pod` and `node` are the JSON line's, key for key.
#[test]
fn the_workload_is_listed_as_json_lines_show_it() {
    use std::sync::Arc;

    use prost::Message as _;

    use crate::deadletter::{Reason, State};
    use crate::event::Origin;
    use crate::testing;

    let pod = Workload {
        kind: Some("container".into()),
        pod_name: Some("web-7".into()),
        pod_namespace: Some("shop".into()),
        pod_uid: Some("0b1c".into()),
        container_name: Some("nginx".into()),
        image: "docker.io/library/nginx:1.27".into(),
        labels: [("app".to_owned(), "web".to_owned())].into(),
        reason: None,
    };
    let plain = Workload {
        image: "busybox".into(),
        ..Workload::default()
    };
    for (workload, node) in [
        (Some(pod), Some("web-1")),
        (Some(plain), None),
        (None, Some("db \"1\"")),
    ] {
        let event = testing::event(1)
            .at(0)
            .json("containerd.events.TaskExit", "{}")
            .workload(workload.clone().map(Arc::new))
            .build()
            .with_node(node.map(Arc::from));
        let entry = Entry {
            id: 1,
            forwarder: "kafka".into(),
            event_id: event.identity.id.to_string(),
            seq: 1,
            source: "publish".into(),
            envelope: event.envelope.encode_to_vec(),
            received_at: "2024-05-01T10:00:00.000000000Z".into(),
            error: "refused".into(),
            reason: Reason::Permanent,
            attempts: 1,
            first_attempt_at: "t".into(),
            last_attempt_at: "t".into(),
            dead_at: "t".into(),
            retry_requested_at: None,
            state: State::Dead,
            publisher: None,
            origin: Origin::Live,
            workload,
            node: node.map(String::from),
            node_seq: None,
            node_source: None,
        };
        let listed = json_line(&entry);
        let line: Value = serde_json::from_str(&render::event_json(&event)).unwrap();
        for key in ["container", "pod", "node"] {
            assert_eq!(listed.get(key), line.get(key), "{key}: {listed}");
        }
    }
}

/// A dead letter's `origin`, `origin_clock`, `reconciled_from` and `reason` are the
/// JSON line's, and a live one has none of the last three.
#[test]
fn the_witness_and_reason_are_listed_as_json_lines_show_them() {
    use std::sync::Arc;

    use prost::Message as _;

    use crate::deadletter::{Reason, State};
    use crate::event::{Clock, Origin, Witness};
    use crate::testing;

    let oom = Workload {
        pod_name: Some("web-7".into()),
        container_name: Some("nginx".into()),
        reason: Some("OOMKilled".into()),
        ..Workload::default()
    };
    let cri = Origin::Reconciled {
        clock: Clock::Daemon,
        from: Witness::Cri,
    };
    for (origin, workload) in [
        (cri, Some(oom)),
        (Origin::reconciled(Clock::Reconcile), None),
        (Origin::Live, None),
    ] {
        let event = testing::event(1)
            .at(0)
            .json("containerd.events.TaskExit", "{}")
            .origin(origin)
            .workload(workload.clone().map(Arc::new))
            .build();
        let entry = Entry {
            id: 1,
            forwarder: "kafka".into(),
            event_id: event.identity.id.to_string(),
            seq: 1,
            source: "publish".into(),
            envelope: event.envelope.encode_to_vec(),
            received_at: "2024-05-01T10:00:00.000000000Z".into(),
            error: "refused".into(),
            reason: Reason::Permanent,
            attempts: 1,
            first_attempt_at: "t".into(),
            last_attempt_at: "t".into(),
            dead_at: "t".into(),
            retry_requested_at: None,
            state: State::Dead,
            publisher: None,
            origin,
            workload,
            node: None,
            node_seq: None,
            node_source: None,
        };
        let listed = json_line(&entry);
        let line: Value = serde_json::from_str(&render::event_json(&event)).unwrap();
        for key in ["origin", "origin_clock", "reconciled_from", "reason"] {
            assert_eq!(listed.get(key), line.get(key), "{key}: {listed}");
        }
        if origin == cri {
            assert_eq!(listed["reconciled_from"], "cri");
            assert_eq!(listed["reason"], "OOMKilled");
            assert_eq!(listed["dead_letter"]["reason"], "permanent");
        }
    }
}
