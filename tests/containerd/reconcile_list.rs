//! Listing a daemon's state (`reconcile::list_node`) against a real containerd set up
//! with `ctr`: every fact `ctr` created is read back. The scripted daemon's fallbacks
//! and limits are in tests/plain/reconcile_list.rs.

use crate::support;

use std::collections::BTreeMap;
use std::time::SystemTime;

use eventgate::internal::reconcile::{NodeState, TaskStatus, list_node};
use support::containerd::{Containerd, IMAGE, Tasks, busybox_image, ctr_at};
use support::*;

const RUNTIME: &str = "io.containerd.runc.v2";

/// The rows of a `ctr ... ls` table, split on whitespace, without the header.
fn table(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .skip(1)
        .map(|line| line.split_whitespace().map(str::to_owned).collect())
        .filter(|row: &Vec<String>| !row.is_empty())
        .collect()
}

fn list(containerd: &Containerd) -> NodeState {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let channel = eventgate::client::connect_channel(&containerd.address(), DEADLINE)
            .await
            .expect("connect to containerd");
        list_node(channel, DEADLINE).await.expect("list_node")
    })
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn between(time: Option<SystemTime>, from: SystemTime, to: SystemTime, what: &str) {
    let time = time.unwrap_or_else(|| panic!("{what}: no time"));
    assert!(
        from <= time && time <= to,
        "{what}: {time:?} not within the test"
    );
}

#[test]
fn every_namespace_container_task_and_image_ctr_made_is_listed() {
    let containerd = Containerd::start();
    let pid = std::process::id();
    let (web, batch) = (format!("eglist-web-{pid}"), format!("eglist-batch-{pid}"));
    let (idle, sleeper, exit3) = (
        format!("eg-idle-{pid}"),
        format!("eg-sleeper-{pid}"),
        format!("eg-exit3-{pid}"),
    );
    let tagged = "eventgate.test/busybox:tagged";
    let before = SystemTime::now();

    for namespace in [&web, &batch] {
        containerd.ctr_in(namespace, &["namespaces", "create", namespace]);
        containerd.ctr_in(namespace, &["image", "import", path_str(busybox_image())]);
    }
    containerd.ctr_in(
        &web,
        &["namespaces", "label", &web, "team=blue", "tier=front"],
    );
    containerd.ctr_in(&web, &["image", "tag", IMAGE, tagged]);
    containerd.ctr_in(
        &web,
        &[
            "container",
            "create",
            "--label",
            "app=idle",
            "--label",
            "k=v",
            IMAGE,
            &idle,
        ],
    );
    let mut tasks = Tasks::new(&containerd);
    tasks.run(
        &web,
        &sleeper,
        &["--label", "app=sleeper"],
        &["/bin/busybox", "sleep", "1000"],
    );
    tasks.run(&batch, &exit3, &[], &["/bin/busybox", "sh", "-c", "exit 3"]);
    wait_for("the exit-3 task to stop", DEADLINE, || {
        let rows = table(&containerd.ctr_in(&batch, &["task", "ls"]));
        rows.iter()
            .any(|row| row[0] == exit3 && row.get(2).map(String::as_str) == Some("STOPPED"))
            .then_some(())
    });
    let task_rows = table(&containerd.ctr_in(&web, &["task", "ls"]));
    let image_rows = [&web, &batch].map(|ns| table(&containerd.ctr_in(ns, &["image", "ls"])));

    let node = list(&containerd);
    let after = SystemTime::now();

    let names: Vec<&String> = node.namespaces.keys().collect();
    assert_eq!(names, [&batch, &web], "exactly the namespaces ctr created");
    let web_state = &node.namespaces[&web];
    let batch_state = &node.namespaces[&batch];
    assert_eq!(
        web_state.labels,
        Some(labels(&[("team", "blue"), ("tier", "front")]))
    );
    assert_eq!(batch_state.labels, Some(BTreeMap::new()));

    // Containers: ids, image, runtime, labels as ctr set them, the daemon's times.
    let ids: Vec<&String> = web_state.containers.keys().collect();
    assert_eq!(ids, [&idle, &sleeper]);
    for (id, wanted) in [
        (&idle, labels(&[("app", "idle"), ("k", "v")])),
        (&sleeper, labels(&[("app", "sleeper")])),
    ] {
        let container = &web_state.containers[id];
        assert_eq!(container.image, IMAGE, "{id}");
        assert_eq!(container.runtime, RUNTIME, "{id}");
        let listed = container.labels.as_ref().expect("labels from a list");
        for (key, value) in &wanted {
            assert_eq!(listed.get(key), Some(value), "{id}: label {key}");
        }
        // ctr adds labels of its own (the image's stop signal): all are listed.
        let info: serde_json::Value =
            serde_json::from_str(&containerd.ctr_in(&web, &["container", "info", id]))
                .expect("ctr container info prints JSON");
        let ctr_labels: BTreeMap<String, String> =
            serde_json::from_value(info["Labels"].clone()).expect("Labels");
        assert_eq!(
            listed, &ctr_labels,
            "{id}: labels as ctr container info shows them"
        );
        between(container.created_at, before, after, "created_at");
        between(container.updated_at, before, after, "updated_at");
    }
    assert_eq!(batch_state.containers.keys().collect::<Vec<_>>(), [&exit3]);

    // Tasks: the sleeper runs with the pid ctr shows; the idle container has none.
    assert_eq!(web_state.tasks.keys().collect::<Vec<_>>(), [&sleeper]);
    let running = &web_state.tasks[&sleeper];
    assert_eq!(running.status, TaskStatus::Running);
    assert!(running.pid > 0);
    let ctr_pid = task_rows
        .iter()
        .find(|row| row[0] == sleeper)
        .map(|row| row[1].clone());
    assert_eq!(
        ctr_pid,
        Some(running.pid.to_string()),
        "pid as ctr task ls shows it"
    );
    assert_eq!((running.exit_status, running.exited_at), (None, None));

    let exited = &batch_state.tasks[&exit3];
    assert_eq!(exited.status, TaskStatus::Stopped);
    assert_eq!(exited.exit_status, Some(3));
    between(exited.exited_at, before, after, "exited_at");

    // Images: both names in the first namespace, one in the second, each with the
    // digest ctr prints.
    assert_eq!(
        web_state
            .images
            .keys()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        [IMAGE, tagged]
    );
    assert_eq!(
        batch_state
            .images
            .keys()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        [IMAGE]
    );
    for (state, rows) in [web_state, batch_state].iter().zip(&image_rows) {
        assert_eq!(rows.len(), state.images.len());
        for row in rows {
            let image = &state.images[&row[0]];
            assert_eq!(
                image.target_digest.as_deref(),
                Some(row[2].as_str()),
                "{}",
                row[0]
            );
            assert!(row[2].starts_with("sha256:"));
            assert!(image.labels.is_some());
            between(image.created_at, before, after, "image created_at");
        }
    }
    assert_eq!(
        web_state.images[IMAGE].target_digest, web_state.images[tagged].target_digest,
        "a tag names the same target"
    );
}

/// This process's resident memory, `VmRSS` or `VmHWM` (the peak), in KiB.
fn memory_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"))
}

/// A measurement as much as a test: a node with 2,000 containers (created with
/// `ctr container create`, several at a time) is listed whole, and what it cost is
/// printed. The bounds are the targets for a whole reconcile.
#[test]
fn two_thousand_containers_are_listed_in_under_a_second_within_64_mib() {
    const CONTAINERS: usize = 2_000;
    const AT_ONCE: usize = 8;
    let containerd = Containerd::start();
    let namespace = format!("eglist-big-{}", std::process::id());
    containerd.ctr_in(&namespace, &["image", "import", path_str(busybox_image())]);
    let created = std::time::Instant::now();
    std::thread::scope(|scope| {
        for worker in 0..AT_ONCE {
            let (socket, namespace) = (&containerd.socket, &namespace);
            scope.spawn(move || {
                for i in (worker..CONTAINERS).step_by(AT_ONCE) {
                    let id = format!("eg-many-{i:04}");
                    ctr_at(
                        socket,
                        namespace,
                        &[
                            "container",
                            "create",
                            "--label",
                            &format!("n={i}"),
                            IMAGE,
                            &id,
                        ],
                    );
                }
            });
        }
    });
    eprintln!("created {CONTAINERS} containers in {:?}", created.elapsed());

    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let channel = runtime
        .block_on(eventgate::client::connect_channel(
            &containerd.address(),
            DEADLINE,
        ))
        .expect("connect to containerd");
    for round in 0..3 {
        let before = memory_kib("VmRSS");
        // Resets the peak to the current size, so VmHWM is this round's peak.
        std::fs::write("/proc/self/clear_refs", "5").expect("reset the peak RSS");
        let started = std::time::Instant::now();
        let node = runtime
            .block_on(list_node(channel.clone(), DEADLINE))
            .expect("list_node");
        let elapsed = started.elapsed();
        let peak = memory_kib("VmHWM");
        let listed = &node.namespaces[&namespace].containers;
        assert_eq!(listed.len(), CONTAINERS);
        assert_eq!(
            listed["eg-many-1999"]
                .labels
                .as_ref()
                .and_then(|l| l.get("n")),
            Some(&"1999".to_owned())
        );
        eprintln!(
            "round {round}: listed {} containers in {elapsed:?}; RSS {before} KiB before, peak {peak} KiB (+{} KiB)",
            listed.len(),
            peak.saturating_sub(before)
        );
        drop(node);
        assert!(elapsed < std::time::Duration::from_secs(1), "{elapsed:?}");
        assert!(
            peak.saturating_sub(before) < 64 * 1024,
            "+{} KiB",
            peak - before
        );
    }
}
