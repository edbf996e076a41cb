//! The history every UI test looks at, recorded once per test process from a real
//! containerd through a real gateway into its SQLite store:
//! - pod `shop/web-7`: a sandbox, and its `app` container run four times (exit 2, exit
//!   137, OOM-killed under a 32 MiB limit, exit 0): three restarts. A `cache`
//!   container created before a gap and deleted during it, and a `worker` created
//!   during it: the reconcile after the gap reconstructs both.
//! - a pod whose namespace, name and container name are markup and a `javascript:`
//!   URL, and a published event whose container id is a script element.
//! - 250 published image events in namespace `batch`, for paging.
//!
//! Then the gateway and containerd stop; each test serves a copy of the store.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::support::config::Config;
use crate::support::containerd::{Containerd, IMAGE, Tasks, busybox_image, cri_labels};
use crate::support::{DEADLINE, Gateway, path_str, publish_json, wait_for};

pub const NS: &str = "k8s.io";
pub const POD: &str = "web-7";
pub const POD_NS: &str = "shop";
pub const UID: &str = "uid-web-7";
/// The hostile pod: its namespace, name and container name.
pub const EVIL_NS: &str = "<script>window.__pwned=1</script>";
pub const EVIL_POD: &str = "<img src=x onerror=\"window.__pwned=1\">";
pub const EVIL_CONTAINER: &str = "javascript:window.__pwned=1";
/// The container id of the published hostile event.
pub const EVIL_ID: &str = "<script>window.__pwned=1</script>";
pub const BATCH_NS: &str = "batch";
pub const BATCH: usize = 250;

/// The app container's four runs: id, script, memory limit, exit status, the exit
/// mark's class.
pub const APPS: [(&str, &str, Option<&str>, i64, &str); 4] = [
    ("web-app-1", "exit 2", None, 2, "exit-nonzero"),
    ("web-app-2", "exit 137", None, 137, "exit-137"),
    (
        "web-app-3",
        "x=$(head -c 268435456 /dev/zero | tr '\\0' a); echo ${#x}",
        Some("33554432"),
        137,
        "exit-oom",
    ),
    ("web-app-4", "exit 0", None, 0, "exit-zero"),
];
pub const SANDBOX: &str = "web-sandbox";
/// Created before the gap, deleted during it.
pub const CACHE: &str = "web-cache";
/// Created during the gap, deleted after it.
pub const WORKER: &str = "web-worker";
pub const EVIL: &str = "evil-1";

/// What was recorded: the store, and the moments the tests ask about.
pub struct Scenario {
    /// The gateway's data directory after it stopped (`audit.db` in it).
    pub data: PathBuf,
    /// RFC 3339 bounds around everything recorded.
    pub since: String,
    pub until: String,
    /// Unix milliseconds: the gateway was told to stop, had stopped, then started again.
    pub stopping_ms: u64,
    pub stopped_ms: u64,
    pub restarted_ms: u64,
}

impl Scenario {
    pub fn db(&self) -> PathBuf {
        self.data.join("audit.db")
    }
}

/// The recorded scenario; the first test to ask records it, the others wait. A
/// failed recording fails every test with its message.
pub fn get() -> &'static Scenario {
    static RECORDED: OnceLock<Result<Scenario, String>> = OnceLock::new();
    let recorded = RECORDED.get_or_init(|| {
        std::panic::catch_unwind(record).map_err(|panic| {
            panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "recording panicked".into())
        })
    });
    match recorded {
        Ok(scenario) => scenario,
        Err(message) => panic!("the scenario could not be recorded: {message}"),
    }
}

pub fn millis(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

/// The container an event (a line of the file forwarder) is about.
fn about(line: &Value) -> Option<&str> {
    ["container_id", "sandbox_id", "id"]
        .iter()
        .find_map(|f| line["event"].get(*f).and_then(Value::as_str))
}

/// `ctr run --rm` of a pod container to its end; its exit status.
fn run_to_end(
    containerd: &Containerd,
    labels: &[String],
    id: &str,
    script: &str,
    limit: Option<&str>,
) -> i32 {
    let mut args: Vec<&str> = vec!["--namespace", NS, "run", "--rm"];
    if let Some(limit) = limit {
        args.extend(["--memory-limit", limit]);
    }
    args.extend(labels.iter().map(String::as_str));
    args.extend([IMAGE, id, "/bin/busybox", "sh", "-c", script]);
    let out = containerd.ctr().args(&args).output().expect("ctr run");
    out.status.code().unwrap_or(-1)
}

fn wait_logged(gateway: &Gateway, what: &str, found: impl Fn(&Value) -> bool) {
    wait_for(what, DEADLINE, || {
        gateway.logged().iter().any(&found).then_some(())
    });
}

/// A scenario directory of a test process that is gone.
fn remove_stale(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix("browser-scenario-") else {
            continue;
        };
        if !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

fn record() -> Scenario {
    let root = Path::new(env!("CARGO_TARGET_TMPDIR"));
    remove_stale(root);
    let home = root.join(format!("browser-scenario-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&home);
    std::fs::create_dir_all(&home).expect("the scenario's directory");

    let containerd = Containerd::start();
    containerd.ctr_in(NS, &["image", "import", path_str(busybox_image())]);
    let dir = tempfile::Builder::new()
        .prefix("eg-browser")
        .tempdir_in(&home)
        .expect("tempdir");
    let config = Config::new()
        .file("log", "events.jsonl", "")
        .sqlite("audit", "audit.db", "")
        .upstream("node", &containerd.address(), "")
        .write(dir.path());
    let mut gateway = Gateway::start_in(dir, &["--config", &config]);
    // Only after the first reconcile are the daemon's changes news.
    wait_logged(&gateway, "the first reconcile", |l| {
        l["topic"] == "/eventgate/upstream/reconciled"
    });

    // The range the tests look at: the pod's life and what follows it, with a
    // margin, so a picture of it is not mostly empty.
    let since = SystemTime::now() - Duration::from_millis(500);
    let mut tasks = Tasks::new(&containerd);
    let sandbox = cri_labels(POD_NS, POD, UID, None);
    let sandbox: Vec<&str> = sandbox.iter().map(String::as_str).collect();
    tasks.run(NS, SANDBOX, &sandbox, &["/bin/busybox", "sleep", "300"]);
    let labels = cri_labels(POD_NS, POD, UID, Some("cache"));
    let mut args: Vec<&str> = vec!["container", "create"];
    args.extend(labels.iter().map(String::as_str));
    args.extend([IMAGE, CACHE, "/bin/busybox", "true"]);
    containerd.ctr_in(NS, &args);
    let app = cri_labels(POD_NS, POD, UID, Some("app"));
    for (id, script, limit, status, _) in APPS {
        let exited = run_to_end(&containerd, &app, id, script, limit);
        // ctr gives the task's status; an OOM kill is a SIGKILL (137).
        assert_eq!(i64::from(exited), status, "{id}'s exit");
    }
    wait_logged(&gateway, "the cache's live create", |l| {
        l["topic"] == "/containers/create" && about(l) == Some(CACHE)
    });
    let last_app = APPS[3].0;
    wait_logged(&gateway, "the last app's delete", |l| {
        l["topic"] == "/containers/delete" && about(l) == Some(last_app)
    });

    // The gap: eventgate stops, the pod changes, eventgate starts and reconciles.
    let stopping = SystemTime::now();
    assert!(gateway.terminate().success(), "{}", gateway.stderr_text());
    let stopped = SystemTime::now();
    containerd.ctr_in(NS, &["container", "rm", CACHE]);
    let labels = cri_labels(POD_NS, POD, UID, Some("worker"));
    let mut args: Vec<&str> = vec!["container", "create"];
    args.extend(labels.iter().map(String::as_str));
    args.extend([IMAGE, WORKER, "/bin/busybox", "true"]);
    containerd.ctr_in(NS, &args);
    let restarted = SystemTime::now();
    gateway.respawn();
    for (id, topic) in [
        (CACHE, "/containers/delete"),
        (WORKER, "/containers/create"),
    ] {
        wait_logged(&gateway, &format!("{id}'s reconstructed {topic}"), |l| {
            l["origin"] == "reconciled" && l["topic"] == topic && about(l) == Some(id)
        });
    }
    containerd.ctr_in(NS, &["container", "rm", WORKER]);

    // Names that are markup, in a pod of their own, and a published event's payload.
    let evil = cri_labels(EVIL_NS, EVIL_POD, "uid-evil", Some(EVIL_CONTAINER));
    assert_eq!(run_to_end(&containerd, &evil, EVIL, "exit 3", None), 3);
    let (ok, err) = publish_json(
        &gateway.address(),
        "default",
        "/tasks/oom",
        "containerd.events.TaskOOM",
        &serde_json::json!({ "container_id": EVIL_ID }).to_string(),
    );
    assert!(ok, "{err}");
    publish_batch(&gateway.address());

    // The pod ends: its sandbox is stopped and removed.
    containerd.ctr_in(NS, &["task", "kill", "-s", "KILL", SANDBOX]);
    wait_logged(&gateway, "the sandbox's exit", |l| {
        l["topic"] == "/tasks/exit" && about(l) == Some(SANDBOX)
    });
    containerd.ctr_in(NS, &["task", "rm", SANDBOX]);
    containerd.ctr_in(NS, &["container", "rm", SANDBOX]);
    drop(tasks);
    wait_logged(&gateway, "the sandbox's delete", |l| {
        l["topic"] == "/containers/delete" && about(l) == Some(SANDBOX)
    });
    let db = gateway.dir.path().join("data/audit.db");
    wait_for("the store to hold every event", DEADLINE, || {
        let rows = crate::support::audit::stored(&db);
        let batch = rows.iter().filter(|r| r.namespace == BATCH_NS).count();
        (batch == BATCH
            && rows
                .iter()
                .any(|r| r.topic == "/containers/delete" && r.container() == Some(SANDBOX)))
        .then_some(())
    });
    let until = SystemTime::now() + Duration::from_millis(500);
    assert!(gateway.terminate().success(), "{}", gateway.stderr_text());
    let data = gateway.dir.path().join("data");
    // The recording outlives this function: the directory is kept (and removed by
    // the next test process, see `remove_stale`).
    let kept = home.join("data");
    std::fs::rename(&data, &kept).expect("keep the recorded data");
    drop(gateway);
    drop(containerd);
    Scenario {
        data: kept,
        since: rfc3339(since),
        until: rfc3339(until),
        stopping_ms: millis(stopping),
        stopped_ms: millis(stopped),
        restarted_ms: millis(restarted),
    }
}

/// `BATCH` image events in namespace `batch`, through one client connection.
fn publish_batch(address: &str) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let mut client = eventgate::client::connect(address, Duration::from_secs(5))
            .await
            .expect("connect to the gateway");
        for i in 0..BATCH {
            let any = eventgate::proto::Registry::global()
                .encode_json(
                    "containerd.services.images.v1.ImageCreate",
                    &format!(r#"{{"name":"registry.example/batch:{i}"}}"#),
                )
                .expect("encode");
            let mut request = tonic::Request::new(
                eventgate::proto::containerd::services::events::v1::PublishRequest {
                    topic: "/images/create".into(),
                    event: Some(any),
                },
            );
            request
                .metadata_mut()
                .insert("containerd-namespace", BATCH_NS.parse().expect("header"));
            client.publish(request).await.expect("publish");
        }
    });
}

/// A path as text, for command lines.
pub fn arg(path: &Path) -> &str {
    path_str(path)
}
