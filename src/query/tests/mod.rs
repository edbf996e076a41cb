//! Hand-built audit stores, written with the store's own insert function.

mod equivalence;
mod plan;
mod postgres;

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::event::{Clock, Event, Origin, Source, Witness, Workload};
pub(super) use crate::testing::T0;
use crate::testing::{self, json_any};

/// Events of every shape the adaptor treats differently: string, bool, nested
/// message (set and unset), labels (dotted keys, empty values), a nested Any,
/// prefixed type_urls, unknown types, undecodable payloads, no payload, no timestamp,
/// empty namespace and topic, and text that looks like SQL.
pub(super) fn varied_events() -> Vec<Event> {
    let mut out = Vec::new();
    let mut push = |secs: Option<i64>, ns: &str, topic: &str, any: Option<prost_types::Any>| {
        let source = match out.len() % 3 {
            0 => Source::Publish,
            1 => Source::Forward,
            _ => Source::Upstream("node-a".into()),
        };
        let event = testing::event(out.len() as u64 + 1)
            .source(source)
            .timestamp(secs.map(|seconds| prost_types::Timestamp { seconds, nanos: 7 }))
            .namespace(ns)
            .topic(topic)
            .payload(any);
        // Nodes of a small fleet, and unknown ones (rows from before nodes were kept).
        let event = match out.len() % 4 {
            0 => event,
            1 => event.node("web-1"),
            2 => event.node("web-2"),
            _ => event.node("db-1"),
        };
        out.push(event.build());
    };
    let exit = |c: &str, id: &str| {
        json_any(
            "containerd.events.TaskExit",
            &serde_json::json!({"container_id": c, "id": id, "pid": 7, "exit_status": 137})
                .to_string(),
        )
    };
    for (i, ns) in ["default", "k8s.io", "moby"].iter().enumerate() {
        let at = T0 + i as i64 * 1800;
        push(Some(at), ns, "/tasks/exit", Some(exit("web", "web")));
        push(Some(at + 60), ns, "/tasks/exit", Some(exit("db", "exec-1")));
        push(Some(at + 120), ns, "/tasks/exit", Some(exit("", "")));
        push(
            Some(at + 5),
            ns,
            "/tasks/create",
            Some(json_any(
                "containerd.events.TaskCreate",
                r#"{"container_id":"web","bundle":"/run/b","io":{"stdin":"/dev/null","terminal":true}}"#,
            )),
        );
        push(
            Some(at + 6),
            ns,
            "/tasks/create",
            Some(json_any(
                "containerd.events.TaskCreate",
                r#"{"container_id":"db"}"#,
            )),
        );
        push(
            Some(at + 7),
            ns,
            "/tasks/create",
            Some(json_any(
                "containerd.events.TaskCreate",
                r#"{"io":{"stdout":"x"}}"#,
            )),
        );
    }
    push(
        Some(T0 + 10),
        "default",
        "/containers/create",
        Some(json_any(
            "containerd.events.ContainerCreate",
            r#"{"id":"web","image":"docker.io/library/nginx:latest","runtime":{"name":"io.containerd.runc.v2","options":{"@type":"types.googleapis.com/containerd.runc.v1.Options","binary_name":"runc","no_pivot_root":true}}}"#,
        )),
    );
    push(
        Some(T0 + 11),
        "default",
        "/containers/update",
        Some(json_any(
            "containerd.events.ContainerUpdate",
            r#"{"id":"web","labels":{"io.k8s.pod":"web-0","empty":"","quote\"d":"x' OR 1=1 --"}}"#,
        )),
    );
    push(
        Some(T0 + 12),
        "",
        "/namespaces/create",
        Some(json_any(
            "containerd.events.NamespaceCreate",
            r#"{"name":"k8s.io","labels":{}}"#,
        )),
    );
    let mut prefixed = exit("api", "api");
    prefixed.type_url = format!("types.googleapis.com/{}", prefixed.type_url);
    push(Some(T0 + 13), "default", "/tasks/exit", Some(prefixed));
    let mut deep = exit("deep", "deep");
    deep.type_url = format!("a/b/{}", deep.type_url);
    push(Some(T0 + 14), "default", "/tasks/exit", Some(deep));
    let unknown = prost_types::Any {
        type_url: "example.com/custom.Event".into(),
        value: vec![1, 2, 3],
    };
    push(Some(T0 + 15), "default", "/custom/thing", Some(unknown));
    let garbage = prost_types::Any {
        type_url: "containerd.events.TaskExit".into(),
        value: vec![0xff, 0xff, 0xff],
    };
    push(Some(T0 + 16), "default", "/tasks/exit", Some(garbage));
    push(Some(T0 + 17), "default", "/tasks/nothing", None);
    push(
        None,
        "default",
        "/tasks/exit",
        Some(exit("untimed", "untimed")),
    );
    push(Some(T0 + 18), "default", "", None);
    push(
        Some(T0 + 19),
        "x' OR '1'='1",
        "/tasks/exit'; DROP TABLE events; --",
        Some(exit("'; DROP TABLE events; --", "a\"b")),
    );
    push(Some(T0 + 7200), "default", "/tasks/a/b", None);
    // Some of each origin and witness, spread over every shape above.
    let witnesses = [Witness::Containerd, Witness::Cri, Witness::Docker];
    for (i, event) in out.iter_mut().enumerate() {
        event.identity.origin = match i % 4 {
            1 => Origin::Reconciled {
                clock: Clock::Daemon,
                from: witnesses[(i / 4) % 3],
            },
            2 => Origin::Reconciled {
                clock: Clock::Reconcile,
                from: witnesses[(i / 4 + 1) % 3],
            },
            _ => Origin::Live,
        };
        let workload = workloads().into_iter().nth(i % 7).flatten();
        // Reasons, empty ones included, with and without the rest of a workload.
        let reason = match i % 5 {
            1 => Some("OOMKilled"),
            2 => Some("Completed"),
            3 => Some(""),
            _ => None,
        };
        event.identity.workload = match reason {
            None => workload,
            Some(reason) => Some(Workload {
                reason: Some(reason.to_owned()),
                ..workload.unwrap_or_default()
            }),
        }
        .map(Arc::new);
    }
    out
}

/// Workloads of every shape the fields treat differently, spread over the events:
/// a pod's sandbox and containers (two pods of one name in two namespaces), a
/// container no CRI plugin made (image and labels only), one that said almost
/// nothing, empty texts, label keys with dots and quotes, and text that looks like
/// SQL.
fn workloads() -> [Option<Workload>; 7] {
    let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    };
    let pod = |name: &str, namespace: &str, container: Option<&str>| Workload {
        kind: Some(
            if container.is_some() {
                "container"
            } else {
                "sandbox"
            }
            .to_owned(),
        ),
        pod_name: Some(name.to_owned()),
        pod_namespace: Some(namespace.to_owned()),
        pod_uid: Some(format!("uid-{namespace}-{name}")),
        container_name: container.map(str::to_owned),
        image: match container {
            Some(_) => "docker.io/library/nginx:1.27".to_owned(),
            None => "registry.k8s.io/pause:3.9".to_owned(),
        },
        labels: labels(&[("app.kubernetes.io/name", "web"), ("tier", "")]),
        reason: None,
    };
    [
        None,
        Some(pod("web-7", "shop", None)),
        Some(pod("web-7", "shop", Some("nginx"))),
        Some(Workload {
            labels: labels(&[("quote\"d", "x' OR 1=1 --"), ("a.b.c", "dots")]),
            ..pod("web-7", "staging", Some("x' OR '1'='1"))
        }),
        Some(Workload {
            image: "busybox".to_owned(),
            labels: labels(&[("app", "db")]),
            ..Workload::default()
        }),
        Some(Workload {
            pod_name: Some(String::new()),
            container_name: Some(String::new()),
            ..Workload::default()
        }),
        Some(Workload {
            kind: Some("container".to_owned()),
            ..Workload::default()
        }),
    ]
}
