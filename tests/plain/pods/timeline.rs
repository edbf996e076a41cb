//! Timelines beyond the one pod of `history`: a pod recreated under the same name,
//! an exec's exit, a reconstructed event, and a timeline followed while the gateway
//! stores new events.

use std::process::Stdio;
use std::sync::Arc;

use eventgate::event::{Clock, Origin, Witness, Workload};

use super::history::{Step, append, exit, pod, run, start, start_gateway, stdout, stop};
use super::support::audit::stored;
use super::support::{DEADLINE, Lines, eventgate, path_str, wait_for};
use super::{line, timeline};

fn with_uid(uid: &str) -> Option<Arc<Workload>> {
    let mut workload = (*pod("shop", "web-7", Some("nginx")).unwrap()).clone();
    workload.pod_uid = Some(uid.into());
    Some(Arc::new(workload))
}

/// The pod's container with the CRI's reason for its state.
fn completed(uid: &str) -> Option<Arc<Workload>> {
    let mut workload = (*with_uid(uid).unwrap()).clone();
    workload.reason = Some("Completed".into());
    Some(Arc::new(workload))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_new_pod_of_the_same_name_an_exec_and_a_reconciled_event_read_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let steps: Vec<Step> = vec![
        ("/tasks/start", start("c1", 10), with_uid("uid-a")),
        (
            "/tasks/exit",
            r#"{"container_id":"c1","id":"probe","pid":11,"exit_status":2}"#.into(),
            with_uid("uid-a"),
        ),
        ("/tasks/exit", exit("c1", 0), with_uid("uid-a")),
        ("/tasks/start", start("c2", 20), with_uid("uid-b")),
        ("/tasks/exit", exit("c2", 0), completed("uid-b")),
    ];
    let gateway = start_gateway(&data).await;
    for (i, step) in steps.iter().enumerate() {
        let origin = match i {
            2 => Origin::reconciled(Clock::Daemon),
            // An exit the CRI kept after containerd deleted it.
            4 => Origin::Reconciled {
                clock: Clock::Daemon,
                from: Witness::Cri,
            },
            _ => Origin::Live,
        };
        append(&gateway, i, step, origin).await;
    }
    stop(gateway, steps.len()).await;
    let db = data.join("audit.db");
    let db = path_str(&db);

    let out = stdout(&run(&["query", "--db", db, "--utc", "--pod", "web-7"]));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "pod shop/web-7 (uid uid-a)", "{out}");
    assert!(
        lines.contains(&"pod shop/web-7 again, a new pod of the same name (uid uid-b)"),
        "{out}"
    );
    assert_eq!(
        timeline(&out),
        [
            line("nginx", "started (pid 10)"),
            // A probe's failure is not the container's.
            line("nginx", "exec probe exited with status 2"),
            line("nginx", "exited with status 0 [reconciled]"),
            // Another pod's container starting is no restart of this one's.
            line("nginx", "started (pid 20)"),
            line(
                "nginx",
                "exited with status 0 [reconciled by cri, reason Completed]",
            ),
        ],
        "{out}"
    );
    assert_eq!(
        lines.last().copied(),
        Some("restarts 0, OOM events 0, non-zero exits 0 (status 137: 0, OOM-killed: 0)")
    );

    // ctr's format instead of the timeline: the same five events.
    let ctr = stdout(&run(&[
        "query", "--db", db, "--format", "ctr", "--pod", "web-7",
    ]));
    assert_eq!(ctr.lines().count(), 5, "{ctr}");
    assert!(ctr.lines().all(|l| l.contains(" k8s.io /tasks/")), "{ctr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_followed_timeline_prints_a_pods_events_as_they_are_stored() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let db = data.join("audit.db");
    let gateway = start_gateway(&data).await;
    wait_for("the store", DEADLINE, || db.exists().then_some(()));

    // Started before the pod has any event: waits for it.
    let mut child = eventgate()
        .args(["query", "--db", path_str(&db), "--utc", "--follow"])
        .args(["--pod", "web-7", "--pod-namespace", "shop"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = Lines::new(child.stdout.take().unwrap());

    let nginx = || pod("shop", "web-7", Some("nginx"));
    let other = pod("shop", "db-0", Some("db"));
    append(
        &gateway,
        0,
        &("/tasks/start", start("d1", 1), other),
        Origin::Live,
    )
    .await;
    append(
        &gateway,
        1,
        &("/tasks/start", start("n1", 200), nginx()),
        Origin::Live,
    )
    .await;
    let seen = lines.until("the first start", |l| l.contains("started (pid 200)"));
    assert_eq!(seen[0], "pod shop/web-7 (uid uid-shop-web-7)", "{seen:?}");
    assert!(seen.iter().all(|l| !l.contains("pid 1)")), "{seen:?}");

    append(
        &gateway,
        2,
        &("/tasks/exit", exit("n1", 1), nginx()),
        Origin::Live,
    )
    .await;
    let seen = lines.until("the exit", |l| l.contains("exited"));
    assert!(
        seen.last()
            .unwrap()
            .ends_with("nginx      ! exited with status 1 (non-zero)"),
        "{seen:?}"
    );
    wait_for("three rows", DEADLINE, || {
        (stored(&db).len() == 3).then_some(())
    });

    child.kill().unwrap();
    child.wait().unwrap();
    stop(gateway, 3).await;
}
