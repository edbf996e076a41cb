//! Pods in the audit store, through the real `eventgate` binary. A gateway built
//! through the library takes events with what their container's record said (as an
//! upstream's enrichment hands them over: `Exchange::append`), its `sqlite`
//! forwarder stores them; then `eventgate query --pod`, `stats --by pod`, filters on
//! the pod and container fields, `audit verify` and `replay` read the store. A real
//! containerd is not needed for any of it: the store sees only events.

use crate::support;

#[path = "pods/history.rs"]
pub(crate) mod history;
#[path = "pods/store.rs"]
mod store;
#[path = "pods/timeline.rs"]
mod timelines;

use history::{history, json_lines, run, stdout, store};
use support::path_str;

/// Each timeline line after the time: (container, what happened).
fn timeline(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter(|l| l.starts_with("2024-"))
        .map(|l| {
            let rest = l["2024-05-01T10:00:00.000000000Z".len()..].trim_start();
            let (who, what) = rest.split_once("  ").unwrap();
            (who.to_owned(), what.trim_start().to_owned())
        })
        .collect()
}

fn line(who: &str, what: &str) -> (String, String) {
    (who.to_owned(), what.to_owned())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pods_timeline_names_its_sandbox_and_containers_after_they_are_gone() {
    let dir = tempfile::tempdir().unwrap();
    let db = store(&dir.path().join("data"), &history()).await;
    let db = path_str(&db);

    let out = stdout(&run(&[
        "query",
        "--db",
        db,
        "--utc",
        "--pod",
        "web-7",
        "--pod-namespace",
        "shop",
    ]));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "pod shop/web-7 (uid uid-shop-web-7)", "{out}");
    assert!(
        lines[1].starts_with("TIME") && lines[1].contains("CONTAINER"),
        "{out}"
    );
    assert!(
        lines[2].starts_with("2024-05-01T10:00:00.000000000Z  sandbox"),
        "{out}"
    );
    assert_eq!(
        timeline(&out),
        [
            line("sandbox", "created sb1 (image registry.k8s.io/pause:3.9)"),
            line("sandbox", "task created (pid 100)"),
            line("sandbox", "started (pid 100)"),
            line("nginx", "created n1 (image docker.io/library/nginx:1.27)"),
            line("nginx", "started (pid 200)"),
            line("nginx", "! exited with status 1 (non-zero)"),
            line("nginx", "task deleted (exit status 1)"),
            line("nginx", "deleted"),
            // The record's image when the event does not carry one.
            line("nginx", "created n2 (image docker.io/library/nginx:1.27)"),
            line("nginx", "restarted (pid 300): restart 1"),
            line("nginx", "! out of memory (/tasks/oom)"),
            line("nginx", "! exited with status 137: OOM-killed"),
            line("nginx", "task deleted (exit status 137)"),
            line("nginx", "deleted"),
            line("sandbox", "exited with status 137"),
            line("sandbox", "deleted"),
        ],
        "{out}"
    );
    assert_eq!(
        lines.last().copied(),
        Some("restarts 1, OOM events 1, non-zero exits 2 (status 137: 1, OOM-killed: 1)"),
        "{out}"
    );

    // A time range shows its part, and still knows nginx had started before it.
    let out = stdout(&run(&[
        "query",
        "--db",
        db,
        "--utc",
        "--pod",
        "web-7",
        "--pod-namespace",
        "shop",
        "--since",
        "2024-05-01T10:00:09Z",
        "--until",
        "2024-05-01T10:00:12Z",
    ]));
    assert_eq!(
        timeline(&out),
        [
            line("nginx", "restarted (pid 300): restart 1"),
            line("nginx", "! out of memory (/tasks/oom)"),
            line("nginx", "! exited with status 137: OOM-killed"),
        ],
        "{out}"
    );

    // --format json: the pod's events as JSON lines, exactly the file forwarder's.
    let logged =
        json_lines(&std::fs::read_to_string(dir.path().join("data/events.jsonl")).unwrap());
    let queried = json_lines(&stdout(&run(&[
        "query",
        "--db",
        db,
        "--format",
        "json",
        "--pod",
        "web-7",
        "--pod-namespace",
        "shop",
    ])));
    assert_eq!(
        queried,
        logged[..16],
        "the first 16 events are shop/web-7's"
    );
    assert_eq!(
        queried[4]["pod"],
        serde_json::json!({"name": "web-7", "namespace": "shop", "uid": "uid-shop-web-7"})
    );
    assert_eq!(queried[4]["container"]["name"], "nginx");
    assert_eq!(
        queried[4]["container"]["labels"]["app.kubernetes.io/name"],
        "web-7"
    );

    // With --limit, the first events only.
    let limited = stdout(&run(&[
        "query", "--db", db, "--utc", "--pod", "db-0", "--limit", "1",
    ]));
    assert_eq!(
        timeline(&limited),
        [line("db", "started (pid 500)")],
        "{limited}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pod_name_in_several_namespaces_is_refused_with_the_list() {
    let dir = tempfile::tempdir().unwrap();
    let db = store(&dir.path().join("data"), &history()).await;
    let db = path_str(&db);

    let out = run(&["query", "--db", db, "--pod", "web-7"]);
    assert!(!out.status.success());
    assert!(out.stdout.is_empty(), "nothing mixed is printed");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("shop (16 events)") && err.contains("staging (2 events)"),
        "{err}"
    );
    assert!(err.contains("--pod-namespace"), "{err}");

    // Narrowed by a filter or a time range to one namespace, the name is enough.
    let staging = stdout(&run(&[
        "query",
        "--db",
        db,
        "--utc",
        "--pod",
        "web-7",
        "pod.namespace==staging",
    ]));
    assert_eq!(
        timeline(&staging),
        [
            line("app", "started (pid 400)"),
            line("app", "exited with status 0")
        ]
    );
    let late = stdout(&run(&[
        "query",
        "--db",
        db,
        "--utc",
        "--pod",
        "web-7",
        "--since",
        "2024-05-01T10:00:16Z",
    ]));
    assert!(late.starts_with("pod staging/web-7"), "{late}");

    // An unknown pod is an error, not an empty timeline.
    let out = run(&["query", "--db", db, "--pod", "nope"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no stored event of a pod named \"nope\""),
        "{err}"
    );
    let out = run(&[
        "query",
        "--db",
        db,
        "--pod",
        "nope",
        "--pod-namespace",
        "shop",
    ]);
    assert!(!out.status.success());
}

#[tokio::test(flavor = "multi_thread")]
async fn stats_by_pod_counts_restarts_ooms_and_nonzero_exits_crash_looping_first() {
    let dir = tempfile::tempdir().unwrap();
    let db = store(&dir.path().join("data"), &history()).await;
    let db = path_str(&db);

    let out = stdout(&run(&["stats", "--db", db, "--by", "pod"]));
    let rows: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows,
        [
            vec!["POD", "RESTARTS", "OOM", "NONZERO", "137", "OOMKILLED"],
            vec!["shop/web-7", "1", "1", "2", "1", "1"],
            vec!["shop/db-0", "0", "0", "1", "1", "0"],
            vec!["staging/web-7", "0", "0", "0", "0", "0"],
        ],
        "{out}"
    );

    // Filters and time bounds apply as for every query.
    let out = stdout(&run(&[
        "stats",
        "--db",
        db,
        "--by",
        "pod",
        "--since",
        "2024-05-01T10:00:09Z",
        "pod.namespace==shop",
    ]));
    let rows: Vec<Vec<&str>> = out
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows,
        [
            vec!["shop/web-7", "1", "1", "1", "1", "1"],
            vec!["shop/db-0", "0", "0", "1", "1", "0"],
        ],
        "{out}"
    );

    let refused = run(&["stats", "--db", db, "--by", "pod", "--bucket", "1h"]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--bucket"));
}
