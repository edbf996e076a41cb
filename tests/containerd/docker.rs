//! A Docker host: Debian's dockerd (20.10) on the test's own containerd, and eventgate
//! subscribed to that containerd with `docker` naming dockerd's socket.
//!
//! dockerd names its containerd containers by id alone (no image, one label of its
//! own), and deletes each one at its exit, keeping its own record until `docker rm`.
//! So every event of a Docker container must carry Docker's terms (name, image,
//! compose labels), captured live, and what ran while eventgate was down can only be
//! told from dockerd's record.

use crate::support;

use std::path::{Path, PathBuf};
use std::time::Instant;

use rusqlite::{Connection, OpenFlags};
use serde_json::Value;
use support::config::Config;
use support::containerd::{Containerd, IMAGE};
use support::docker::Dockerd;
use support::*;

const RECONCILED: &str = "/eventgate/upstream/reconciled";
const PROJECT: &str = "com.docker.compose.project";
const SERVICE: &str = "com.docker.compose.service";

/// Every run of a Docker container, as dockerd 20.10 makes containerd publish it.
const LIVE_RUN: [&str; 6] = [
    "/containers/create",
    "/tasks/create",
    "/tasks/start",
    "/tasks/exit",
    "/tasks/delete",
    "/containers/delete",
];

fn start(containerd: &Containerd, dockerd: &Dockerd) -> Gateway {
    start_on(&containerd.address(), dockerd, "0s")
}

/// A gateway subscribed to the containerd at `address`, asking `dockerd`, reconciling
/// every `interval` ("0s": only after a gap).
fn start_on(address: &str, dockerd: &Dockerd, interval: &str) -> Gateway {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = Config::new()
        .sqlite("audit", "audit.db", "")
        .file("log", "events.jsonl", "")
        .upstream(
            "node",
            address,
            &format!(
                "docker = \"{}\"\nreconcile_interval = \"{interval}\"",
                dockerd.address()
            ),
        )
        .write(dir.path());
    Gateway::start_in(dir, &["--config", &path])
}

/// A private containerd with dockerd on it, the test image loaded.
fn docker_host() -> (Containerd, Dockerd) {
    let containerd = Containerd::start();
    let dockerd = Dockerd::start(&containerd);
    dockerd.load_busybox();
    (containerd, dockerd)
}

/// A gateway as [`start`] makes it, once its first (baseline) reconcile is recorded.
fn start_reconciled(containerd: &Containerd, dockerd: &Dockerd) -> Gateway {
    let mut gateway = start(containerd, dockerd);
    wait_reconciled(&mut gateway, 1);
    gateway
}

fn audit_db(gateway: &Gateway) -> PathBuf {
    gateway.dir.path().join("data/audit.db")
}

/// One stored event with the columns this test reads.
#[derive(Debug, Clone)]
struct Stored {
    row_id: i64,
    namespace: String,
    topic: String,
    event: Value,
    timestamp: String,
    origin: String,
    origin_clock: Option<String>,
    reconciled_from: Option<String>,
    reason: Option<String>,
    container_name: Option<String>,
    image: Option<String>,
    labels: Value,
}

impl Stored {
    fn container(&self) -> Option<&str> {
        ["container_id", "id"]
            .iter()
            .find_map(|f| self.event.get(*f).and_then(Value::as_str))
            .filter(|id| !id.is_empty())
    }
}

fn rows(db: &Path) -> Vec<Stored> {
    let Ok(conn) = Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY) else {
        return Vec::new();
    };
    let Ok(mut statement) = conn.prepare(
        "SELECT row_id, namespace, topic, event, timestamp, origin, origin_clock, \
         reconciled_from, reason, container_name, image, labels FROM events ORDER BY row_id",
    ) else {
        return Vec::new();
    };
    let json = |text: Option<String>| {
        text.map(|t| serde_json::from_str(&t).expect("JSON"))
            .unwrap_or(Value::Null)
    };
    statement
        .query_map([], |r| {
            Ok(Stored {
                row_id: r.get(0)?,
                namespace: r.get(1)?,
                topic: r.get(2)?,
                event: json(r.get(3)?),
                timestamp: r.get(4)?,
                origin: r.get(5)?,
                origin_clock: r.get(6)?,
                reconciled_from: r.get(7)?,
                reason: r.get(8)?,
                container_name: r.get(9)?,
                image: r.get(10)?,
                labels: json(r.get(11)?),
            })
        })
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows")
}

fn about<'a>(rows: &'a [Stored], id: &str) -> Vec<&'a Stored> {
    rows.iter()
        .filter(|r| r.namespace == "moby" && r.container() == Some(id))
        .collect()
}

fn topics(rows: &[&Stored]) -> Vec<String> {
    rows.iter().map(|r| r.topic.clone()).collect()
}

fn logged_about<'a>(lines: &'a [Value], id: &str) -> Vec<&'a Value> {
    lines
        .iter()
        .filter(|l| {
            l["namespace"] == "moby"
                && ["container_id", "id"]
                    .iter()
                    .any(|f| l["event"][*f].as_str() == Some(id))
        })
        .collect()
}

/// Waits until the JSON lines hold `n` lines about container `id`; every line then.
fn wait_logged(gateway: &Gateway, id: &str, n: usize) -> Vec<Value> {
    wait_for(&format!("{n} JSON lines about {id}"), DEADLINE, || {
        let lines = gateway.logged();
        (logged_about(&lines, id).len() >= n).then_some(lines)
    })
}

/// Waits for the `n`th reconciled marker; every row then.
fn wait_reconciled(gateway: &mut Gateway, n: usize) -> Vec<Stored> {
    let db = audit_db(gateway);
    let end = Instant::now() + DEADLINE;
    loop {
        let rows = rows(&db);
        if rows.iter().filter(|r| r.topic == RECONCILED).count() >= n {
            return rows;
        }
        assert!(
            Instant::now() < end,
            "no reconciled marker {n} within {DEADLINE:?}; the gateway logged:\n{}",
            gateway.stderr_text()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Docker's terms, as `docker inspect` shows them, on every stored row and JSON line
/// of a container.
fn assert_docker_terms(rows: &[&Stored], lines: &[&Value], inspect: &Value) {
    let name = inspect["Name"]
        .as_str()
        .expect("Name")
        .trim_start_matches('/');
    let image = inspect["Config"]["Image"].as_str().expect("Config.Image");
    let labels = &inspect["Config"]["Labels"];
    assert_eq!(image, IMAGE);
    assert!(!rows.is_empty() && !lines.is_empty());
    for row in rows {
        assert_eq!(row.container_name.as_deref(), Some(name), "{row:?}");
        assert_eq!(row.image.as_deref(), Some(image), "{row:?}");
        assert_eq!(&row.labels, labels, "{row:?}");
    }
    for line in lines {
        assert_eq!(line["container"]["name"], name, "{line}");
        assert_eq!(line["container"]["image"], image, "{line}");
        assert_eq!(&line["container"]["labels"], labels, "{line}");
    }
}

/// An RFC 3339 time, in nanoseconds since the epoch.
fn nanos(text: &Value) -> i64 {
    let text = text.as_str().unwrap_or_else(|| panic!("a time: {text}"));
    chrono::DateTime::parse_from_rfc3339(text)
        .unwrap_or_else(|e| panic!("{text}: {e}"))
        .timestamp_nanos_opt()
        .expect("in range")
}

/// The reconciled markers' events, in stored order.
fn reconciled_markers(rows: &[Stored]) -> Vec<Value> {
    rows.iter()
        .filter(|r| r.topic == RECONCILED)
        .map(|r| r.event.clone())
        .collect()
}

/// The docker manager's listing in a reconciled marker.
fn docker_listing(marker: &Value) -> Value {
    marker["managers"]
        .as_array()
        .expect("managers in the marker")
        .iter()
        .find(|m| m["name"] == "docker")
        .unwrap_or_else(|| panic!("no docker manager in {marker}"))
        .clone()
}

#[test]
fn a_compose_container_is_recorded_in_dockers_terms_live_and_across_a_gap() {
    let (containerd, mut dockerd) = docker_host();
    let mut gateway = start_reconciled(&containerd, &dockerd);
    let db = audit_db(&gateway);

    // Live: a compose service's container runs and exits 3.
    let began = Instant::now();
    let web = dockerd.run(
        "shop-web-1",
        &[(PROJECT, "shop"), (SERVICE, "web")],
        "sleep 1; exit 3",
    );
    let inspect = dockerd.wait_exited(&web);
    assert_eq!(inspect["State"]["ExitCode"], 3);
    let all = wait_for("the web container's whole run", DEADLINE, || {
        let all = rows(&db);
        (about(&all, &web).len() >= LIVE_RUN.len()).then_some(all)
    });
    println!(
        "live: a container's run recorded {:?} after docker run",
        began.elapsed()
    );
    let run = about(&all, &web);
    assert_eq!(topics(&run), LIVE_RUN, "{run:#?}");
    assert!(run.iter().all(|r| r.origin == "live"), "{run:#?}");
    assert_eq!(run[3].event["exit_status"], 3);
    let lines = wait_for("the JSON lines of the web container", DEADLINE, || {
        let lines = gateway.logged();
        (logged_about(&lines, &web).len() >= LIVE_RUN.len()).then_some(lines)
    });
    assert_docker_terms(&run, &logged_about(&lines, &web), &inspect);
    assert_eq!(run[0].labels[PROJECT], "shop");
    assert_eq!(run[0].labels[SERVICE], "web");

    // The gap: eventgate is killed; meanwhile a container exits 7, one is killed by
    // the OOM killer, and the web container is removed.
    gateway.kill9();
    let gap = dockerd.run(
        "shop-worker-1",
        &[(PROJECT, "shop"), (SERVICE, "worker")],
        "exit 7",
    );
    // dockerd 20.10 marks a run OOMKilled only when containerd's /tasks/oom reaches
    // it before the exit; on a loaded machine the exit can win, and dockerd then says
    // 137 without OOMKilled. Such a run tells nothing about the OOM path, so it is
    // removed (during the gap: no record of it can exist) and the hog run again.
    let (oom, oom_inspect) = (1..=5)
        .find_map(|_| {
            let oom = dockerd.run_with(
                "shop-hog-1",
                &[(PROJECT, "shop"), (SERVICE, "hog")],
                &["--memory", "16m", "--memory-swap", "16m"],
                "x=a; while true; do x=\"$x$x\"; done",
            );
            let inspect = dockerd.wait_exited(&oom);
            if inspect["State"]["OOMKilled"] == true {
                return Some((oom, inspect));
            }
            println!(
                "dockerd did not mark the hog OOMKilled (exit {}); again",
                inspect["State"]["ExitCode"]
            );
            dockerd.rm(&oom);
            None
        })
        .expect("dockerd marked one of 5 hog runs OOMKilled");
    let gap_inspect = dockerd.wait_exited(&gap);
    assert_eq!(gap_inspect["State"]["ExitCode"], 7);
    assert_eq!(oom_inspect["State"]["ExitCode"], 137);
    dockerd.rm(&web);

    let restarted = Instant::now();
    gateway.respawn();
    let all = wait_reconciled(&mut gateway, 2);
    println!(
        "gap: reconciled {:?} after eventgate started again",
        restarted.elapsed()
    );
    let last_before = run.last().expect("web's run").row_id;
    let after: Vec<&Stored> = all
        .iter()
        .filter(|r| r.row_id > last_before && r.namespace != "eventgate")
        .collect();

    let told = about(&all, &gap);
    assert_eq!(
        topics(&told),
        [
            "/containers/create",
            "/tasks/start",
            "/tasks/exit",
            "/tasks/delete",
            "/containers/delete"
        ],
        "{told:#?}"
    );
    for row in &told {
        assert_eq!(row.origin, "reconciled", "{row:?}");
        assert_eq!(row.reconciled_from.as_deref(), Some("docker"), "{row:?}");
    }
    assert_eq!(told[2].event["exit_status"], 7);
    assert_eq!(
        nanos(&told[2].event["exited_at"]),
        nanos(&gap_inspect["State"]["FinishedAt"]),
        "{:?}",
        told[2]
    );
    assert_eq!(told[2].origin_clock.as_deref(), Some("daemon"));
    assert_eq!(
        nanos(&Value::from(told[2].timestamp.clone())),
        nanos(&gap_inspect["State"]["FinishedAt"])
    );
    // The file forwarder may write its lines after the SQLite forwarder's rows.
    let lines = wait_logged(&gateway, &gap, told.len());
    let told_lines = logged_about(&lines, &gap);
    assert_eq!(told_lines.len(), told.len());
    for line in &told_lines {
        assert_eq!(line["origin"], "reconciled", "{line}");
        assert_eq!(line["reconciled_from"], "docker", "{line}");
    }
    assert_docker_terms(&told, &told_lines, &gap_inspect);

    let killed = about(&all, &oom);
    assert_eq!(
        topics(&killed),
        [
            "/containers/create",
            "/tasks/start",
            "/tasks/oom",
            "/tasks/exit",
            "/tasks/delete",
            "/containers/delete"
        ],
        "{killed:#?}"
    );
    assert_eq!(killed[3].event["exit_status"], 137);
    assert_eq!(killed[2].reason.as_deref(), Some("OOMKilled"));
    assert_eq!(killed[3].reason.as_deref(), Some("OOMKilled"));
    let lines = wait_logged(&gateway, &oom, killed.len());
    assert_docker_terms(&killed, &logged_about(&lines, &oom), &oom_inspect);

    // Nothing else: the removed web container's run was recorded live already.
    assert_eq!(after.len(), told.len() + killed.len(), "{after:#?}");
    let marker = &reconciled_markers(&rows(&db))[1];
    let listing = docker_listing(marker);
    assert_eq!(listing["state"], "listed", "{marker}");
    assert_eq!(listing["address"], dockerd.address().as_str());
    assert_eq!(listing["containers"], 2, "{marker}");
    assert_eq!(listing["status_calls"], 2, "{marker}");
    assert_eq!(marker["recorded"]["/tasks/exit"], 2, "{marker}");

    // Ten clean restarts on an unchanged host add nothing but markers.
    let rows_before = rows(&db).len();
    let restarts = Instant::now();
    for n in 0..10 {
        gateway.restart();
        wait_reconciled(&mut gateway, 3 + n);
    }
    println!("ten clean restarts took {:?}", restarts.elapsed());
    let all = rows(&db);
    let added: Vec<&Stored> = all[rows_before..].iter().collect();
    assert!(
        added.iter().all(|r| r.namespace == "eventgate"),
        "{added:#?}"
    );
    for marker in reconciled_markers(&all).iter().skip(2) {
        assert_eq!(marker["recorded"], serde_json::json!({}), "{marker}");
        let listing = docker_listing(marker);
        assert_eq!(listing["state"], "listed", "{marker}");
        assert_eq!(listing["status_calls"], 0, "{marker}");
    }
}

#[test]
fn a_stopped_dockerd_leaves_the_reconcile_to_containerd_and_says_so() {
    let (containerd, mut dockerd) = docker_host();
    let mut gateway = start_reconciled(&containerd, &dockerd);
    let db = audit_db(&gateway);

    // A container runs and exits while eventgate is down, then dockerd stops too.
    gateway.kill9();
    let gap = dockerd.run("gap-1", &[(PROJECT, "shop"), (SERVICE, "once")], "exit 5");
    let gap_inspect = dockerd.wait_exited(&gap);
    dockerd.stop();

    gateway.respawn();
    let all = wait_reconciled(&mut gateway, 2);
    // containerd's lists alone do not have it; nothing is invented.
    assert!(about(&all, &gap).is_empty(), "{all:#?}");
    let marker = &reconciled_markers(&rows(&db))[1];
    let listing = docker_listing(marker);
    assert_eq!(listing["state"], "failed", "{marker}");
    let error = listing["error"].as_str().expect("an error");
    assert!(
        error.contains(&dockerd.address()) && error.contains("does not exist"),
        "{error}"
    );
    let admin = gateway.admin_addr();
    let (code, body) = http_get(admin, "/readyz?verbose");
    assert_eq!(code, 200, "{body}");
    assert!(
        body.lines().any(|l| l.contains(&format!(
            "docker ({}): failed: dockerd's socket",
            dockerd.address()
        ))),
        "{body}"
    );

    // dockerd is back: the reconcile that follows soon (a failed manager is asked
    // again after 1 s, backing off) tells the run.
    let back = Instant::now();
    dockerd.restart();
    let all = wait_for("the gap container's run from dockerd", DEADLINE, || {
        let all = rows(&db);
        (about(&all, &gap).len() >= 5).then_some(all)
    });
    println!("dockerd back: its run recorded {:?} later", back.elapsed());
    let told = about(&all, &gap);
    assert_eq!(
        topics(&told),
        [
            "/containers/create",
            "/tasks/start",
            "/tasks/exit",
            "/tasks/delete",
            "/containers/delete"
        ],
        "{told:#?}"
    );
    assert_eq!(told[2].event["exit_status"], 5);
    assert!(
        told.iter()
            .all(|r| r.reconciled_from.as_deref() == Some("docker"))
    );
    let lines = wait_logged(&gateway, &gap, told.len());
    assert_docker_terms(&told, &logged_about(&lines, &gap), &gap_inspect);
    let body = wait_for("readiness to show dockerd listed", DEADLINE, || {
        let (_, body) = http_get(admin, "/readyz?verbose");
        body.contains(&format!("docker ({}): listed", dockerd.address()))
            .then_some(body)
    });
    assert!(!body.contains("failed"), "{body}");
}

/// A script whose runs exit 10, 11, 12, ... in turn (a counter in `/d`); the first
/// waits for `/d/go`, so that its start is recorded before the gap begins.
const COUNTING: &str = "n=$(cat /d/n 2>/dev/null || echo 0); echo $((n + 1)) > /d/n; \
     if [ $n = 0 ]; then while [ ! -e /d/go ]; do sleep 0.05; done; fi; exit $((10 + n))";

/// Starts the counting container under `--restart on-failure:2` (three runs at
/// most, each failing), its counter in `dir`.
fn counting(dockerd: &mut Dockerd, name: &str, dir: &Path) -> String {
    let volume = format!("{}:/d", dir.display());
    dockerd.run_with(
        name,
        &[(PROJECT, "shop"), (SERVICE, "flaky")],
        &["--restart", "on-failure:2", "-v", &volume],
        COUNTING,
    )
}

/// Waits until the counting container has made its three runs and stopped.
fn wait_three_runs(dockerd: &Dockerd, id: &str) -> Value {
    wait_for("the third run to end", DEADLINE, || {
        let inspect = dockerd.inspect(id);
        (inspect["State"]["Status"] == "exited" && inspect["RestartCount"] == 2).then_some(inspect)
    })
}

/// The runs told about `id`: each run's five events, in order, with its exit.
fn runs_of(told: &[&Stored]) -> Vec<(Vec<String>, Value)> {
    told.chunks(5)
        .map(|run| {
            let exit = run
                .iter()
                .find(|r| r.topic == "/tasks/exit")
                .map(|r| r.event["exit_status"].clone())
                .unwrap_or(Value::Null);
            (topics(run), exit)
        })
        .collect()
}

/// `count` image events (tags), straight on dockerd's socket: enough of them push
/// everything older out of its event log (it keeps 256).
fn flood_event_log(dockerd: &Dockerd, count: usize) {
    use std::io::{Read as _, Write as _};
    let socket = dockerd.address();
    let socket = socket.strip_prefix("unix://").unwrap_or(&socket).to_owned();
    for n in 0..count {
        let mut stream = std::os::unix::net::UnixStream::connect(&socket).expect("dockerd");
        let request = format!(
            "POST /images/{IMAGE}/tag?repo=eventgate.test/flood&tag=t{n} HTTP/1.0\r\nHost: docker\r\n\r\n"
        );
        stream.write_all(request.as_bytes()).expect("write");
        let mut answer = String::new();
        stream.read_to_string(&mut answer).expect("read");
        assert!(
            answer.starts_with("HTTP/1.0 201") || answer.starts_with("HTTP/1.1 201"),
            "{answer}"
        );
    }
}

#[test]
fn a_container_restarted_by_its_policy_in_a_gap_is_recorded_with_every_run() {
    let (containerd, mut dockerd) = docker_host();
    let mut gateway = start_reconciled(&containerd, &dockerd);
    let db = audit_db(&gateway);

    // Its first run starts while eventgate records; the gap begins while it runs.
    let counter = tempfile::tempdir().expect("tempdir");
    let flaky = counting(&mut dockerd, "shop-flaky-1", counter.path());
    let live = wait_for("the first run's start", DEADLINE, || {
        let all = rows(&db);
        about(&all, &flaky)
            .iter()
            .any(|r| r.topic == "/tasks/start")
            .then(|| about(&all, &flaky).len())
    });
    gateway.kill9();
    std::fs::write(counter.path().join("go"), b"").expect("go");
    let inspect = wait_three_runs(&dockerd, &flaky);
    assert_eq!(inspect["State"]["ExitCode"], 12);

    gateway.respawn();
    let all = wait_reconciled(&mut gateway, 2);
    let told: Vec<&Stored> = about(&all, &flaky).into_iter().skip(live).collect();
    // The run recorded under way ends with its own exit (10), then one whole run
    // (11), then the last (12): each as containerd published it under dockerd.
    let (ended, rest) = told.split_at(3.min(told.len()));
    assert_eq!(
        topics(ended),
        ["/tasks/exit", "/tasks/delete", "/containers/delete"],
        "{told:#?}"
    );
    assert_eq!(ended[0].event["exit_status"], 10);
    let whole = [
        "/containers/create",
        "/tasks/start",
        "/tasks/exit",
        "/tasks/delete",
        "/containers/delete",
    ]
    .map(String::from)
    .to_vec();
    assert_eq!(
        runs_of(rest),
        [(whole.clone(), Value::from(11)), (whole, Value::from(12))],
        "{told:#?}"
    );
    for row in &told {
        assert_eq!(row.origin, "reconciled", "{row:?}");
        assert_eq!(row.reconciled_from.as_deref(), Some("docker"), "{row:?}");
        assert_eq!(row.origin_clock.as_deref(), Some("daemon"), "{row:?}");
        assert_eq!(
            row.container_name.as_deref(),
            Some("shop-flaky-1"),
            "{row:?}"
        );
    }
    // In the order they happened; the last exit at dockerd's FinishedAt.
    let times: Vec<i64> = told
        .iter()
        .map(|r| nanos(&Value::from(r.timestamp.clone())))
        .collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{told:#?}");
    assert_eq!(
        *times.last().expect("a time"),
        nanos(&inspect["State"]["FinishedAt"])
    );
    let marker = &reconciled_markers(&all)[1];
    let listing = docker_listing(marker);
    assert_eq!(listing["runs_logged"], 1, "{marker}");
    assert!(
        listing.get("runs_counted").is_none_or(|n| n == 0),
        "{marker}"
    );
    assert!(listing["log_events"].as_u64().unwrap_or(0) > 0, "{marker}");
    assert_eq!(marker["recorded"]["/tasks/exit"], 3, "{marker}");

    // A clean restart tells nothing again.
    let rows_before = rows(&db).len();
    gateway.restart();
    let all = wait_reconciled(&mut gateway, 3);
    let added: Vec<&Stored> = all[rows_before..].iter().collect();
    assert!(
        added.iter().all(|r| r.namespace == "eventgate"),
        "{added:#?}"
    );
}

#[test]
fn runs_pushed_out_of_dockerd_s_log_are_counted_from_its_restart_count() {
    let (containerd, mut dockerd) = docker_host();
    let mut gateway = start_reconciled(&containerd, &dockerd);

    // The whole container lives in the gap, and then 300 other events push its
    // runs out of dockerd's log.
    gateway.kill9();
    let counter = tempfile::tempdir().expect("tempdir");
    std::fs::write(counter.path().join("go"), b"").expect("go");
    let flaky = counting(&mut dockerd, "shop-flaky-2", counter.path());
    let inspect = wait_three_runs(&dockerd, &flaky);
    flood_event_log(&dockerd, 300);

    gateway.respawn();
    let all = wait_reconciled(&mut gateway, 2);
    let told = about(&all, &flaky);
    let runs = runs_of(&told);
    // RestartCount proves two runs before the last: told with unknown exits (255)
    // at the container's creation, on the reconcile's clock; the last exactly.
    assert_eq!(
        runs.iter()
            .map(|(_, exit)| exit.clone())
            .collect::<Vec<_>>(),
        [255, 255, 12].map(Value::from),
        "{told:#?}"
    );
    let created = nanos(&inspect["Created"]);
    for row in &told[..10] {
        assert_eq!(row.origin_clock.as_deref(), Some("reconcile"), "{row:?}");
        assert_eq!(
            nanos(&Value::from(row.timestamp.clone())),
            created,
            "{row:?}"
        );
    }
    for row in &told[10..] {
        assert_eq!(row.origin_clock.as_deref(), Some("daemon"), "{row:?}");
    }
    let marker = &reconciled_markers(&all)[1];
    let listing = docker_listing(marker);
    assert_eq!(listing["runs_counted"], 2, "{marker}");
    let oldest = nanos(&listing["log_oldest"]);
    assert!(oldest > created, "{marker}");
    let unknown: Vec<&Value> = marker["unknown_exits"]
        .as_array()
        .expect("unknown exits")
        .iter()
        .filter(|e| e.as_str() == Some(&format!("moby/{flaky}")))
        .collect();
    assert_eq!(unknown.len(), 2, "{marker}");
}

#[test]
fn a_live_event_that_comes_after_the_reconcile_told_its_change_is_recorded_once() {
    let (containerd, mut dockerd) = docker_host();
    // The subscription goes through a link that can be made slow; a reconcile's
    // lists go at full speed. A reconcile every second.
    let slow = support::slowstream::SlowStream::start(Path::new(&containerd.address()));
    let mut gateway = start_on(&slow.address(), &dockerd, "1s");
    let db = audit_db(&gateway);
    wait_reconciled(&mut gateway, 1);

    // The stream now brings each event 8 s after containerd published it: a
    // reconcile (one starts every 2 s or so: the interval, the lists, the 1 s
    // settle) lists the container's whole run first and tells it from dockerd's
    // record, then the live events arrive.
    slow.set_delay(std::time::Duration::from_secs(8));
    let late = dockerd.run("late-1", &[(PROJECT, "shop"), (SERVICE, "late")], "exit 3");
    dockerd.wait_exited(&late);
    let all = wait_for(
        "the live events after the reconciled ones",
        DEADLINE,
        || {
            let all = rows(&db);
            let told = about(&all, &late);
            let live = told.iter().filter(|r| r.origin != "reconciled").count();
            (live >= LIVE_RUN.len()).then_some(all)
        },
    );
    let told = about(&all, &late);
    let reconciled: Vec<&&Stored> = told.iter().filter(|r| r.origin == "reconciled").collect();
    let live: Vec<&&Stored> = told.iter().filter(|r| r.origin != "reconciled").collect();
    assert_eq!(
        reconciled
            .iter()
            .map(|r| r.topic.as_str())
            .collect::<Vec<_>>(),
        [
            "/containers/create",
            "/tasks/start",
            "/tasks/exit",
            "/tasks/delete",
            "/containers/delete"
        ],
        "{told:#?}"
    );
    assert!(
        reconciled.last().unwrap().row_id < live[0].row_id,
        "the reconcile told the run before the stream brought it: {told:#?}"
    );
    // Every live event that repeats a change told is marked; the task's create,
    // which no record above containerd keeps, is news and stays live.
    let marks: Vec<(&str, &str)> = live
        .iter()
        .map(|r| (r.topic.as_str(), r.origin.as_str()))
        .collect();
    assert_eq!(
        marks,
        [
            ("/containers/create", "repeat"),
            ("/tasks/create", "live"),
            ("/tasks/start", "repeat"),
            ("/tasks/exit", "repeat"),
            ("/tasks/delete", "repeat"),
            ("/containers/delete", "repeat"),
        ],
        "{told:#?}"
    );
    assert_eq!(live[3].event["exit_status"], 3);

    // Counted once: `stats` by topic sees one exit of it; the repeats are there to
    // be queried.
    let db_path = db.to_str().expect("UTF-8");
    let filter = "container.name==late-1".to_owned();
    let stats = eventgate_stdout(&["stats", "--db", db_path, "--by", "topic", &filter]);
    let exits: u64 = stats
        .lines()
        .filter(|l| l.contains("/tasks/exit"))
        .filter_map(|l| l.split_whitespace().last()?.parse::<u64>().ok())
        .sum();
    assert_eq!(exits, 1, "{stats}");
    let repeats = eventgate_stdout(&[
        "query",
        "--db",
        db_path,
        "--format",
        "json",
        &format!("{filter},origin==repeat"),
    ]);
    assert_eq!(repeats.lines().count(), 5, "{repeats}");
    let verify = eventgate()
        .args(["audit", "verify", "--db", db_path])
        .output()
        .expect("verify");
    assert!(
        verify.status.success(),
        "{}{}",
        String::from_utf8_lossy(&verify.stdout),
        String::from_utf8_lossy(&verify.stderr)
    );
}
