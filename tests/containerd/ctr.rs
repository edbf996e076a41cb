//! containerd's own clients against eventgate: `ctr events` and `containerd publish`
//! must not be able to tell it from the daemon. Needs Debian's `containerd` package;
//! `tests/run.sh` installs it and runs these.

use crate::support;

use std::process::Command;

use prost::Message;
use serde_json::Value;
use support::*;

const NEEDS: &str = "needs containerd's ctr and containerd binaries; run tests/run.sh";

fn ctr_events(gw: &Gateway, filters: &[&str]) -> Watcher {
    assert!(have("ctr"), "ctr is not installed; run tests/run.sh");
    let mut cmd = Command::new("ctr");
    cmd.args(["--address", &gw.address(), "events"])
        .args(filters);
    Watcher::spawn(cmd)
}

/// Splits a `ctr events` line into (namespace, topic, json).
fn parse_ctr_line(line: &str) -> (String, String, Value) {
    // "<date> <time> +0000 UTC <ns> <topic> <json>"
    let parts: Vec<&str> = line.splitn(7, ' ').collect();
    assert_eq!(parts.len(), 7, "unexpected ctr line: {line}");
    assert_eq!((parts[2], parts[3]), ("+0000", "UTC"), "{line}");
    let json = if parts[6].is_empty() {
        Value::Null
    } else {
        serde_json::from_str(parts[6]).expect("ctr prints JSON")
    };
    (parts[4].to_owned(), parts[5].to_owned(), json)
}

fn containerd_publish(
    address: &str,
    ns: Option<&str>,
    topic: &str,
    any: &prost_types::Any,
) -> (bool, String) {
    let mut cmd = Command::new("containerd");
    cmd.args(["--address", address, "publish", "--topic", topic]);
    if let Some(ns) = ns {
        cmd.args(["--namespace", ns]);
    }
    run_with_stdin(&mut cmd, &any.encode_to_vec())
}

#[test]
fn ctr_events_shows_what_eventgate_publish_sends() {
    let _ = NEEDS;
    let gw = Gateway::start(&[]);
    let ctr = ctr_events(&gw, &[]);
    prove_live(&gw.address(), &ctr);

    let (ok, err) = publish_json(
        &gw.address(),
        "default",
        "/tasks/exit",
        "containerd.events.TaskExit",
        r#"{"container_id":"c1","id":"c1","pid":42,"exit_status":3}"#,
    );
    assert!(ok, "{err}");
    let lines = without_probes(
        ctr.stdout
            .until("/tasks/exit", |l| l.contains("/tasks/exit")),
    );
    let (ns, topic, json) = parse_ctr_line(&lines[0]);
    assert_eq!((ns.as_str(), topic.as_str()), ("default", "/tasks/exit"));
    assert_eq!(json["container_id"], "c1");
    assert_eq!(json["pid"], 42);
    assert_eq!(
        json["exit_status"], 3,
        "ctr decoded our bare type_url: {json}"
    );
}

#[test]
fn ctr_events_shows_what_containerd_publish_sends() {
    assert!(
        have("containerd"),
        "containerd is not installed; run tests/run.sh"
    );
    let gw = Gateway::start(&[]);
    let ctr = ctr_events(&gw, &[]);
    prove_live(&gw.address(), &ctr);

    let any = eventgate::proto::Registry::global()
        .encode_json(
            "containerd.events.ContainerCreate",
            r#"{"id":"web","image":"docker.io/library/busybox:latest","runtime":{"name":"io.containerd.runc.v2"}}"#,
        )
        .expect("encode");
    let (ok, err) = containerd_publish(&gw.address(), Some("ns1"), "/containers/create", &any);
    assert!(ok, "containerd publish failed: {err}");
    let lines = without_probes(
        ctr.stdout
            .until("/containers/create", |l| l.contains("/containers/create")),
    );
    let (ns, topic, json) = parse_ctr_line(&lines[0]);
    assert_eq!((ns.as_str(), topic.as_str()), ("ns1", "/containers/create"));
    assert_eq!(json["id"], "web");
    assert_eq!(json["image"], "docker.io/library/busybox:latest");
    assert_eq!(json["runtime"]["name"], "io.containerd.runc.v2");

    // containerd publish's own error path: the server's status reaches it intact.
    let (ok, err) = containerd_publish(&gw.address(), None, "/x", &any);
    assert!(!ok);
    assert!(err.contains("namespace is required"), "{err}");
    let (ok, err) = containerd_publish(&gw.address(), Some("ns1"), "bad", &any);
    assert!(!ok);
    assert!(err.contains("must start with '/'"), "{err}");
}

#[test]
fn ctr_filters_select_events_and_bad_filters_are_rejected() {
    let gw = Gateway::start(&[]);
    // OR across strings, AND within; `topic=="/tasks/*"` uses eventgate's glob.
    let ctr = ctr_events(
        &gw,
        &[
            r#"topic=="/tasks/*",namespace==prod"#,
            r#"event.id~=|^web-|,topic~=|^/containers/|"#,
            r#"topic=="/probe""#,
        ],
    );
    prove_live(&gw.address(), &ctr);
    let send = |ns: &str, topic: &str, ty: &str, json: &str| {
        let (ok, err) = publish_json(&gw.address(), ns, topic, ty, json);
        assert!(ok, "{err}");
    };
    send(
        "dev",
        "/tasks/exit",
        "containerd.events.TaskExit",
        r#"{"container_id":"a"}"#,
    );
    send(
        "prod",
        "/tasks/exec/added",
        "containerd.events.TaskExecAdded",
        r#"{"container_id":"b"}"#,
    );
    send(
        "prod",
        "/tasks/oom",
        "containerd.events.TaskOOM",
        r#"{"container_id":"c"}"#,
    );
    send(
        "dev",
        "/containers/create",
        "containerd.events.ContainerCreate",
        r#"{"id":"db-1"}"#,
    );
    send(
        "dev",
        "/containers/create",
        "containerd.events.ContainerCreate",
        r#"{"id":"web-1"}"#,
    );
    send(
        "dev",
        "/end",
        "containerd.events.TaskOOM",
        r#"{"container_id":"end"}"#,
    );
    send(
        "probe",
        "/probe",
        "containerd.events.TaskOOM",
        r#"{"container_id":"last"}"#,
    );
    let lines = ctr
        .stdout
        .until("the last probe", |l| l.contains("\"last\""));
    let got: Vec<(String, String)> = without_probes(lines)
        .iter()
        .map(|l| {
            let (ns, topic, _) = parse_ctr_line(l);
            (ns, topic)
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("prod".to_owned(), "/tasks/oom".to_owned()),
            ("dev".to_owned(), "/containers/create".to_owned()),
        ]
    );

    let mut cmd = Command::new("ctr");
    cmd.args(["--address", &gw.address(), "events", "topic==/tasks/exit"]);
    let out = cmd.output().expect("ctr");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("parse error") && err.contains(">|/|<"),
        "{err}"
    );
}
