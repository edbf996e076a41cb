//! Events in the terms users search by, with a real containerd: containers created
//! with the labels Kubernetes' CRI plugin puts on a pod's sandbox and containers
//! (`ctr run --label ...`) run, exit (non-zero, killed), restart and are deleted;
//! every event about them, the exit and delete events included, carries the pod,
//! container name, kind and image in the JSON lines and Kafka-free records, long
//! after the containers are gone. A container without CRI labels carries its image
//! and labels. `eventgate query --pod` tells the pod's life after it is gone, and
//! `stats --by pod` counts its restarts, OOMs and non-zero exits. Across a gap (eventgate stopped), the events a reconcile
//! reconstructs carry them too: from the daemon's lists for containers it has, and
//! from what was captured for containers deleted meanwhile.

use crate::support;

use std::path::Path;

use serde_json::Value;
use support::config::Config;
use support::containerd::{Containerd, IMAGE, Tasks, busybox_image};
use support::*;

const NS: &str = "k8s.io";
const POD: &str = "web-7";
const POD_NS: &str = "shop";

fn write_config(dir: &Path, containerd: &Containerd) -> String {
    Config::new()
        .file("log", "events.jsonl", "")
        .sqlite("audit", "audit.db", "")
        .upstream("node", &containerd.address(), "")
        .write(dir)
}

/// The CRI plugin's labels for one of the pod's containers (`None`: the sandbox).
fn cri_labels(uid: &str, container: Option<&str>) -> Vec<String> {
    support::containerd::cri_labels(POD_NS, POD, uid, container)
}

/// The container an event is about, from its payload.
fn about(line: &Value) -> Option<&str> {
    let event = &line["event"];
    ["container_id", "sandbox_id", "id"]
        .iter()
        .find_map(|f| event.get(*f).and_then(Value::as_str))
}

/// Waits until `id`'s `/containers/delete` is logged; every line then.
fn wait_deleted(gateway: &Gateway, id: &str) -> Vec<Value> {
    wait_for(&format!("{id}'s delete event"), DEADLINE, || {
        let lines = gateway.logged();
        lines
            .iter()
            .any(|l| l["topic"] == "/containers/delete" && about(l) == Some(id))
            .then_some(lines)
    })
}

/// One container's events, in order.
fn events_of<'a>(lines: &'a [Value], id: &str) -> Vec<&'a Value> {
    lines.iter().filter(|l| about(l) == Some(id)).collect()
}

fn topics(events: &[&Value]) -> Vec<String> {
    events
        .iter()
        .map(|l| l["topic"].as_str().unwrap_or_default().to_owned())
        .collect()
}

fn import_image(containerd: &Containerd) {
    let out = containerd
        .ctr()
        .args(["--namespace", NS, "image", "import"])
        .arg(busybox_image())
        .output()
        .expect("ctr image import");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Waits until `count` events of `topic` are logged.
fn wait_logged(gateway: &Gateway, topic: &str, count: usize) {
    wait_for(&format!("{count} {topic}"), DEADLINE, || {
        let seen = gateway
            .logged()
            .iter()
            .filter(|l| l["topic"] == topic)
            .count();
        (seen >= count).then_some(())
    });
}

fn wait_connected(gateway: &Gateway, count: usize) {
    wait_logged(gateway, "/eventgate/upstream/connected", count);
}

#[test]
fn every_event_of_a_pod_carries_its_names_after_its_containers_are_gone() {
    let containerd = Containerd::start();
    import_image(&containerd);
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(dir.path(), &containerd);
    let mut gateway = Gateway::start_in(dir, &["--config", &config]);
    wait_connected(&gateway, 1);

    let pid = std::process::id();
    let uid = format!("uid-{pid}");
    let sandbox = format!("eg-sandbox-{pid}");
    let first = format!("eg-app-a-{pid}");
    let second = format!("eg-app-b-{pid}");
    let plain = format!("eg-plain-{pid}");
    let mut tasks = Tasks::new(&containerd);
    // The pod's sandbox, running while its app container fails three times: a
    // non-zero exit, 137 (what the OOM killer's SIGKILL leaves), and a real OOM kill.
    let labels = cri_labels(&uid, None);
    let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
    tasks.run(NS, &sandbox, &labels, &["/bin/busybox", "sleep", "300"]);
    let oom = format!("eg-app-c-{pid}");
    let hog = "x=$(head -c 268435456 /dev/zero | tr '\\0' a); echo ${#x}";
    for (id, script, limit) in [
        (&first, "exit 2", None),
        (&second, "exit 137", None),
        (&oom, hog, Some("33554432")),
    ] {
        let labels = cri_labels(&uid, Some("app"));
        let mut args: Vec<&str> = vec!["run", "--rm"];
        if let Some(limit) = limit {
            args.extend(["--memory-limit", limit]);
        }
        args.extend(labels.iter().map(String::as_str));
        args.extend([IMAGE, id.as_str(), "/bin/busybox", "sh", "-c", script]);
        let status = containerd
            .ctr()
            .args(["--namespace", NS])
            .args(&args)
            .output()
            .expect("ctr run");
        assert!(!status.status.success(), "{id} was meant to fail");
    }
    // A container outside Kubernetes: its image and labels.
    containerd.ctr_in(
        NS,
        &[
            "run",
            "--rm",
            "--label",
            "app=db",
            IMAGE,
            &plain,
            "/bin/busybox",
            "true",
        ],
    );
    containerd.ctr_in(NS, &["task", "kill", "-s", "KILL", &sandbox]);
    wait_for("the sandbox's task to stop", DEADLINE, || {
        let list = containerd.ctr_in(NS, &["task", "ls"]);
        (!list
            .lines()
            .any(|l| l.starts_with(&sandbox) && l.contains("RUNNING")))
        .then_some(())
    });
    containerd.ctr_in(NS, &["task", "rm", &sandbox]);
    containerd.ctr_in(NS, &["container", "rm", &sandbox]);
    drop(tasks);

    let lines = wait_deleted(&gateway, &sandbox);
    let lines = {
        let more = wait_deleted(&gateway, &plain);
        if more.len() > lines.len() {
            more
        } else {
            lines
        }
    };
    for (id, container) in [
        (&sandbox, None),
        (&first, Some("app")),
        (&second, Some("app")),
        (&oom, Some("app")),
    ] {
        let events = events_of(&lines, id);
        let seen = topics(&events);
        for topic in [
            "/containers/create",
            "/tasks/start",
            "/tasks/exit",
            "/containers/delete",
        ] {
            assert!(seen.iter().any(|t| t == topic), "{id}: {topic} in {seen:?}");
        }
        for event in events {
            let what = format!("{id} {}: {event}", event["topic"]);
            assert_eq!(event["pod"]["name"], POD, "{what}");
            assert_eq!(event["pod"]["namespace"], POD_NS, "{what}");
            assert_eq!(event["pod"]["uid"], uid.as_str(), "{what}");
            assert_eq!(event["container"]["image"], IMAGE, "{what}");
            let kind = if container.is_some() {
                "container"
            } else {
                "sandbox"
            };
            assert_eq!(event["container"]["kind"], kind, "{what}");
            match container {
                Some(name) => assert_eq!(event["container"]["name"], name, "{what}"),
                None => assert!(event["container"].get("name").is_none(), "{what}"),
            }
        }
    }
    let exits: Vec<i64> = [&first, &second]
        .iter()
        .map(|id| {
            events_of(&lines, id)
                .iter()
                .find(|l| l["topic"] == "/tasks/exit")
                .and_then(|l| l["event"]["exit_status"].as_i64())
                .expect("an exit status")
        })
        .collect();
    assert_eq!(exits, [2, 137]);
    // A real OOM kill (a 32 MiB limit, a shell that wants 256 MiB): containerd
    // reports `/tasks/oom`, and it names the pod too.
    let oom_topics = topics(&events_of(&lines, &oom));
    assert!(
        oom_topics.iter().any(|t| t == "/tasks/oom"),
        "{oom_topics:?}"
    );
    for event in events_of(&lines, &plain) {
        assert_eq!(event["container"]["image"], IMAGE, "{event}");
        assert_eq!(event["container"]["labels"]["app"], "db", "{event}");
        assert!(event.get("pod").is_none(), "{event}");
    }
    // What a user asks once the pod is gone: its life as a timeline, and which pods
    // crash-loop, straight from the audit store.
    let db = gateway.dir.path().join("data/audit.db");
    wait_for("the store to hold the sandbox's delete", DEADLINE, || {
        support::audit::stored(&db)
            .iter()
            .any(|r| r.topic == "/containers/delete" && r.container() == Some(sandbox.as_str()))
            .then_some(())
    });
    let db = path_str(&db);
    let timeline = eventgate_stdout(&["query", "--db", db, "--utc", "--pod", POD]);
    assert!(
        timeline.starts_with(&format!("pod {POD_NS}/{POD} (uid {uid})\n")),
        "{timeline}"
    );
    // One line per event: time, the container's name in the pod, what happened.
    let said = |container: &str, what: &str| {
        timeline
            .lines()
            .any(|l| l.split_whitespace().nth(1) == Some(container) && l.contains(what))
    };
    for (container, what) in [
        ("sandbox", "started (pid"),
        ("app", "! exited with status 2 (non-zero)"),
        ("app", "! exited with status 137: killed (SIGKILL)"),
        ("app", "! out of memory (/tasks/oom)"),
        ("app", "! exited with status 137: OOM-killed"),
        ("sandbox", "deleted"),
    ] {
        assert!(said(container, what), "{container}: {what} in\n{timeline}");
    }
    let stats = eventgate_stdout(&["stats", "--db", db, "--by", "pod"]);
    let row: Vec<&str> = stats
        .lines()
        .find(|l| l.starts_with(&format!("{POD_NS}/{POD} ")))
        .unwrap_or_else(|| panic!("no row for the pod:\n{stats}"))
        .split_whitespace()
        .collect();
    // Restarts 2 (three app containers), non-zero exits 3 (2, 137, OOM-killed), at
    // least one OOM event (containerd reports one per kernel notification).
    assert_eq!(
        (row[1], row[3], row[4], row[5]),
        ("2", "3", "2", "1"),
        "{stats}"
    );
    assert!(row[2].parse::<u32>().is_ok_and(|n| n >= 1), "{stats}");
    // Events about no container (the image import, the markers) carry none.
    for line in &lines {
        if about(line).is_none()
            || line["topic"]
                .as_str()
                .is_some_and(|t| t.starts_with("/images/"))
        {
            assert!(
                line.get("pod").is_none() && line.get("container").is_none(),
                "{line}"
            );
        }
    }
    assert!(gateway.terminate().success(), "{}", gateway.stderr_text());
}

/// eventgate stops; meanwhile one pod container is deleted and another created.
/// The reconcile at restart reconstructs both, each with its pod: the deleted one
/// from what was captured before the gap (no list ever saw its labels), the new one
/// from the daemon's list.
#[test]
fn reconstructed_events_carry_the_pod_across_a_gap() {
    let containerd = Containerd::start();
    import_image(&containerd);
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(dir.path(), &containerd);
    let mut gateway = Gateway::start_in(dir, &["--config", &config]);
    // The first reconcile takes the daemon's state as the starting point; only
    // after it are differences news.
    wait_logged(&gateway, "/eventgate/upstream/reconciled", 1);

    let pid = std::process::id();
    let uid = format!("uid-gap-{pid}");
    let gone = format!("eg-gone-{pid}");
    let born = format!("eg-born-{pid}");
    let labels = cri_labels(&uid, Some("gone"));
    let mut args: Vec<&str> = vec!["container", "create"];
    args.extend(labels.iter().map(String::as_str));
    args.extend([IMAGE, gone.as_str(), "/bin/busybox", "true"]);
    containerd.ctr_in(NS, &args);
    wait_for("the live create", DEADLINE, || {
        gateway
            .logged()
            .iter()
            .any(|l| l["topic"] == "/containers/create" && about(l) == Some(gone.as_str()))
            .then_some(())
    });
    assert!(gateway.terminate().success(), "{}", gateway.stderr_text());

    containerd.ctr_in(NS, &["container", "rm", &gone]);
    let labels = cri_labels(&uid, Some("born"));
    let mut args: Vec<&str> = vec!["container", "create"];
    args.extend(labels.iter().map(String::as_str));
    args.extend([IMAGE, born.as_str(), "/bin/busybox", "true"]);
    containerd.ctr_in(NS, &args);
    gateway.respawn();
    wait_connected(&gateway, 2);

    let lines = wait_for("both reconstructed events", DEADLINE, || {
        let lines = gateway.logged();
        let reconciled = |topic: &str, id: &str| {
            lines
                .iter()
                .any(|l| l["origin"] == "reconciled" && l["topic"] == topic && about(l) == Some(id))
        };
        (reconciled("/containers/delete", &gone) && reconciled("/containers/create", &born))
            .then_some(lines)
    });
    for (id, topic, name) in [
        (&gone, "/containers/delete", "gone"),
        (&born, "/containers/create", "born"),
    ] {
        let event = lines
            .iter()
            .find(|l| l["origin"] == "reconciled" && l["topic"] == topic && about(l) == Some(id))
            .expect("the reconstructed event");
        assert_eq!(event["pod"]["name"], POD, "{event}");
        assert_eq!(event["pod"]["uid"], uid.as_str(), "{event}");
        assert_eq!(event["container"]["name"], name, "{event}");
        assert_eq!(event["container"]["image"], IMAGE, "{event}");
    }
    containerd.ctr_in(NS, &["container", "rm", &born]);
    assert!(gateway.terminate().success(), "{}", gateway.stderr_text());
}
