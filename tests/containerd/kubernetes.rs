//! A Kubernetes node: containerd with its CRI plugin, driven the way the kubelet
//! drives it (`support::kubelet`), and eventgate subscribed to it. Container `app`
//! of pod `shop/web-7` restarts across a SIGKILLed eventgate; the CRI deletes each
//! task as it exits, so containerd's lists alone cannot tell what ran in the gap.
//! The reconcile asks the CRI and the record, `query --pod` and `stats --by pod` come
//! out as `kubectl` counts them.

use crate::support;

use std::path::Path;

use eventgate::proto::runtime::v1::ContainerStatus;
use serde_json::Value;
use support::config::Config;
use support::containerd::{Containerd, IMAGE};
use support::kubelet::{ContainerSpec, Kubelet, Pod};
use support::*;

const POD: &str = "web-7";
const POD_NS: &str = "shop";

fn write_config(dir: &Path, containerd: &Containerd, cri: &str) -> String {
    Config::new()
        .file("log", "events.jsonl", "")
        .sqlite("audit", "audit.db", "")
        .upstream("node", &containerd.address(), &format!("cri = \"{cri}\""))
        .write(dir)
}

fn about(line: &Value) -> Option<&str> {
    let event = &line["event"];
    ["container_id", "id"]
        .iter()
        .find_map(|f| event.get(*f).and_then(Value::as_str))
}

fn reconciled_markers(lines: &[Value]) -> Vec<&Value> {
    lines
        .iter()
        .filter(|l| l["topic"] == "/eventgate/upstream/reconciled")
        .collect()
}

fn wait_markers(gateway: &Gateway, count: usize) -> Vec<Value> {
    wait_for(&format!("{count} reconciled markers"), DEADLINE, || {
        let lines = gateway.logged();
        (reconciled_markers(&lines).len() >= count).then_some(lines)
    })
}

/// An RFC 3339 time as written in JSON lines, in nanoseconds since the epoch.
fn nanos_of(text: &Value) -> i64 {
    let text = text.as_str().unwrap_or_else(|| panic!("a time: {text}"));
    let time = chrono::DateTime::parse_from_rfc3339(text).unwrap_or_else(|e| panic!("{text}: {e}"));
    time.timestamp_nanos_opt().expect("in range")
}

fn run(
    kubelet: &mut Kubelet,
    pod: &Pod,
    attempt: u32,
    script: &str,
    memory: Option<i64>,
) -> (String, ContainerStatus) {
    let spec = ContainerSpec {
        name: "app",
        attempt,
        script,
        memory_limit: memory,
    };
    let id = kubelet.run_container(pod, &spec);
    let status = kubelet.wait_exited(&id, DEADLINE);
    (id, status)
}

#[test]
fn a_pod_restarted_across_a_killed_gateway_is_recorded_as_kubectl_counts_it() {
    let containerd = Containerd::start_cri();
    let mut kubelet = Kubelet::connect(&containerd);
    containerd.import_busybox_cri();
    kubelet.wait_image(IMAGE);
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(dir.path(), &containerd, "auto");
    let mut gateway = Gateway::start_in(dir, &["--config", &config]);
    // The first reconcile takes the node as the starting point.
    wait_markers(&gateway, 1);

    let uid = format!("uid-{}", std::process::id());
    let pod = kubelet.run_pod(POD, POD_NS, &uid, 0);
    // Live: attempt 0 completes, attempt 1 fails with 3, and the kubelet removes
    // attempt 0 as its garbage collector does.
    let (a0, _) = run(&mut kubelet, &pod, 0, "sleep 0.1; exit 0", None);
    let (a1, _) = run(&mut kubelet, &pod, 1, "sleep 0.1; exit 3", None);
    kubelet.remove_container(&a0);
    wait_for(
        "attempt 1's exit and attempt 0's delete, live",
        DEADLINE,
        || {
            let lines = gateway.logged();
            let seen = |topic: &str, id: &str| {
                lines
                    .iter()
                    .any(|l| l["topic"] == topic && about(l) == Some(id) && l["origin"] == "live")
            };
            (seen("/tasks/exit", &a1) && seen("/containers/delete", &a0)).then_some(())
        },
    );

    // The gap: attempt 2 is OOM-killed, attempt 3 fails with 5, attempt 4 completes,
    // attempt 1 is removed.
    gateway.kill9();
    let (a2, _) = run(&mut kubelet, &pod, 2, "tail /dev/zero", Some(16 << 20));
    let oom = kubelet.wait_status(&a2, DEADLINE, "to be OOMKilled", |s| {
        s.reason == "OOMKilled"
    });
    let (a3, failed) = run(&mut kubelet, &pod, 3, "sleep 0.1; exit 5", None);
    let (a4, completed) = run(&mut kubelet, &pod, 4, "sleep 0.1; exit 0", None);
    kubelet.remove_container(&a1);
    gateway.respawn();
    let lines = wait_markers(&gateway, 2);

    // Exactly what ran in the gap, as the standard events, from the CRI's record.
    let gap: Vec<&Value> = lines
        .iter()
        .filter(|l| l["origin"] == "reconciled")
        .collect();
    let told: Vec<(String, String, String)> = gap
        .iter()
        .map(|l| {
            let id = about(l).unwrap_or_default();
            let who = if id == a1 {
                "a1"
            } else if id == a2 {
                "a2"
            } else if id == a3 {
                "a3"
            } else if id == a4 {
                "a4"
            } else {
                id
            };
            (
                l["topic"].as_str().unwrap_or_default().to_owned(),
                who.to_owned(),
                l["reconciled_from"].as_str().unwrap_or("?").to_owned(),
            )
        })
        .collect();
    let expected = [
        ("/containers/create", "a2", "containerd"),
        ("/tasks/start", "a2", "cri"),
        ("/tasks/oom", "a2", "cri"),
        ("/tasks/exit", "a2", "cri"),
        ("/tasks/delete", "a2", "cri"),
        ("/containers/create", "a3", "containerd"),
        ("/tasks/start", "a3", "cri"),
        ("/tasks/exit", "a3", "cri"),
        ("/tasks/delete", "a3", "cri"),
        ("/containers/create", "a4", "containerd"),
        ("/tasks/start", "a4", "cri"),
        ("/tasks/exit", "a4", "cri"),
        ("/tasks/delete", "a4", "cri"),
        ("/containers/delete", "a1", "containerd"),
    ]
    .map(|(t, w, f)| (t.to_owned(), w.to_owned(), f.to_owned()));
    assert_eq!(told, expected, "{gap:#?}");
    for (id, status) in [(&a2, &oom), (&a3, &failed), (&a4, &completed)] {
        let exit = gap
            .iter()
            .find(|l| l["topic"] == "/tasks/exit" && about(l) == Some(id.as_str()))
            .expect("the exit");
        assert_eq!(exit["event"]["exit_status"], status.exit_code, "{exit}");
        assert_eq!(
            nanos_of(&exit["event"]["exited_at"]),
            status.finished_at,
            "{exit}"
        );
        assert_eq!(nanos_of(&exit["timestamp"]), status.finished_at, "{exit}");
        assert_eq!(exit["origin_clock"], "daemon", "{exit}");
        assert_eq!(exit["reason"], status.reason.as_str(), "{exit}");
        // Every reconstructed event names the pod and container as live ones do.
        for event in gap.iter().filter(|l| about(l) == Some(id.as_str())) {
            assert_eq!(event["pod"]["name"], POD, "{event}");
            assert_eq!(event["pod"]["namespace"], POD_NS, "{event}");
            assert_eq!(event["container"]["name"], "app", "{event}");
        }
    }
    let marker = reconciled_markers(&lines)[1]["event"].clone();
    assert_eq!(marker["baseline"], false, "{marker}");
    let cri = &marker["managers"][0];
    assert_eq!(
        (cri["name"].as_str(), cri["state"].as_str()),
        (Some("cri"), Some("listed")),
        "{marker}"
    );
    assert!(
        marker["unknown_exits"].as_array().is_none_or(Vec::is_empty),
        "{marker}"
    );

    // What a user asks: the pod's life and its counts, as kubectl would give them
    // (RESTARTS 4; non-zero exits 3, 137 and 5; one OOM kill).
    let db = gateway.dir.path().join("data/audit.db");
    support::audit::wait_stored(&db, "the gap's last event", |r| {
        r.topic == "/containers/delete" && r.container() == Some(a1.as_str())
    });
    let db = path_str(&db);
    let stats = eventgate_stdout(&["stats", "--db", db, "--by", "pod"]);
    let row: Vec<&str> = stats
        .lines()
        .find(|l| l.starts_with(&format!("{POD_NS}/{POD} ")))
        .unwrap_or_else(|| panic!("no row for the pod:\n{stats}"))
        .split_whitespace()
        .collect();
    assert_eq!(
        (row[1], row[2], row[3], row[4], row[5]),
        ("4", "1", "3", "1", "1"),
        "{stats}"
    );
    let timeline = eventgate_stdout(&["query", "--db", db, "--utc", "--pod", POD]);
    for what in [
        "! exited with status 3 (non-zero)",
        "! out of memory (/tasks/oom)",
        "! exited with status 137: OOM-killed",
        "! exited with status 5 (non-zero)",
    ] {
        assert!(timeline.contains(what), "{what} in\n{timeline}");
    }
    let oom_killed: Vec<Value> =
        eventgate_stdout(&["query", "--db", db, "--format", "json", "reason==OOMKilled"])
            .lines()
            .map(|l| serde_json::from_str(l).expect("JSON"))
            .collect();
    assert_eq!(oom_killed.len(), 2, "the OOM and the exit: {oom_killed:#?}");

    // Ten clean restarts on an unchanged node: nothing but markers, and no
    // per-container status call.
    let before = gateway.logged().len();
    for round in 0..10 {
        assert!(gateway.restart().success(), "{}", gateway.stderr_text());
        wait_markers(&gateway, 3 + round);
    }
    let lines = gateway.logged();
    for line in &lines[before..] {
        assert_eq!(line["namespace"], "eventgate", "restart {line}");
    }
    for marker in &reconciled_markers(&lines)[2..] {
        let cri = &marker["event"]["managers"][0];
        assert_eq!(cri["state"], "listed", "{marker}");
        assert!(cri["status_calls"].as_u64().unwrap_or(0) == 0, "{marker}");
        assert!(cri["containers"].as_u64().unwrap_or(0) == 3, "{marker}");
    }
    kubelet.stop_pod(&pod.id);
    kubelet.remove_pod(&pod.id);
    assert!(gateway.terminate().success(), "{}", gateway.stderr_text());
}

/// A CRI socket that is not there, one that accepts connections and never answers,
/// and one that answers garbage: containerd's own reconcile completes regardless, each marker says the
/// CRI failed and why, and `/readyz?verbose` names it on the upstream's line while
/// the gateway stays ready.
#[test]
fn a_cri_that_is_missing_or_silent_never_stops_the_reconcile() {
    let containerd = Containerd::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("missing.sock");
    let silent_path = dir.path().join("silent.sock");
    let silent = std::os::unix::net::UnixListener::bind(&silent_path).expect("bind");
    // One that answers every connection with bytes that are not HTTP/2.
    let garbage_path = dir.path().join("garbage.sock");
    let garbage = std::os::unix::net::UnixListener::bind(&garbage_path).expect("bind");
    std::thread::spawn(move || {
        use std::io::Write;
        for mut stream in garbage.incoming().flatten() {
            let _ = stream.write_all(&[0xff; 4096]);
        }
    });
    let config = dir.path().join("eventgate.toml");
    let mut text =
        String::from("[[forwarder]]\nname = \"log\"\nkind = \"file\"\npath = \"events.jsonl\"\n");
    for (name, cri) in [
        ("missing", &missing),
        ("silent", &silent_path),
        ("garbage", &garbage_path),
    ] {
        text.push_str(&format!(
            "\n[[upstream]]\nname = \"{name}\"\naddress = \"{}\"\ncri = \"{}\"\nconnect_timeout = \"1s\"\n",
            containerd.address(),
            cri.display()
        ));
    }
    std::fs::write(&config, text).expect("write config");
    let mut gateway = Gateway::start_in(dir, &["--config", path_str(&config)]);
    // The silent one's reconcile waits out the CRI call's deadline (10 s).
    let lines = wait_for("a reconciled marker of each upstream", DEADLINE, || {
        let lines = gateway.logged();
        let of = |name: &str| {
            reconciled_markers(&lines)
                .iter()
                .any(|m| m["event"]["upstream"] == name)
        };
        (of("missing") && of("silent") && of("garbage")).then_some(lines)
    });
    for marker in reconciled_markers(&lines) {
        let event = &marker["event"];
        let cri = &event["managers"][0];
        assert_eq!(cri["name"], "cri", "{marker}");
        assert_eq!(cri["state"], "failed", "{marker}");
        assert!(
            cri["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{marker}"
        );
        // containerd's own lists were read, and nothing claims a manager's view.
        assert!(event.get("list_duration").is_some(), "{marker}");
        let cannot_know = event["cannot_know"].as_str().unwrap_or_default();
        assert!(!cannot_know.contains("a manager keeps"), "{marker}");
    }
    let admin = gateway.admin_addr();
    let (code, verbose) = http_get(admin, "/readyz?verbose");
    assert_eq!(code, 200, "{verbose}");
    for name in ["missing", "silent", "garbage"] {
        let line = verbose
            .lines()
            .find(|l| l.starts_with(&format!("ok: upstream {name} (")))
            .unwrap_or_else(|| panic!("{name} in {verbose}"));
        assert!(
            line.contains("; cri (") && line.contains("): failed: "),
            "{line}"
        );
    }
    drop(silent);
    assert!(gateway.terminate().success(), "{}", gateway.stderr_text());
}
