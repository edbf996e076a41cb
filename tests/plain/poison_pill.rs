//! An event that kills the gateway process must not kill it again at every start.
//!
//! The gateway here is the library with one extra forwarder kind, `crashy`, that
//! aborts the whole process (as a stack overflow or the kernel's OOM killer would)
//! when handed an event with topic `/poison`. It runs in a child process: this test
//! binary started again with `CHILD_CONFIG` set, which makes `gateway_child` serve
//! instead of returning. The test kills nothing itself: the event does.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use eventgate::config::Config;
use eventgate::forward::{
    Batch, BuildError, Context, ForwardError, Forwarder, Kind, Kinds, Options, parse_options,
};
use eventgate::proto::containerd::services::events::v1::PublishRequest;
use futures::future::BoxFuture;
use serde::Deserialize;
use support::{DEADLINE, wait_exit, wait_for};

const CHILD_CONFIG: &str = "EVENTGATE_TEST_CHILD_CONFIG";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CrashyOptions {
    /// Delivered events are appended here, one topic per line.
    out: PathBuf,
}

struct CrashyKind;

struct Crashy {
    out: PathBuf,
}

impl Kind for CrashyKind {
    fn check(&self, options: &Options) -> Result<(), BuildError> {
        parse_options::<CrashyOptions>(options).map(|_| ())
    }

    fn build<'a>(
        &'a self,
        _context: &'a Context,
        options: &'a Options,
    ) -> BoxFuture<'a, Result<Arc<dyn Forwarder>, BuildError>> {
        Box::pin(async move {
            let options: CrashyOptions = parse_options(options)?;
            Ok(Arc::new(Crashy { out: options.out }) as Arc<dyn Forwarder>)
        })
    }
}

impl Forwarder for Crashy {
    fn send<'a>(&'a self, batch: &'a Batch) -> BoxFuture<'a, Result<(), ForwardError>> {
        Box::pin(async move {
            let mut lines = String::new();
            for event in batch.events() {
                if event.topic() == "/poison" {
                    std::process::abort();
                }
                lines.push_str(event.topic());
                lines.push('\n');
            }
            use std::io::Write as _;
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.out)
                .and_then(|mut f| f.write_all(lines.as_bytes()))
                .map_err(|e| ForwardError::retryable(e.to_string()))
        })
    }
}

/// The child's entry point, not a test of its own: without `CHILD_CONFIG` (any
/// normal run) it returns at once.
#[test]
fn gateway_child() {
    let Ok(toml) = std::env::var(CHILD_CONFIG) else {
        return;
    };
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(async move {
        // Before the socket exists: a SIGTERM sent once it accepts must find the handler.
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("a SIGTERM handler");
        let config = Config::parse(&toml, "child").expect("a valid config");
        let kinds = Kinds::default().register("crashy", CrashyKind);
        let gateway = eventgate::gateway::Gateway::start_with(&config, &kinds)
            .await
            .expect("the gateway starts");
        gateway
            .run_until(async move {
                term.recv().await;
            })
            .await
            .expect("a clean stop");
    });
}

struct ChildGateway {
    child: Child,
}

impl Drop for ChildGateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the child gateway; its log goes to `log` (appended), which a failure shows.
fn spawn_child(toml: &str, log: &Path) -> ChildGateway {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .expect("the child's log file");
    // The test's name inside this binary: its module path without the crate's name.
    let module = module_path!().split_once("::").map_or("", |(_, m)| m);
    let child = Command::new(std::env::current_exe().expect("this test binary"))
        .args([
            "--exact",
            &format!("{module}::gateway_child"),
            "--nocapture",
            "--include-ignored",
        ])
        .env(CHILD_CONFIG, toml)
        .stdout(Stdio::null())
        .stderr(file)
        .spawn()
        .expect("start the gateway child");
    ChildGateway { child }
}

/// [`spawn_child`], then waits until it serves.
fn start_child(toml: &str, socket: &Path, log: &Path) -> ChildGateway {
    let mut child = spawn_child(toml, log);
    wait_for("the child gateway's socket", DEADLINE, || {
        if let Ok(Some(status)) = child.child.try_wait() {
            panic!(
                "the child gateway exited during start-up: {status}\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        std::os::unix::net::UnixStream::connect(socket).ok()
    });
    child
}

/// The topics the forwarder received, first deliveries only: delivery is at least
/// once, and an event delivered just before a death is handed over again.
fn delivered(out: &Path) -> Vec<String> {
    let mut topics: Vec<String> = Vec::new();
    for line in std::fs::read_to_string(out).unwrap_or_default().lines() {
        if !topics.iter().any(|t| t == line) {
            topics.push(line.to_owned());
        }
    }
    topics
}

async fn publish(socket: &Path, topic: &str) -> Result<(), tonic::Status> {
    let mut client = eventgate::client::connect(
        &socket.display().to_string(),
        std::time::Duration::from_secs(5),
    )
    .await
    .expect("connect");
    let mut request = tonic::Request::new(PublishRequest {
        topic: topic.into(),
        event: None,
    });
    request
        .metadata_mut()
        .insert("containerd-namespace", "default".parse().expect("ascii"));
    client.publish(request).await.map(|_| ())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_that_kills_the_process_is_set_aside_after_the_second_death() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let socket = data.join("eventgate.sock");
    let out = dir.path().join("delivered.txt");
    let log = dir.path().join("child.log");
    // A batch that lingers long enough to take all three events at once, so the
    // first death leaves all three in flight.
    let toml = format!(
        r#"
        data_dir = "{data}"
        [admin]
        listen = "127.0.0.1:0"
        [[forwarder]]
        name = "crashy"
        kind = "crashy"
        out = "{out}"
        batch = {{ events = 10, linger = "300ms" }}
        "#,
        data = data.display(),
        out = out.display(),
    );

    let mut child = start_child(&toml, &socket, &log);
    for topic in ["/first", "/poison", "/last"] {
        publish(&socket, topic)
            .await
            .expect("accepted before the forwarder sees it");
    }
    let status = wait_exit(&mut child.child, DEADLINE);
    assert!(!status.success(), "the poison killed the process: {status}");
    assert!(delivered(&out).is_empty(), "the batch died whole");

    // Second start: the three are delivered one at a time; the process dies again
    // with the poison alone in flight, after /first went through (perhaps before
    // its socket is even looked at).
    let mut child = spawn_child(&toml, &log);
    let status = wait_exit(&mut child.child, DEADLINE);
    assert!(!status.success(), "the second death: {status}");
    assert_eq!(delivered(&out), ["/first"]);

    // Third start: the poison goes to the dead letters, the rest flows on, and the
    // gateway stays up for new events.
    let mut child = start_child(&toml, &socket, &log);
    wait_for("/last delivered", DEADLINE, || {
        (delivered(&out) == ["/first", "/last"]).then_some(())
    });
    publish(&socket, "/after")
        .await
        .expect("the gateway serves");
    wait_for("/after delivered", DEADLINE, || {
        (delivered(&out) == ["/first", "/last", "/after"]).then_some(())
    });
    assert!(
        child.child.try_wait().expect("status").is_none(),
        "still up"
    );

    // The real CLI shows it, envelope kept, with the reason.
    let list = support::eventgate()
        .args(["dlq", "list", "--format", "json", "--data-dir"])
        .arg(&data)
        .output()
        .expect("eventgate dlq list");
    let text = String::from_utf8_lossy(&list.stdout);
    assert!(
        list.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&list.stderr)
    );
    let entries: Vec<serde_json::Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert_eq!(entries.len(), 1, "{text}");
    assert_eq!(entries[0]["topic"], "/poison", "{text}");
    assert_eq!(entries[0]["dead_letter"]["reason"], "crashed", "{text}");
    assert_eq!(entries[0]["dead_letter"]["forwarder"], "crashy", "{text}");

    // A restart on an unchanged spool is quiet: nothing suspect is left.
    support::signal(&child.child, nix::sys::signal::Signal::SIGTERM);
    let status = wait_exit(&mut child.child, DEADLINE);
    assert!(status.success(), "a clean stop: {status}");
    let mut child = start_child(&toml, &socket, &log);
    support::signal(&child.child, nix::sys::signal::Signal::SIGTERM);
    assert!(wait_exit(&mut child.child, DEADLINE).success());
    let text = std::fs::read_to_string(&out).unwrap_or_default();
    assert!(!text.contains("/poison"), "never handed over: {text}");
    assert_eq!(delivered(&out), ["/first", "/last", "/after"]);
}
