//! Reconcile's window against a real containerd: containers created, run, exited and
//! removed while reconciles list the daemon, and while eventgate restarts and crashes,
//! are each recorded in order and never twice; a crash after a reconcile's marker is
//! durable and before its snapshot is promoted still leaves the snapshot, so the gap
//! after it is reconstructed instead of a new baseline being taken.

use crate::support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use support::audit::{Row, markers, stored};
use support::config::Config;
use support::containerd::{Containerd, IMAGE, ctr_at};
use support::*;

const RECONCILED: &str = "/eventgate/upstream/reconciled";

/// A container's whole life, in the order containerd publishes it.
const LIFE: [&str; 6] = [
    "/containers/create",
    "/tasks/create",
    "/tasks/start",
    "/tasks/exit",
    "/tasks/delete",
    "/containers/delete",
];

fn start(containerd: &Containerd, interval: &str, hold_promotion: bool) -> Gateway {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = Config::new()
        .sqlite("audit", "audit.db", "")
        .upstream(
            "node",
            &containerd.address(),
            &format!("reconcile_interval = \"{interval}\""),
        )
        .write(dir.path());
    if hold_promotion {
        let hold = hold_file(dir.path());
        std::fs::create_dir_all(hold.parent().expect("state dir")).expect("state dir");
        std::fs::write(&hold, b"").expect("hold file");
    }
    Gateway::start_in(dir, &["--config", &path])
}

/// Debug builds stop the snapshot at the crash point between a reconcile's durable
/// marker and its promotion while this file exists.
fn hold_file(dir: &Path) -> PathBuf {
    dir.join("data/state/node.hold-promotion")
}

fn audit_db(gateway: &Gateway) -> PathBuf {
    gateway.dir.path().join("data/audit.db")
}

/// Waits for the `n`th reconciled marker; every row then.
fn wait_reconciled(gateway: &mut Gateway, n: usize) -> Vec<Row> {
    let db = audit_db(gateway);
    let deadline = Instant::now() + DEADLINE;
    loop {
        let rows = stored(&db);
        if markers(&rows, RECONCILED).len() >= n {
            return rows;
        }
        if Instant::now() > deadline {
            panic!(
                "no reconciled marker {n} after {DEADLINE:?}; the gateway logged:\n{}",
                gateway.stderr_text()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn reconciled_count(gateway: &Gateway) -> usize {
    markers(&stored(&audit_db(gateway)), RECONCILED).len()
}

fn about<'a>(rows: &'a [Row], container: &str) -> Vec<&'a Row> {
    rows.iter()
        .filter(|r| r.namespace != "eventgate" && r.container() == Some(container))
        .collect()
}

fn topics(rows: &[&Row]) -> Vec<String> {
    rows.iter().map(|r| r.topic.clone()).collect()
}

/// Containers a test made, removed with their tasks however the test ends, so no
/// shim, process or rootfs mount outlives it (before the daemon is stopped).
struct Cleanup {
    socket: PathBuf,
    ids: Arc<std::sync::Mutex<Vec<String>>>,
}

impl Cleanup {
    fn new(containerd: &Containerd) -> Self {
        Cleanup {
            socket: containerd.socket.clone(),
            ids: Arc::default(),
        }
    }

    fn add(&self, id: &str) {
        self.ids.lock().expect("ids").push(id.to_owned());
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let ids = self.ids.lock().map(|ids| ids.clone()).unwrap_or_default();
        for id in ids {
            for args in [
                ["task", "rm", "-f", id.as_str()],
                ["container", "rm", id.as_str(), ""],
            ] {
                let args: Vec<&str> = args.into_iter().filter(|a| !a.is_empty()).collect();
                let _ = std::process::Command::new("ctr")
                    .arg("--address")
                    .arg(&self.socket)
                    .args(["--namespace", "default"])
                    .args(&args)
                    .output();
            }
        }
    }
}

/// Waits until `ctr task ls` shows `id` STOPPED.
fn wait_stopped(socket: &Path, id: &str) {
    wait_for(&format!("task {id} to stop"), DEADLINE, || {
        ctr_at(socket, "default", &["task", "ls"])
            .lines()
            .any(|line| line.starts_with(id) && line.contains("STOPPED"))
            .then_some(())
    });
}

/// One container's life as `ctr` lived it.
#[derive(Debug, Clone)]
struct Lived {
    id: String,
    exit: u32,
    began: Instant,
    ended: Instant,
}

/// Runs whole container lives (create, start, exit with a known status, task and
/// container removed) back to back until `stop`.
fn churn(socket: PathBuf, worker: usize, stop: Arc<AtomicBool>, cleanup: &Cleanup) -> Vec<Lived> {
    let fifos = tempfile::tempdir().expect("fifo dir");
    let mut lived = Vec::new();
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        let id = format!("eg-rw-{}-{worker}-{n}", std::process::id());
        let exit = (n % 7 + 1) as u32;
        n += 1;
        cleanup.add(&id);
        let began = Instant::now();
        let script = format!("exit {exit}");
        ctr_at(
            &socket,
            "default",
            &[
                "run",
                "-d",
                "--fifo-dir",
                path_str(fifos.path()),
                IMAGE,
                &id,
                "/bin/busybox",
                "sh",
                "-c",
                &script,
            ],
        );
        wait_stopped(&socket, &id);
        ctr_at(&socket, "default", &["task", "rm", &id]);
        ctr_at(&socket, "default", &["container", "rm", &id]);
        lived.push(Lived {
            id,
            exit,
            began,
            ended: Instant::now(),
        });
    }
    lived
}

/// What the record says about one container, checked against the product's
/// promises: each event at most once; the live ones in containerd's order, and the
/// reconstructed ones too (a reconcile tells what a gap hid after what the stream
/// said since, so the two may interleave); a recorded container or task recorded
/// gone too; a recorded exit with its real status (255 only for an exit a reconcile
/// could not know). Returns whether its whole life is there.
fn check_consistent(rows: &[Row], lived: &Lived, unknown_exits: &[String]) -> bool {
    let events = about(rows, &lived.id);
    let seen = topics(&events);
    let mut last = std::collections::HashMap::new();
    for (row, topic) in events.iter().zip(&seen) {
        let at = LIFE
            .iter()
            .position(|t| t == topic)
            .unwrap_or_else(|| panic!("{}: unexpected {topic}: {events:?}", lived.id));
        // Forwarders hand on only what the spool holds, so a crash cannot leave a
        // live event in the store that the next reconcile tells again.
        let copies = events.iter().filter(|r| &r.topic == topic).count();
        assert!(
            copies == 1,
            "{}: doubled: {seen:?}\n{}",
            lived.id,
            between(rows, &events)
        );
        let last = last.entry(row.origin.as_str()).or_insert(None);
        assert!(
            last.is_none_or(|last| at > last),
            "{}: out of order: {seen:?}\n{}",
            lived.id,
            between(rows, &events)
        );
        *last = Some(at);
        if topic == "/tasks/exit" {
            let status = row.event["exit_status"].as_u64().unwrap_or_default();
            let unknown = row.origin == "reconciled"
                && status == 255
                && unknown_exits.contains(&format!("default/{}", lived.id));
            assert!(
                status == u64::from(lived.exit) || unknown,
                "{}: exit {status}, ran exit {}: {row:?}",
                lived.id,
                lived.exit
            );
        }
    }
    let has = |t: &str| seen.iter().any(|s| s == t);
    if has("/containers/create") {
        assert!(
            has("/containers/delete"),
            "{}: {seen:?}\n{}",
            lived.id,
            between(rows, &events)
        );
    }
    if has("/tasks/start") {
        assert!(
            has("/tasks/delete"),
            "{}: {seen:?}\n{}",
            lived.id,
            between(rows, &events)
        );
    }
    LIFE.iter().all(|t| has(t))
}

/// The gateway's own markers among `events`, for a failure's message.
fn between(rows: &[Row], events: &[&Row]) -> String {
    let (Some(first), Some(last)) = (events.first(), events.last()) else {
        return String::new();
    };
    rows.iter()
        .filter(|r| r.row_id > first.row_id - 3 && r.row_id < last.row_id + 3)
        .map(|r| match r.namespace.as_str() {
            "eventgate" => format!("{} {} {}", r.row_id, r.topic, r.event),
            _ => format!(
                "{} {} {} {}",
                r.row_id,
                r.topic,
                r.container().unwrap_or_default(),
                r.origin
            ),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn unknown_exits(rows: &[Row]) -> Vec<String> {
    markers(rows, RECONCILED)
        .iter()
        .flat_map(|m| {
            m.event["unknown_exits"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect()
}

#[test]
fn containers_changed_while_reconciles_run_are_recorded_once_each_in_order() {
    let containerd = Containerd::start();
    containerd.import_busybox();
    let cleanup = Cleanup::new(&containerd);
    // Reconciles back to back: the lists are being read whenever containers change.
    let mut gateway = start(&containerd, "10ms", false);
    wait_reconciled(&mut gateway, 1);
    let stop = Arc::new(AtomicBool::new(false));
    let (lived, up) = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..2)
            .map(|worker| {
                let (socket, stop, cleanup) =
                    (containerd.socket.clone(), Arc::clone(&stop), &cleanup);
                scope.spawn(move || churn(socket, worker, stop, cleanup))
            })
            .collect();
        // Times the gateway surely watched: from a reconcile after its start to two
        // reconciles (each a second of settling at least) before it was stopped, so
        // that the events of a life ended by then have arrived.
        let mut up: Vec<(Instant, Instant)> = Vec::new();
        let mut since = Instant::now();
        // Eight reconciles while containers come and go...
        let first = reconciled_count(&gateway);
        wait_reconciled(&mut gateway, first + 6);
        // ...then restarts and crashes among them.
        for round in 0..6 {
            let n = reconciled_count(&gateway);
            let until = Instant::now();
            wait_reconciled(&mut gateway, n + 2);
            up.push((since, until));
            if round % 2 == 0 {
                assert!(gateway.restart().success(), "{}", gateway.stderr_text());
            } else {
                gateway.crash_restart();
            }
            let n = reconciled_count(&gateway);
            wait_reconciled(&mut gateway, n + 1);
            since = Instant::now();
        }
        let n = reconciled_count(&gateway);
        let until = Instant::now();
        wait_reconciled(&mut gateway, n + 2);
        up.push((since, until));
        stop.store(true, Ordering::Relaxed);
        let lived: Vec<Lived> = workers
            .into_iter()
            .flat_map(|w| w.join().expect("churn worker"))
            .collect();
        (lived, up)
    });
    // Everything ctr did is over: two more reconciles see the node still.
    let n = reconciled_count(&gateway);
    let rows = wait_reconciled(&mut gateway, n + 2);
    let unknown = unknown_exits(&rows);
    let mut whole = 0;
    let mut watched = 0;
    for life in &lived {
        let complete = check_consistent(&rows, life, &unknown);
        whole += usize::from(complete);
        // A life the gateway watched from start to end is all there, live.
        if up
            .iter()
            .any(|(from, to)| *from <= life.began && life.ended <= *to)
        {
            watched += 1;
            let events = about(&rows, &life.id);
            assert!(complete, "{}: {:?}", life.id, topics(&events));
            assert!(
                events.iter().all(|r| r.origin == "live"),
                "{}: {events:?}",
                life.id
            );
        }
    }
    let reconstructed = rows
        .iter()
        .filter(|r| r.namespace != "eventgate" && r.origin == "reconciled")
        .count();
    eprintln!(
        "{} lives, {whole} recorded whole, {watched} watched throughout, {reconstructed} \
         events reconstructed, {} reconciles",
        lived.len(),
        markers(&rows, RECONCILED).len()
    );
    assert!(
        watched >= 4,
        "the churn overlapped few reconciles: {watched}"
    );

    // The snapshot is exactly as far as the record: one more start finds nothing new.
    assert!(gateway.restart().success(), "{}", gateway.stderr_text());
    let n = markers(&rows, RECONCILED).len();
    let after = wait_reconciled(&mut gateway, n + 1);
    let last = markers(&after, RECONCILED)[n].clone();
    assert_eq!(last.event["recorded"], serde_json::json!({}), "{last:?}");
    assert_eq!(last.event["baseline"], false, "{last:?}");
    assert!(gateway.terminate().success(), "{}", gateway.stderr_text());
}

#[test]
fn a_crash_between_the_marker_and_the_promotion_still_reconstructs_the_gap() {
    let containerd = Containerd::start();
    containerd.import_busybox();
    let cleanup = Cleanup::new(&containerd);
    let fifos = tempfile::tempdir().expect("fifo dir");
    let fifos = path_str(fifos.path()).to_owned();
    let pid = std::process::id();
    let (victim, coder, created) = (
        format!("eg-rw-{pid}-victim"),
        format!("eg-rw-{pid}-coder"),
        format!("eg-rw-{pid}-created"),
    );
    for id in [&victim, &coder, &created] {
        cleanup.add(id);
    }
    let run = |id: &str, args: &[&str]| {
        let mut command = vec!["run", "-d", "--fifo-dir", &fifos, IMAGE, id];
        command.extend_from_slice(args);
        containerd.ctr_in("default", &command);
    };
    run(&victim, &["/bin/busybox", "sleep", "1000"]);

    // The first reconcile's marker is durable, and the process stops short of its
    // promotion: only the pending snapshot is on disk.
    let mut gateway = start(&containerd, "0s", true);
    let rows = wait_reconciled(&mut gateway, 1);
    assert_eq!(markers(&rows, RECONCILED)[0].event["baseline"], true);
    let state = gateway.dir.path().join("data/state");
    wait_for("the promotion to be held", DEADLINE, || {
        gateway
            .stderr_text()
            .contains("promotion held")
            .then_some(())
    });
    assert!(state.join("node.pending.json").exists());
    assert!(!state.join("node.json").exists(), "nothing promoted");
    gateway.kill9();

    containerd.ctr_in("default", &["task", "kill", "-s", "SIGKILL", &victim]);
    wait_stopped(&containerd.socket, &victim);
    run(&coder, &["/bin/busybox", "sh", "-c", "exit 3"]);
    wait_stopped(&containerd.socket, &coder);
    containerd.ctr_in(
        "default",
        &[
            "container",
            "create",
            IMAGE,
            &created,
            "/bin/busybox",
            "true",
        ],
    );

    std::fs::remove_file(hold_file(gateway.dir.path())).expect("remove the hold");
    gateway.respawn();
    let rows = wait_reconciled(&mut gateway, 2);
    let second = markers(&rows, RECONCILED)[1].clone();
    assert_eq!(
        second.event["baseline"], false,
        "the gap is reconstructed: {second:?}"
    );
    assert!(!state.join("node.pending.json").exists());
    let victim_events = about(&rows, &victim);
    assert_eq!(topics(&victim_events), ["/tasks/exit"], "{victim_events:?}");
    assert_eq!(victim_events[0].event["exit_status"], 137);
    let coder_events = about(&rows, &coder);
    assert_eq!(
        topics(&coder_events),
        ["/containers/create", "/tasks/start", "/tasks/exit"],
        "{coder_events:?}"
    );
    assert_eq!(coder_events[2].event["exit_status"], 3);
    assert_eq!(topics(&about(&rows, &created)), ["/containers/create"]);
    assert!(
        rows.iter()
            .filter(|r| r.namespace != "eventgate")
            .all(|r| r.origin == "reconciled"),
        "{rows:?}"
    );
    assert!(gateway.terminate().success(), "{}", gateway.stderr_text());
}
