//! `eventgate timeline --out FILE`, through the real binary, on an audit store holding
//! a pod's life, an upstream's gap and what the reconcile after it reconstructed.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use eventgate::event::{Clock, Event, EventId, Origin, Source, Workload};
use eventgate::proto::Registry;
use eventgate::proto::containerd::types::Envelope;
use eventgate::proto::eventgate::events::v1::UpstreamConnected;
use prost::Message;

use crate::support::path_str;
use crate::support::stores::{run, text, write_store};

const T0: i64 = 1_714_557_600; // 2024-05-01T10:00:00Z

fn pod(container: Option<&str>) -> Option<Arc<Workload>> {
    crate::pods::history::pod("shop", "web-7", container)
}

fn event(
    i: i64,
    topic: &str,
    type_name: &str,
    json: &str,
    workload: Option<Arc<Workload>>,
) -> Event {
    let any = Registry::global().encode_json(type_name, json).unwrap();
    Event::new(
        i as u64 + 1,
        EventId::generate(),
        Source::Upstream("containerd".into()),
        Envelope {
            timestamp: Some(prost_types::Timestamp {
                seconds: T0 + i * 60,
                nanos: 0,
            }),
            namespace: "k8s.io".into(),
            topic: topic.into(),
            event: Some(any),
        },
    )
    .with_workload(workload)
}

/// shop/web-7: the sandbox, nginx exiting 1, restarted and OOM-killed, restarted and
/// still running; the gateway lost its upstream from minute 4 to 6 and the OOM kill
/// was reconstructed afterwards.
fn life() -> Vec<Event> {
    let nginx = || pod(Some("nginx"));
    let start = |i, id: &str| {
        let json = format!(r#"{{"container_id":"{id}","pid":7}}"#);
        event(
            i,
            "/tasks/start",
            "containerd.events.TaskStart",
            &json,
            if id == "sb1" { pod(None) } else { nginx() },
        )
    };
    let exit = |i, id: &str, status: u32| {
        let json = format!(r#"{{"container_id":"{id}","id":"{id}","exit_status":{status}}}"#);
        event(
            i,
            "/tasks/exit",
            "containerd.events.TaskExit",
            &json,
            nginx(),
        )
    };
    let create = |i, id: &str| {
        let json = format!(r#"{{"id":"{id}","image":"nginx"}}"#);
        event(
            i,
            "/containers/create",
            "containerd.events.ContainerCreate",
            &json,
            nginx(),
        )
    };
    let reconciled = |e: Event| e.with_origin(Origin::reconciled(Clock::Daemon));
    let oom = event(
        5,
        "/tasks/oom",
        "containerd.events.TaskOOM",
        r#"{"container_id":"n2"}"#,
        nginx(),
    );
    let gap = UpstreamConnected {
        upstream: "containerd".into(),
        address: "/run/containerd/containerd.sock".into(),
        connected_at: Some(prost_types::Timestamp {
            seconds: T0 + 360,
            nanos: 0,
        }),
        gap_started_at: Some(prost_types::Timestamp {
            seconds: T0 + 240,
            nanos: 0,
        }),
        attempts: 2,
        filters: vec![],
    };
    let marker = Event::new(
        20,
        EventId::generate(),
        Source::Internal,
        Envelope {
            timestamp: gap.connected_at,
            namespace: "eventgate".into(),
            topic: "/eventgate/upstream/connected".into(),
            event: Some(prost_types::Any {
                type_url: "eventgate.events.v1.UpstreamConnected".into(),
                value: gap.encode_to_vec(),
            }),
        },
    );
    vec![
        start(0, "sb1"),
        create(1, "n1"),
        start(2, "n1"),
        exit(3, "n1", 1),
        start(4, "n2"),
        reconciled(oom),
        reconciled(exit(5, "n2", 137)),
        marker,
        start(7, "n3"),
    ]
}

fn store(dir: &Path) -> String {
    let db = dir.join("audit.db");
    write_store(&db, &life());
    path_str(&db).to_owned()
}

/// `eventgate timeline --pod web-7 EXTRA... --out <dir>/web-7.svg` on the life
/// store, which must succeed; its output and the file's path.
fn web7_svg(dir: &Path, extra: &[&str]) -> (std::process::Output, PathBuf) {
    let db = store(dir);
    let svg_path = dir.join("web-7.svg");
    let mut args = vec!["timeline", "--db", &db, "--pod", "web-7"];
    args.extend_from_slice(extra);
    args.extend(["--out", path_str(&svg_path)]);
    let out = run(&args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    (out, svg_path)
}

#[test]
fn timeline_writes_a_pods_picture_as_svg_and_as_html() {
    let dir = tempfile::tempdir().unwrap();
    let (out, svg_path) = web7_svg(dir.path(), &[]);
    assert!(
        text(&out.stdout).contains("8 events in 4 lanes"),
        "{}",
        text(&out.stdout)
    );
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    assert!(svg.starts_with(r#"<svg xmlns="http://www.w3.org/2000/svg" class="eg-timeline""#));
    for expected in [
        r#"<g class="group" data-group="shop/web-7">"#,
        r#"<text class="restarts" data-restarts="2" "#,
        ">2 restarts</text>",
        r#"data-container="sandbox" data-container-id="sb1""#,
        r#"class="mark mark-exit exit-nonzero""#,
        r#"class="mark mark-exit exit-oom reconciled""#,
        r#"class="mark mark-start restart" "#,
        &format!(
            r#"<rect class="gap" data-from="{}" data-to="{}""#,
            (T0 + 240) * 1000,
            (T0 + 360) * 1000
        ),
        &format!(
            r#"<rect class="reconciled-span" data-from="{0}" data-to="{0}""#,
            (T0 + 300) * 1000
        ),
    ] {
        assert!(svg.contains(expected), "{expected} in {svg}");
    }
    assert!(!svg.contains("<script") && !svg.contains("style="));

    let html_path = dir.path().join("web-7.html");
    let db = dir.path().join("audit.db");
    let out = run(&[
        "timeline",
        "--db",
        path_str(&db),
        "--pod",
        "web-7",
        "--pod-namespace",
        "shop",
        "--since",
        "2024-05-01T10:00:00Z",
        "--until",
        "2024-05-01T11:00:00Z",
        "--out",
        path_str(&html_path),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let html = std::fs::read_to_string(&html_path).unwrap();
    assert!(
        html.contains("content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\"")
    );
    assert!(!html.to_lowercase().contains("<script"));
    assert!(
        html.contains("restarts 2, OOM events 1, non-zero exits 2 (status 137: 1, OOM kills: 1)"),
        "{html}"
    );
    assert!(html.contains("from 2024-05-01 10:00:00.000 UTC to 2024-05-01 11:00:00.000 UTC"));
    assert!(html.contains(&format!(
        r#"data-from="{}" data-to="{}""#,
        T0 * 1000,
        (T0 + 3600) * 1000
    )));
    assert_eq!(html.matches("<tr class=\"mark-row\">").count(), 8);
    // Nothing left beside the files.
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with("audit.db"))
        .collect();
    names.sort();
    assert_eq!(names, ["web-7.html", "web-7.svg"]);
}

#[test]
fn timeline_refuses_what_it_cannot_draw_with_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    let db = store(dir.path());
    let out_file = dir.path().join("x.svg");
    let out_path = path_str(&out_file);
    let png = dir.path().join("x.png");
    for (args, says) in [
        (
            vec!["--pod", "web-7", "--out", path_str(&png)],
            "must end in .html or .svg",
        ),
        (vec!["--out", out_path, "topic=="], "filter"),
        (
            vec!["--since", "yesterday", "--out", out_path],
            "neither an RFC 3339 time",
        ),
        (
            vec!["--pod", "nope", "--out", out_path],
            "no stored event of a pod named \"nope\"",
        ),
        (
            vec!["--out", out_path, "namespace==nothing-here"],
            "nothing to draw",
        ),
        (
            vec!["--group", "cluster", "--out", out_path],
            "not a grouping",
        ),
        (
            vec![
                "--since",
                "2024-05-01T11:00:00Z",
                "--until",
                "2024-05-01T10:00:00Z",
                "--out",
                out_path,
            ],
            "the time range is empty",
        ),
    ] {
        let mut all = vec!["timeline", "--db", &db];
        all.extend(args.iter().copied());
        let out = run(&all);
        assert!(!out.status.success(), "{all:?} succeeded");
        let stderr = text(&out.stderr);
        assert!(stderr.contains(says), "{all:?}: {stderr}");
        assert!(!out_file.exists() && !png.exists(), "{all:?} wrote a file");
    }
    let missing = dir.path().join("none.db");
    let out = run(&["timeline", "--db", path_str(&missing), "--out", out_path]);
    assert!(!out.status.success());

    let help = run(&["timeline", "--help"]);
    let help = text(&help.stdout);
    assert!(
        help.contains("eventgate timeline --pod web-7 --out web-7.html"),
        "{help}"
    );
}

/// Beyond `--max-rows`, the newest events are drawn, from the oldest of them on, and
/// both the file and the summary line say so.
#[test]
fn timeline_beyond_max_rows_draws_the_newest_events() {
    let dir = tempfile::tempdir().unwrap();
    let (out, svg_path) = web7_svg(dir.path(), &["--max-rows", "3"]);
    // The newest 3 of web-7's 8: n2's OOM and exit at minute 5, n3's start at 7.
    let from = "2024-05-01 10:05:00.000 UTC";
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains(&format!(
            "3 events in 2 lanes (truncated: the newest 3 of 8 events, from {from})"
        )),
        "{stdout}"
    );
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    for expected in [
        format!(
            ">truncated: drew the newest 3 of 8 events, from {from}; narrow the time range or the filter</text>"
        ),
        format!(r#"data-from="{}" "#, (T0 + 300) * 1000),
        r#"class="mark mark-exit exit-oom reconciled""#.to_owned(),
        // nginx started before the oldest event drawn: n3's start is a restart.
        r#"<text class="restarts" data-restarts="1" "#.to_owned(),
    ] {
        assert!(svg.contains(&expected), "{expected} in {svg}");
    }
    assert!(!svg.contains(r#"data-container-id="n1""#), "{svg}");
    assert_eq!(svg.matches(" data-row=").count(), 3, "{svg}");
}
