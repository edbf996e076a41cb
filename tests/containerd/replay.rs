//! `eventgate replay` into a real containerd: several in flight keep each container's
//! order. The rest: tests/plain/replay.rs.

use crate::support;

use serde_json::Value;
use support::stores::*;
use support::*;

/// The same into a real containerd, watched with the real `ctr events`: its exchange
/// takes the Forwards, and each container's events come out in their order.
#[test]
fn several_in_flight_into_a_real_containerd_keep_each_containers_order() {
    let containerd = support::containerd::Containerd::start();
    let address = containerd.address();
    let ctr = Watcher::spawn({
        let mut cmd = std::process::Command::new("ctr");
        cmd.args(["--address", &address, "events"]);
        cmd
    });
    prove_live(&address, &ctr);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("audit.db");
    let events = interleaved_store(&db);
    let out = run(&[
        "replay",
        "--db",
        path_str(&db),
        "--to-address",
        &address,
        "--in-flight",
        "4",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));

    let mut received = Vec::new();
    while received.len() < events.len() {
        let lines = ctr
            .stdout
            .until("the replayed events", |l| !l.contains("/probe"));
        for line in without_probes(lines) {
            // "<date> <time> +0000 UTC <namespace> <topic> <json>"
            let json: Value = serde_json::from_str(line.splitn(7, ' ').nth(6).unwrap()).unwrap();
            received.push((
                json["container_id"].as_str().unwrap().to_owned(),
                json["pid"].as_u64().unwrap(),
            ));
        }
    }
    assert_each_once_in_container_order(&received, events.len());
}

// ---------------------------------------------------------------- kafka
