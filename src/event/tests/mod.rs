mod conformance;

use super::*;
use crate::testing;

const ALL: [Origin; 3] = [
    Origin::Live,
    Origin::reconciled(Clock::Daemon),
    Origin::reconciled(Clock::Reconcile),
];

/// eventgate's own filters see the origin; Subscribe's adaptor, containerd's
/// envelope fields alone, does not.
#[test]
fn origin_fields_are_in_the_record_fields_only() {
    let plain = testing::event(1)
        .at(0)
        .json("containerd.events.TaskExit", "{}")
        .build();
    assert_eq!(plain.identity.origin, Origin::Live, "live unless set");
    let path = |text: &str| -> Vec<String> { text.split('.').map(str::to_owned).collect() };
    for origin in ALL {
        let event = testing::event(1)
            .at(0)
            .json("containerd.events.TaskExit", "{}")
            .origin(origin)
            .build();
        let fields = event.record_fields();
        assert_eq!(
            fields.field(&path("origin")).as_deref(),
            Some(origin.label())
        );
        assert_eq!(
            fields.field(&path("origin.anything")).as_deref(),
            Some(origin.label()),
            "only the first component counts, as for namespace and topic"
        );
        assert_eq!(
            fields.field(&path("origin_clock")).as_deref(),
            origin.clock().map(Clock::label)
        );
        assert_eq!(fields.field(&path("topic")).as_deref(), Some("/tasks/exit"));
        assert_eq!(event.field(&path("origin")), None);
        assert_eq!(event.field(&path("origin_clock")), None);
    }
}

/// Whose record a reconciled event came from and the manager's reason are
/// eventgate's own fields too; Subscribe's adaptor sees neither.
#[test]
fn witness_and_reason_fields_are_in_the_record_fields_only() {
    use crate::filter::Filter;
    let path = |text: &str| -> Vec<String> { text.split('.').map(str::to_owned).collect() };
    let oom = Workload {
        pod_name: Some("web-7".into()),
        reason: Some("OOMKilled".into()),
        ..Workload::default()
    };
    let from_cri = testing::event(1)
        .at(0)
        .json("containerd.events.TaskExit", "{}")
        .origin(Origin::Reconciled {
            clock: Clock::Daemon,
            from: Witness::Cri,
        })
        .workload(Some(Arc::new(oom)))
        .build();
    let fields = from_cri.record_fields();
    assert_eq!(
        fields.field(&path("reconciled_from")).as_deref(),
        Some("cri")
    );
    assert_eq!(
        fields.field(&path("reconciled_from.x")).as_deref(),
        Some("cri"),
        "only the first component counts"
    );
    assert_eq!(fields.field(&path("reason")).as_deref(), Some("OOMKilled"));
    assert_eq!(from_cri.field(&path("reconciled_from")), None);
    assert_eq!(from_cri.field(&path("reason")), None);
    let matches =
        |text: &str, event: &Event| Filter::parse(text).unwrap().matches(&event.record_fields());
    assert!(matches("reconciled_from==cri,reason==OOMKilled", &from_cri));
    assert!(!Filter::parse("reason").unwrap().matches(&from_cri));

    let containerd = testing::event(2)
        .at(0)
        .json("containerd.events.TaskExit", "{}")
        .origin(Origin::reconciled(Clock::Reconcile))
        .workload(testing::workload("nginx", &[]))
        .build();
    assert!(matches("reconciled_from==containerd", &containerd));
    assert!(!matches("reason", &containerd), "no reason: absent");
    let live = testing::event(3)
        .at(0)
        .json("containerd.events.TaskExit", "{}")
        .build();
    assert!(!matches("reconciled_from", &live), "live: absent");
    assert!(matches("reconciled_from!=cri", &live));
    assert!(!matches("reason", &live));
}

/// What the container's record said, as eventgate's own filters see it: through a
/// parsed filter, label keys with dots included; Subscribe's adaptor sees none.
#[test]
fn workload_fields_are_in_the_record_fields_only() {
    use crate::filter::Filter;
    let labels = [
        (workload::POD_NAME, "web-7"),
        (workload::POD_NAMESPACE, "shop"),
        (workload::KIND, "sandbox"),
        ("app.kubernetes.io/name", "web"),
    ];
    let event = testing::event(1)
        .at(0)
        .json("containerd.events.TaskExit", "{}")
        .workload(testing::workload("nginx", &labels))
        .build();
    let matches = |text: &str| Filter::parse(text).unwrap().matches(&event.record_fields());
    assert!(matches("pod.namespace==shop,pod.name~=^web-"));
    assert!(matches(r#"container.labels."app.kubernetes.io/name"==web"#));
    assert!(matches("container.kind==sandbox,container.image==nginx"));
    assert!(
        !matches("container.name"),
        "a sandbox has no container name"
    );
    assert!(!matches("pod.namespace==prod"));
    assert!(!Filter::parse("pod.name").unwrap().matches(&event));
    let plain = testing::event(2)
        .at(0)
        .json("containerd.events.TaskExit", "{}")
        .build();
    assert!(
        !Filter::parse("pod.name")
            .unwrap()
            .matches(&plain.record_fields())
    );
}

/// The node is filterable everywhere: route filters and queries (the record
/// fields) and Subscribe (containerd's adaptor); an unknown node is absent.
#[test]
fn the_node_is_a_field_of_both_adaptors() {
    use crate::filter::Filter;
    let event = testing::event(1)
        .at(0)
        .json("containerd.events.TaskExit", "{}")
        .node("web-1")
        .build();
    let matches = |text: &str, fields: &dyn Fields| Filter::parse(text).unwrap().matches(fields);
    assert!(matches("node==web-1", &event.record_fields()));
    assert!(matches("node~=^web-", &event.record_fields()));
    assert!(!matches("node==web-2", &event.record_fields()));
    assert!(
        matches("node==web-1", &event),
        "Subscribe filters see it too"
    );
    let unknown = testing::event(2)
        .at(0)
        .json("containerd.events.TaskExit", "{}")
        .build();
    assert!(!matches("node", &unknown.record_fields()));
    assert!(!matches("node", &unknown));
}

/// A forwarder that renders JSON leaves the event holding its JSON, not the
/// decoded message (several times larger), which is still there on request and
/// renders the same JSON.
#[test]
fn rendering_json_keeps_the_json_and_not_the_decoded_message() {
    let json = r#"{"containerId":"c1","id":"c1","pid":42,"exitStatus":3}"#;
    let event = testing::event(1)
        .at(0)
        .json("containerd.events.TaskExit", json)
        .build();
    let rendered = event.payload_json().map(str::to_owned);
    assert!(
        rendered.as_deref().is_some_and(|j| j.contains("\"c1\"")),
        "{rendered:?}"
    );
    assert!(
        event.decoded.get().is_none(),
        "the decoded message was kept"
    );
    let decoded = event.decoded().map(to_json_string);
    assert_eq!(decoded, rendered);

    // Decoded first (a filter on event fields): the JSON is rendered from it.
    let event = testing::event(2)
        .at(0)
        .json("containerd.events.TaskExit", json)
        .build();
    assert!(event.decoded().is_some());
    assert_eq!(event.payload_json().map(str::to_owned), rendered);

    // An undecodable payload has neither, and nothing is kept either way.
    let mut broken = testing::event(3)
        .at(0)
        .json("containerd.events.TaskExit", json)
        .build();
    if let Some(any) = broken.envelope.event.as_mut() {
        any.value = vec![0xff; 3];
    }
    assert_eq!(broken.payload_json(), None);
    assert!(broken.decoded().is_none());
}
