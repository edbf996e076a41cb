//! Reconcile against a real containerd: what changed while eventgate was down, while
//! containerd restarted, or behind an upstream filter is recorded once eventgate can
//! see the daemon again, as standard containerd events marked `reconciled`, in the
//! order it must have happened, never twice.

use crate::support;

use std::path::PathBuf;

use support::audit::{Row, markers, stored};
use support::config::Config;
use support::containerd::{Containerd, IMAGE, Tasks};
use support::*;

const RECONCILED: &str = "/eventgate/upstream/reconciled";
const CONNECTED: &str = "/eventgate/upstream/connected";

const AUDIT_ONLY: &str =
    "[[forwarder]]\nname = \"audit\"\nkind = \"sqlite\"\npath = \"audit.db\"\n";

fn start(containerd: &Containerd, extra: &str) -> Gateway {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = Config::new()
        .toml(AUDIT_ONLY)
        .upstream("node", &containerd.address(), extra)
        .write(dir.path());
    Gateway::start_in(dir, &["--config", &path])
}

fn audit_db(gateway: &Gateway) -> PathBuf {
    gateway.dir.path().join("data/audit.db")
}

/// Waits for the `n`th reconciled marker; every row then. On timeout, says what the
/// gateway logged.
fn wait_reconciled(gateway: &mut Gateway, n: usize) -> Vec<Row> {
    let db = audit_db(gateway);
    let deadline = std::time::Instant::now() + DEADLINE;
    loop {
        let rows = stored(&db);
        if markers(&rows, RECONCILED).len() >= n {
            return rows;
        }
        if std::time::Instant::now() > deadline {
            panic!(
                "no reconciled marker {n} after {DEADLINE:?}; the gateway logged:\n{}",
                gateway.stderr_text()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A unique container id: runc's cgroup paths are shared by every containerd here.
fn container_id(test: &str) -> String {
    format!("eg-rc-{test}-{}", std::process::id())
}

/// The events about `container` (container and task events alike), in stored order.
fn about<'a>(rows: &'a [Row], container: &str) -> Vec<&'a Row> {
    rows.iter()
        .filter(|r| r.namespace != "eventgate" && r.container() == Some(container))
        .collect()
}

fn topics(rows: &[&Row]) -> Vec<String> {
    rows.iter().map(|r| r.topic.clone()).collect()
}

/// Waits until `ctr task ls` shows `id` STOPPED.
fn wait_stopped(containerd: &Containerd, id: &str) {
    containerd.wait_stopped("default", id);
}

#[test]
fn what_changed_while_eventgate_was_down_is_recorded_when_it_starts() {
    let containerd = Containerd::start();
    containerd.import_busybox();
    let mut tasks = Tasks::new(&containerd);
    let steady = container_id("steady");
    let victim = container_id("victim");
    let leaver = container_id("leaver");
    let coder = container_id("coder");
    tasks.run("default", &steady, &[], &["/bin/busybox", "sleep", "1000"]);
    tasks.run("default", &victim, &[], &["/bin/busybox", "sleep", "1000"]);
    containerd.ctr_in(
        "default",
        &[
            "container",
            "create",
            IMAGE,
            &leaver,
            "/bin/busybox",
            "true",
        ],
    );

    let mut gateway = start(&containerd, "reconcile_interval = \"0s\"");
    let rows = wait_reconciled(&mut gateway, 1);
    let first = markers(&rows, RECONCILED)[0].clone();
    // The first reconcile of an upstream has nothing to compare with: it takes the
    // daemon's state as the starting point and records no event for it.
    assert_eq!(first.event["baseline"], true, "{first:?}");
    assert_eq!(first.event["containers"], 3, "{first:?}");
    assert_eq!(first.event["tasks"], 2, "{first:?}");
    assert!(rows.iter().all(|r| r.namespace == "eventgate"), "{rows:?}");
    // The scenario is a gateway that went down after taking its baseline: the
    // snapshot is saved once the marker is durable, which may be after the audit
    // store has the marker, so wait for the snapshot itself.
    let snapshot = gateway.dir.path().join("data/state/node.json");
    wait_for("the baseline snapshot to be saved", DEADLINE, || {
        std::fs::read_to_string(&snapshot)
            .ok()
            .filter(|text| text.contains(&leaver))
            .map(drop)
    });

    gateway.kill9();
    containerd.ctr_in("default", &["task", "kill", "-s", "SIGKILL", &victim]);
    wait_stopped(&containerd, &victim);
    tasks.run(
        "default",
        &coder,
        &[],
        &["/bin/busybox", "sh", "-c", "exit 3"],
    );
    wait_stopped(&containerd, &coder);
    containerd.ctr_in("default", &["container", "rm", &leaver]);
    let tagged = "eventgate.test/busybox:tagged";
    containerd.ctr_in("default", &["image", "tag", IMAGE, tagged]);

    gateway.respawn();
    let rows = wait_reconciled(&mut gateway, 2);
    let second = markers(&rows, RECONCILED)[1].clone();
    let connected = markers(&rows, CONNECTED)[1].clone();
    let gap: Vec<&Row> = rows
        .iter()
        .filter(|r| r.row_id > connected.row_id && r.row_id < second.row_id)
        .collect();
    assert!(
        gap.iter().all(|r| r.origin == "reconciled"),
        "everything between the connection and the marker was reconstructed: {gap:?}"
    );

    let victim_events = about(&rows, &victim);
    assert_eq!(topics(&victim_events), ["/tasks/exit"], "{victim_events:?}");
    assert_eq!(victim_events[0].event["exit_status"], 137);
    assert_eq!(victim_events[0].origin_clock.as_deref(), Some("daemon"));
    let coder_events = about(&rows, &coder);
    assert_eq!(
        topics(&coder_events),
        ["/containers/create", "/tasks/start", "/tasks/exit"],
        "{coder_events:?}"
    );
    assert_eq!(coder_events[2].event["exit_status"], 3);
    assert_eq!(coder_events[0].event["image"], IMAGE);
    let leaver_events = about(&rows, &leaver);
    assert_eq!(
        topics(&leaver_events),
        ["/containers/delete"],
        "{leaver_events:?}"
    );
    assert_eq!(leaver_events[0].origin_clock.as_deref(), Some("reconcile"));
    let images: Vec<&Row> = gap
        .iter()
        .copied()
        .filter(|r| r.topic == "/images/create")
        .collect();
    assert_eq!(images.len(), 1, "{gap:?}");
    assert_eq!(images[0].event["name"], tagged);
    assert!(about(&rows, &steady).is_empty(), "nothing happened to it");

    assert_eq!(second.event["baseline"], false);
    assert_eq!(second.event["recorded"]["/tasks/exit"], 2, "{second:?}");
    assert_eq!(second.event["unknown_exits"], serde_json::json!([]));
    assert!(gateway.terminate().success(), "{}", gateway.stderr_text());
}

#[test]
fn restarting_ten_times_on_an_unchanged_node_records_only_markers() {
    let containerd = Containerd::start();
    containerd.import_busybox();
    let mut tasks = Tasks::new(&containerd);
    let running = container_id("unchanged");
    tasks.run(
        "default",
        &running,
        &["--label", "app=web"],
        &["/bin/busybox", "sleep", "1000"],
    );
    let mut gateway = start(&containerd, "reconcile_interval = \"0s\"");
    let db = audit_db(&gateway);
    wait_reconciled(&mut gateway, 1);
    for n in 2..=11 {
        assert!(gateway.restart().success(), "{}", gateway.stderr_text());
        wait_reconciled(&mut gateway, n);
    }
    let rows = stored(&db);
    let events: Vec<&Row> = rows.iter().filter(|r| r.namespace != "eventgate").collect();
    assert!(events.is_empty(), "{events:?}");
    for marker in markers(&rows, RECONCILED) {
        assert_eq!(
            marker.event["recorded"],
            serde_json::json!({}),
            "{marker:?}"
        );
    }
}

#[test]
fn an_exit_while_containerd_was_down_is_recorded_once() {
    let mut containerd = Containerd::start();
    containerd.import_busybox();
    let id = container_id("orphan");
    // Not through `Tasks`: containerd itself is killed and restarted below.
    let fifos = containerd.dir.path().join("fifo");
    containerd.ctr_in(
        "default",
        &[
            "run",
            "-d",
            "--fifo-dir",
            path_str(&fifos),
            IMAGE,
            &id,
            "/bin/busybox",
            "sleep",
            "1000",
        ],
    );
    let mut gateway = start(&containerd, "reconcile_interval = \"1s\"");
    let db = audit_db(&gateway);
    wait_reconciled(&mut gateway, 1);
    let pid = containerd
        .ctr_in("default", &["task", "ls"])
        .lines()
        .find(|line| line.starts_with(id.as_str()))
        .and_then(|line| line.split_whitespace().nth(1).map(str::to_owned))
        .expect("the task's pid");

    containerd.kill9();
    let killed = std::process::Command::new("kill")
        .args(["-9", &pid])
        .status()
        .expect("kill");
    assert!(killed.success());
    containerd.restart();
    wait_stopped(&containerd, &id);
    // The shim may still deliver its exit event once containerd is back, or the
    // reconcile finds the task stopped: either way, one exit, with the real status.
    let settled = markers(&stored(&db), RECONCILED).len() + 2;
    let rows = wait_reconciled(&mut gateway, settled);
    let exits: Vec<&Row> = about(&rows, &id)
        .into_iter()
        .filter(|r| r.topic == "/tasks/exit")
        .collect();
    assert_eq!(exits.len(), 1, "{exits:?}");
    assert_eq!(exits[0].event["exit_status"], 137);
    assert!(gateway.terminate().success(), "{}", gateway.stderr_text());
    // The stopped task keeps its rootfs mounted until it is deleted: left, it would
    // outlive the test's containerd and its directory.
    containerd.ctr_in("default", &["task", "rm", &id]);
}

#[test]
fn the_periodic_relist_records_what_an_upstream_filter_hid_once() {
    let containerd = Containerd::start();
    containerd.import_busybox();
    let mut gateway = start(
        &containerd,
        "filters = ['topic~=\"^/tasks/\"']\nreconcile_interval = \"1s\"",
    );
    let db = audit_db(&gateway);
    wait_reconciled(&mut gateway, 1);
    let id = container_id("hidden");
    containerd.ctr_in(
        "default",
        &["container", "create", IMAGE, &id, "/bin/busybox", "true"],
    );
    let rows = wait_for("the hidden container's create", DEADLINE, || {
        let rows = stored(&db);
        (!about(&rows, &id).is_empty()).then_some(rows)
    });
    let created = about(&rows, &id);
    assert_eq!(topics(&created), ["/containers/create"]);
    assert_eq!(created[0].origin, "reconciled");
    let seen = markers(&rows, RECONCILED).len();
    let rows = wait_reconciled(&mut gateway, seen + 2);
    assert_eq!(
        topics(&about(&rows, &id)),
        ["/containers/create"],
        "recorded once"
    );
    containerd.ctr_in("default", &["container", "rm", &id]);
    assert!(gateway.terminate().success(), "{}", gateway.stderr_text());
}

#[test]
fn live_events_during_a_reconcile_are_not_doubled() {
    let containerd = Containerd::start();
    containerd.import_busybox();
    // Reconciles back to back, so the lists are being read while containers change.
    let mut gateway = start(&containerd, "reconcile_interval = \"10ms\"");
    let db = audit_db(&gateway);
    wait_reconciled(&mut gateway, 1);
    let ids: Vec<String> = (0..30)
        .map(|i| container_id(&format!("churn{i}")))
        .collect();
    for (i, id) in ids.iter().enumerate() {
        containerd.ctr_in(
            "default",
            &["container", "create", IMAGE, id, "/bin/busybox", "true"],
        );
        if i % 2 == 0 {
            containerd.ctr_in("default", &["container", "rm", id]);
        }
    }
    let seen = markers(&stored(&db), RECONCILED).len();
    let rows = wait_reconciled(&mut gateway, seen + 2);
    for (i, id) in ids.iter().enumerate() {
        let expected: &[&str] = if i % 2 == 0 {
            &["/containers/create", "/containers/delete"]
        } else {
            &["/containers/create"]
        };
        assert_eq!(
            topics(&about(&rows, id)),
            expected,
            "{id}: {:?}",
            about(&rows, id)
        );
    }
    for id in ids.iter().skip(1).step_by(2) {
        containerd.ctr_in("default", &["container", "rm", id]);
    }
    assert!(gateway.terminate().success(), "{}", gateway.stderr_text());
}

#[test]
fn a_crash_before_the_snapshot_is_saved_doubles_nothing() {
    let containerd = Containerd::start();
    containerd.import_busybox();
    let mut gateway = start(&containerd, "reconcile_interval = \"0s\"");
    wait_reconciled(&mut gateway, 1);
    // Recorded live, then a crash well before the snapshot's next save (every 5 s):
    // the restarted gateway learns of it from the spool, not from the daemon.
    let id = container_id("crash");
    containerd.ctr_in(
        "default",
        &["container", "create", IMAGE, &id, "/bin/busybox", "true"],
    );
    let db = audit_db(&gateway);
    wait_for("the live create", DEADLINE, || {
        (!about(&stored(&db), &id).is_empty()).then_some(())
    });
    gateway.kill9();
    gateway.respawn();
    let rows = wait_reconciled(&mut gateway, 2);
    let events = about(&rows, &id);
    assert_eq!(topics(&events), ["/containers/create"], "{events:?}");
    assert_eq!(events[0].origin, "live");
    assert_eq!(
        markers(&rows, RECONCILED)[1].event["recorded"],
        serde_json::json!({})
    );
    containerd.ctr_in("default", &["container", "rm", &id]);
    assert!(gateway.terminate().success(), "{}", gateway.stderr_text());
}
