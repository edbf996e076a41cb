//! The admin endpoint of a real `eventgate serve`: /metrics in Prometheus's format
//! with the values a dashboard relies on, /healthz, /readyz naming what is wrong
//! (an unreachable upstream, a forwarder whose broker is unreachable) and recovering,
//! the errors a misconfigured listener gets, and `eventgate status`.

use crate::support;

use std::io::Read;
use std::net::{SocketAddr, TcpListener};

use rdkafka::mocking::MockCluster;
use support::config::Config;
use support::prometheus::{self, Scrape};
use support::*;

fn scrape(addr: SocketAddr) -> Scrape {
    let (code, body) = http(addr, "GET", "/metrics");
    assert_eq!(code, 200, "{body}");
    prometheus::parse(&body)
}

fn publish_exits(gw: &Gateway, n: usize) {
    for i in 0..n {
        let (ok, err) = publish_json(
            &gw.address(),
            "default",
            "/tasks/exit",
            "containerd.events.TaskExit",
            &format!(r#"{{"container_id":"c{i}","exit_status":1}}"#),
        );
        assert!(ok, "publish: {err}");
    }
}

#[test]
fn metrics_count_what_was_received_forwarded_and_queued() {
    let mut gw = Gateway::start(&[]);
    let admin = gw.admin_addr();
    publish_exits(&gw, 3);

    let forwarded =
        |s: &Scrape, f: &str| s.get("eventgate_events_forwarded_total", &[("forwarder", f)]);
    let scrape = wait_for("both forwarders to count 3 events", DEADLINE, || {
        let s = scrape(admin);
        let done = forwarded(&s, "log") == Some(3.0)
            && forwarded(&s, "audit") == Some(3.0)
            && s.get(
                "eventgate_forwarder_backlog_events",
                &[("forwarder", "log")],
            ) == Some(0.0)
            && s.get(
                "eventgate_forwarder_backlog_events",
                &[("forwarder", "audit")],
            ) == Some(0.0);
        done.then_some(s)
    });
    let get = |name: &str, labels: &[(&str, &str)]| {
        scrape
            .get(name, labels)
            .unwrap_or_else(|| panic!("no {}", prometheus::key(name, labels)))
    };
    assert_eq!(
        get("eventgate_events_received_total", &[("source", "publish")]),
        3.0
    );
    assert_eq!(
        get("eventgate_events_accepted_total", &[("source", "publish")]),
        3.0
    );
    for forwarder in ["log", "audit"] {
        let f = [("forwarder", forwarder)];
        assert_eq!(get("eventgate_forwarder_queue_events", &f), 0.0);
        assert_eq!(get("eventgate_forwarder_queue_bytes", &f), 0.0);
        assert_eq!(
            get("eventgate_forwarder_oldest_unacked_age_seconds", &f),
            0.0
        );
        assert_eq!(get("eventgate_forwarder_ready", &f), 1.0);
        assert_eq!(get("eventgate_forwarder_retries_total", &f), 0.0);
        // At least one batch, and the histogram's batches hold the 3 events.
        assert!(get("eventgate_forwarder_batch_events_count", &f) >= 1.0);
        assert_eq!(get("eventgate_forwarder_batch_events_sum", &f), 3.0);
        assert!(get("eventgate_forwarder_delivery_seconds_count", &f) >= 1.0);
    }
    assert_eq!(
        scrape.types["eventgate_forwarder_delivery_seconds"],
        "histogram"
    );
    assert_eq!(scrape.types["eventgate_events_forwarded_total"], "counter");
    assert_eq!(scrape.types["eventgate_forwarder_queue_events"], "gauge");
    assert!(get("eventgate_spool_bytes", &[]) > 0.0);
    assert_eq!(get("eventgate_spool_max_bytes", &[]), (1u64 << 30) as f64);
    assert_eq!(get("eventgate_subscribers", &[]), 0.0);
    assert_eq!(get("eventgate_ready", &[]), 1.0);

    // Conventions: one prefix, counters end in _total, every family has HELP, and
    // no label carries a per-event value.
    for (name, kind) in &scrape.types {
        assert!(name.starts_with("eventgate_"), "{name}");
        assert_eq!(
            kind == "counter",
            name.ends_with("_total"),
            "{name} is a {kind}"
        );
        assert!(
            scrape.help.get(name).is_some_and(|h| !h.is_empty()),
            "no HELP for {name}"
        );
    }
    for key in scrape.samples.keys() {
        for banned in ["namespace=", "topic=", "id=", "container"] {
            assert!(!key.contains(banned), "high-cardinality label in {key}");
        }
    }
}

#[test]
fn health_readiness_and_bad_requests() {
    let mut gw = Gateway::start(&[]);
    let admin = gw.admin_addr();
    assert_eq!(http(admin, "GET", "/healthz"), (200, "ok\n".into()));
    assert_eq!(http(admin, "GET", "/readyz"), (200, "ready\n".into()));
    let (code, verbose) = http(admin, "GET", "/readyz?verbose");
    assert_eq!(code, 200);
    assert!(
        verbose.contains("ok: forwarder log: delivering\n"),
        "{verbose}"
    );
    assert!(
        verbose.contains("ok: forwarder audit: delivering\n"),
        "{verbose}"
    );
    assert!(verbose.contains("ok: spool: "), "{verbose}");

    let (code, body) = http(admin, "GET", "/nope");
    assert_eq!(code, 404, "{body}");
    let (code, body) = http(admin, "POST", "/metrics");
    assert_eq!(code, 405, "{body}");
    let (code, _) = http(admin, "DELETE", "/readyz");
    assert_eq!(code, 405);

    // Graceful stop frees the port.
    assert!(gw.terminate().success());
    TcpListener::bind(admin).expect("the admin port is free after stop");
}

#[test]
fn an_upstream_with_nothing_listening_is_named_by_readyz() {
    let closed = ClosedPort::new();
    let port = closed.port();
    let mut gw = Gateway::start(&["--upstream", &format!("node=127.0.0.1:{port}")]);
    let admin = gw.admin_addr();
    let body = wait_for("/readyz to name the upstream's error", DEADLINE, || {
        let (code, body) = http(admin, "GET", "/readyz");
        (code == 503 && body.contains("last error")).then_some(body)
    });
    assert!(body.starts_with("not ready\n"), "{body}");
    assert!(
        body.contains(&format!(
            "upstream node (127.0.0.1:{port}): not connected for"
        )),
        "{body}"
    );
    // Only the upstream is wrong.
    assert_eq!(body.lines().count(), 2, "{body}");
    let s = scrape(admin);
    assert_eq!(
        s.get("eventgate_upstream_connected", &[("upstream", "node")]),
        Some(0.0)
    );
    assert_eq!(s.get("eventgate_ready", &[]), Some(0.0));
}

#[test]
fn a_forwarder_whose_broker_is_unreachable_is_named_until_it_delivers() {
    let cluster = MockCluster::new(1).expect("mock cluster");
    cluster.create_topic("events", 1, 1).expect("topic");
    // The broker's bootstrap address is a closed port until the relay opens it.
    let closed = ClosedPort::new();
    let port = closed.port();
    let dir = tempfile::tempdir().expect("tempdir");
    let config = Config::new()
        .toml(&format!(
            r#"
[[forwarder]]
name = "kafka"
kind = "kafka"
brokers = "127.0.0.1:{port}"
topic = "events"
message_timeout = "1s"
retry = {{ timeout = "3s", initial = "50ms", max = "300ms" }}
properties = {{ "reconnect.backoff.max.ms" = 200, "sasl.password" = "hunter2-secret" }}

[admin]
max_failing = "0s"
"#
        ))
        .write(dir.path());
    let mut gw = Gateway::start_in(dir, &["--config", &config]);
    let admin = gw.admin_addr();
    publish_exits(&gw, 1);

    let body = wait_for("/readyz to name the failing forwarder", DEADLINE, || {
        let (code, body) = http(admin, "GET", "/readyz");
        (code == 503).then_some(body)
    });
    assert!(
        body.contains("forwarder kafka: retrying (attempt "),
        "{body}"
    );
    assert!(body.contains("last error: "), "{body}");
    let (_, status) = http(admin, "GET", "/status");
    let (_, metrics) = http(admin, "GET", "/metrics");
    for text in [&body, &status, &metrics] {
        assert!(!text.contains("hunter2"), "a secret leaked: {text}");
    }
    let s = prometheus::parse(&metrics);
    assert_eq!(
        s.get("eventgate_forwarder_ready", &[("forwarder", "kafka")]),
        Some(0.0)
    );
    assert_eq!(
        s.get(
            "eventgate_forwarder_backlog_events",
            &[("forwarder", "kafka")]
        ),
        Some(1.0)
    );

    relay(closed.open(), cluster.bootstrap_servers());
    wait_for(
        "/readyz to recover once the event is delivered",
        DEADLINE,
        || (http(admin, "GET", "/readyz") == (200, "ready\n".into())).then_some(()),
    );
    let s = scrape(admin);
    assert_eq!(
        s.get(
            "eventgate_events_forwarded_total",
            &[("forwarder", "kafka")]
        ),
        Some(1.0)
    );
    assert!(
        s.get(
            "eventgate_forwarder_retries_total",
            &[("forwarder", "kafka")]
        )
        .unwrap_or(0.0)
            >= 1.0
    );
}

fn serve_fails(args: &[&str]) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = eventgate()
        .arg("serve")
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let status = wait_exit(&mut child, DEADLINE);
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .expect("stderr");
    assert!(!status.success(), "serve started: {stderr}");
    stderr
}

#[test]
fn a_busy_admin_port_stops_the_start_naming_address_and_key() {
    let taken = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    let stderr = serve_fails(&["--admin", &addr]);
    assert!(
        stderr.contains(&format!("cannot listen for the admin endpoint on {addr}")),
        "{stderr}"
    );
    assert!(
        stderr.contains("admin.listen") && stderr.contains("--admin"),
        "{stderr}"
    );
    assert!(stderr.to_lowercase().contains("in use"), "{stderr}");
}

#[test]
fn non_loopback_admin_addresses_are_refused_unless_allowed() {
    let stderr = serve_fails(&["--admin", "0.0.0.0:0"]);
    assert!(
        stderr.contains("`admin.listen` 0.0.0.0:0 is not a loopback address"),
        "{stderr}"
    );
    assert!(stderr.contains("admin.allow_remote = true"), "{stderr}");

    let dir = tempfile::tempdir().expect("tempdir");
    let check = |text: &str| {
        let path = Config::new().toml(text).write(dir.path());
        let out = eventgate()
            .args(["check-config", &path])
            .output()
            .expect("check-config");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, err) = check("[admin]\nlisten = \"0.0.0.0:9464\"\n");
    assert!(!ok && err.contains("admin.listen"), "{err}");
    let (ok, err) = check("[admin]\nlisten = \"0.0.0.0:9464\"\nallow_remote = true\n");
    assert!(ok, "{err}");
    let (ok, err) = check("[admin]\nlisten = \"\"\n");
    assert!(ok, "{err}");
    let (ok, err) = check("[admin]\nmax_spill = \"0s\"\n");
    assert!(!ok && err.contains("admin.max_spill"), "{err}");
    let (ok, err) = check("[spool]\nhigh_water = 1.5\n");
    assert!(!ok && err.contains("spool.high_water"), "{err}");
    let (ok, err) = check("[admin]\nlisten = \"localhost\"\n");
    assert!(
        !ok && err.contains("\"localhost\" is not an address"),
        "{err}"
    );
}

#[test]
fn admin_off_serves_without_it() {
    let mut gw = Gateway::start(&["--admin", ""]);
    publish_exits(&gw, 1);
    assert!(gw.terminate().success());
    let log = gw.stderr_text();
    assert!(log.contains("eventgate is serving"), "{log}");
    assert!(!log.contains("admin endpoint"), "{log}");
}

#[test]
fn status_summarises_a_running_gateway() {
    let closed = ClosedPort::new();
    let port = closed.port();
    let mut gw = Gateway::start(&["--upstream", &format!("node=127.0.0.1:{port}")]);
    let admin = gw.admin_addr().to_string();
    publish_exits(&gw, 2);
    let status = |args: &[&str]| {
        let out = eventgate()
            .args(["status", "--admin", &admin])
            .args(args)
            .output()
            .expect("eventgate status");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, out, err) = wait_for("both forwarders to have delivered", DEADLINE, || {
        let (code, out, err) = status(&["--sample", "0s"]);
        let delivered = |name: &str| {
            out.lines().any(|l| {
                let cells: Vec<&str> = l.split_whitespace().collect();
                cells.first() == Some(&name) && cells.get(6) == Some(&"2")
            })
        };
        (delivered("log") && delivered("audit")).then_some((code, out, err))
    });
    // Not ready because of the upstream: exit code 2, and the reason is printed.
    assert_eq!(code, Some(2), "{out}{err}");
    assert!(out.contains("| NOT READY |"), "{out}");
    assert!(
        out.contains(&format!("node (127.0.0.1:{port})  not connected for")),
        "{out}"
    );
    assert!(out.contains("not ready:\n  upstream node"), "{out}");
    assert!(out.contains("FORWARDER  STATE       EVENTS/S"), "{out}");

    // With a sample, rates are numbers.
    let (_, out, _) = status(&["--sample", "200ms"]);
    assert!(
        out.lines()
            .any(|l| l.starts_with("log ") && l.contains(" 0.0 ")),
        "{out}"
    );

    gw.terminate();
    let (code, _, err) = status(&["--sample", "0s"]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains(&format!("cannot connect to the admin endpoint at {admin}")),
        "{err}"
    );
}
