//! `eventgate bench reconcile` on a small node, so it cannot rot: it fills a private
//! containerd, reconciles through the real gateway, checks what was recorded, prints
//! its table, and leaves no containerd, shim, task or gateway behind, also when it
//! is interrupted. `--cri` likewise, on a small Kubernetes node (containerd's CRI
//! plugin, filled through the CRI).

use crate::support;

use std::process::{Command, Stdio};

use support::*;

const SMALL: [&str; 12] = [
    "--containers",
    "50",
    "--tasks",
    "5",
    "--changed",
    "9",
    "--killed",
    "2",
    "--rounds",
    "1",
    "--at-once",
    "4",
];

fn bench() -> Command {
    let mut command = eventgate();
    command.args(["bench", "reconcile"]).args(SMALL);
    command
}

/// The benchmark's working directory, from its first line.
fn working_dir(line: &str) -> String {
    line.strip_prefix("working in ")
        .unwrap_or_else(|| panic!("first line is not the working directory: {line:?}"))
        .to_owned()
}

/// Processes whose command line names `dir` (containerd, its shims, the gateway) or
/// whose cgroup names a task of the benchmark with process id `bench` (the
/// containers' own processes, which a shim killed abruptly would leave running).
fn left_running(dir: &str, bench: u32) -> Vec<String> {
    let task_cgroup = format!("/egb{bench}-");
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline"))
            .map(|bytes| String::from_utf8_lossy(&bytes).replace('\0', " "))
            .unwrap_or_default();
        let cgroup = std::fs::read_to_string(entry.path().join("cgroup")).unwrap_or_default();
        if cmdline.contains(dir) || cgroup.contains(&task_cgroup) {
            found.push(format!("{pid}: {cmdline}"));
        }
    }
    found
}

#[test]
fn the_reconcile_benchmark_checks_what_was_recorded_and_prints_its_table() {
    let child = bench()
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn eventgate bench reconcile");
    let pid = child.id();
    let out = child.wait_with_output().expect("bench output");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let table = String::from_utf8_lossy(&out.stdout);
    let row = |name: &str| {
        table
            .lines()
            .find(|l| l.starts_with(&format!("| {name} |")))
            .unwrap_or_else(|| panic!("no row {name}:\n{table}"))
    };
    assert!(
        table.contains("A node of 50 containers (5 with a running task)"),
        "{table}"
    );
    // The first start takes the node as its starting point; the second records the
    // changes made while it was down: 3 created, 3 relabelled, 3 removed, 2 exits.
    assert!(row("2a").contains("| 0 (0) |"), "{table}");
    assert!(row("2b").contains("| 11 (11) |"), "{table}");
    assert!(row("3b").contains("| 11 |"), "{table}");
    for name in ["1a", "1b", "3a"] {
        assert!(row(name).contains("x |"), "{table}");
    }
    for target in [
        "Target: reconcile under 1 s",
        "Target: memory under 64.0 MiB",
    ] {
        assert!(table.contains(target), "{table}");
    }

    let dir = working_dir(stderr.lines().next().unwrap_or_default());
    assert!(
        !std::path::Path::new(&dir).exists(),
        "{dir} was not removed"
    );
    let left = left_running(&dir, pid);
    assert!(left.is_empty(), "still running: {left:#?}");
}

#[test]
fn an_interrupted_reconcile_benchmark_stops_its_tasks_containerd_and_gateway() {
    let mut child = bench()
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn eventgate bench reconcile");
    let pid = child.id();
    let stderr = Lines::new(child.stderr.take().expect("stderr"));
    let dir = working_dir(&stderr.next(DEADLINE).expect("the working directory"));

    // Interrupted while everything it starts is running: containerd, 5 shims and
    // their tasks, and a gateway reconciling.
    let running = wait_for("the benchmark's gateway to start", DEADLINE * 3, || {
        let running = left_running(&dir, pid);
        running
            .iter()
            .any(|p| p.contains(" serve ") && p.contains("--upstream"))
            .then_some(running)
    });
    assert!(
        running.iter().any(|p| p.contains("containerd --config")),
        "{running:#?}"
    );
    assert!(
        running.iter().filter(|p| p.contains("sleep")).count() >= 5,
        "the tasks' processes are found by their cgroup: {running:#?}"
    );
    signal(&child, nix::sys::signal::Signal::SIGINT);
    let status = wait_exit(&mut child, DEADLINE * 3);
    let mut stderr = stderr;
    let said = stderr.drain();
    assert!(!status.success(), "{said}");
    assert!(said.contains("interrupted"), "{said}");
    let left = left_running(&dir, pid);
    assert!(
        left.is_empty(),
        "still running after the benchmark exited: {left:#?}"
    );
}

/// The lines of `/proc/self/mountinfo` that name `dir` (the pods' shm mounts).
fn mounted_under(dir: &str) -> Vec<String> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .expect("/proc/self/mountinfo")
        .lines()
        .filter(|line| line.contains(dir))
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_cri_reconcile_benchmark_checks_status_calls_and_events_and_prints_its_table() {
    let child = eventgate()
        .args(["bench", "reconcile", "--cri"])
        .args([
            "--containers",
            "40",
            "--pods",
            "4",
            "--exited",
            "4",
            "--exited-while-down",
            "2",
            "--rounds",
            "1",
            "--at-once",
            "4",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn eventgate bench reconcile --cri");
    let pid = child.id();
    let out = child.wait_with_output().expect("bench output");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let table = String::from_utf8_lossy(&out.stdout);
    let row = |name: &str| {
        table
            .lines()
            .find(|l| l.starts_with(&format!("| {name} |")))
            .unwrap_or_else(|| panic!("no row {name}:\n{table}"))
    };
    assert!(
        table.contains("4 hostNetwork pods (running sandboxes) and 40 containers"),
        "{table}"
    );
    assert!(
        row("1a").contains("(4 sandboxes, 40 containers)"),
        "{table}"
    );
    // Status calls (expected), then events recorded (expected): none for an unchanged
    // node, one status call per exit the record lacks, and each run that ended while
    // the gateway was down told as start, exit and delete.
    assert!(row("2a").contains("| 0 (0) |"), "{table}");
    assert!(row("2b").contains("| 4 (4) |"), "{table}");
    assert!(row("3a").contains("| 4 (4) | 0 (0) |"), "{table}");
    assert!(row("3b").contains("| 0 (0) | 0 (0) |"), "{table}");
    assert!(row("3c").contains("| 2 (2) | 6 (6) |"), "{table}");
    for name in ["1a", "1b", "2a", "2b", "3a", "3b", "3c"] {
        assert!(row(name).contains("x |"), "{table}");
    }
    assert!(
        table.contains("Target: 40 CRI containers reconciled in under 1 s"),
        "{table}"
    );

    let dir = working_dir(stderr.lines().next().unwrap_or_default());
    assert!(
        !std::path::Path::new(&dir).exists(),
        "{dir} was not removed"
    );
    let left = left_running(&dir, pid);
    assert!(left.is_empty(), "still running: {left:#?}");
    let mounted = mounted_under(&dir);
    assert!(mounted.is_empty(), "still mounted: {mounted:#?}");
}
