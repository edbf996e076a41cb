//! Shared test harness: starts the real `eventgate` binary on a temporary socket, runs
//! client processes, and waits on conditions with deadlines (never sleep-and-hope).
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use eventgate::proto::containerd::services::events::v1::events_client::EventsClient;
use tonic::transport::Channel;

pub mod audit;
pub mod certs;
pub mod chromium;
pub mod config;
pub mod containerd;
pub mod debian_root;
pub mod deploy;
pub mod docker;
pub mod filters;
pub mod fronts;
pub mod image;
pub mod kubelet;
pub mod machine;
pub mod messages;
pub mod postgres;
pub mod prometheus;
pub mod pyconsumer;
pub mod slowstream;
pub mod spooled;
pub mod stores;
pub mod stress;
pub mod tansu;
pub mod webdriver;
pub mod witness;

pub const DEADLINE: Duration = Duration::from_secs(20);

pub fn eventgate_bin() -> &'static str {
    env!("CARGO_BIN_EXE_eventgate")
}

pub fn eventgate() -> Command {
    let mut cmd = Command::new(eventgate_bin());
    cmd.env_remove("EVENTGATE_ADDRESS")
        .env_remove("EVENTGATE_CONFIG")
        .env_remove("CONTAINERD_NAMESPACE")
        // Gateways under test run side by side: each takes a free admin port, which
        // `Gateway::admin_addr` reads from its log.
        .env("EVENTGATE_ADMIN", "127.0.0.1:0");
    cmd
}

/// `eventgate ARGS...`'s standard output, once it succeeded.
pub fn eventgate_stdout(args: &[&str]) -> String {
    let out = eventgate().args(args).output().expect("run eventgate");
    assert!(
        out.status.success(),
        "eventgate {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

/// Polls `check` until it returns `Some`, or panics with `what` at the deadline.
pub fn wait_for<T>(what: &str, deadline: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let end = Instant::now() + deadline;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(
            Instant::now() < end,
            "timed out after {deadline:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A running `eventgate serve` in its own temporary data directory.
pub struct Gateway {
    pub child: Child,
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    stderr: Option<Lines>,
    args: Vec<String>,
    /// Log lines already read (looking for the admin address).
    log: String,
    admin: Option<std::net::SocketAddr>,
    tcp: Option<std::net::SocketAddr>,
}

impl Gateway {
    pub fn start(extra: &[&str]) -> Gateway {
        let dir = tempfile::tempdir().expect("tempdir");
        Self::start_in(dir, extra)
    }

    pub fn start_in(dir: tempfile::TempDir, extra: &[&str]) -> Gateway {
        let data = dir.path().join("data");
        let socket = data.join("eventgate.sock");
        let args: Vec<String> = extra.iter().map(|a| a.to_string()).collect();
        let (child, stderr) = Self::spawn(&data, &args);
        let mut gw = Gateway {
            child,
            dir,
            socket,
            stderr: Some(stderr),
            args,
            log: String::new(),
            admin: None,
            tcp: None,
        };
        gw.wait_ready();
        gw
    }

    /// Stops the gateway (SIGTERM) and starts it again on the same data directory
    /// with the same flags.
    pub fn restart(&mut self) -> ExitStatus {
        let status = self.terminate();
        self.respawn();
        status
    }

    /// SIGKILL, then a new process on the same data directory with the same flags:
    /// a crash and the supervisor's restart.
    pub fn crash_restart(&mut self) {
        self.kill9();
        self.respawn();
    }

    /// A new process on the same data directory with the same flags, once the last
    /// one has exited (on its own, or stopped): what a supervisor does.
    pub fn respawn(&mut self) {
        assert!(
            matches!(self.child.try_wait(), Ok(Some(_))),
            "respawn needs the previous gateway to have exited"
        );
        let (child, stderr) = Self::spawn(&self.dir.path().join("data"), &self.args);
        self.child = child;
        self.stderr = Some(stderr);
        self.admin = None;
        self.tcp = None;
        self.wait_ready();
    }

    fn spawn(data: &Path, args: &[String]) -> (Child, Lines) {
        let mut child = eventgate()
            .arg("serve")
            .arg("--data-dir")
            .arg(data)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn eventgate serve");
        let stderr = Lines::new(child.stderr.take().expect("stderr"));
        (child, stderr)
    }

    fn wait_ready(&mut self) {
        let gw = self;
        let socket = gw.socket.clone();
        wait_for("the gateway socket to accept connections", DEADLINE, || {
            if let Ok(Some(status)) = gw.child.try_wait() {
                panic!(
                    "eventgate exited during start-up: {status}\n{}",
                    gw.stderr_text()
                );
            }
            std::os::unix::net::UnixStream::connect(&socket).ok()
        });
    }

    pub fn address(&self) -> String {
        self.socket.display().to_string()
    }

    /// Every line the `file` forwarder at `data/events.jsonl` wrote so far, parsed.
    pub fn logged(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.dir.path().join("data/events.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("JSON lines"))
            .collect()
    }

    pub async fn client(&self) -> EventsClient<Channel> {
        eventgate::client::connect(&self.address(), Duration::from_secs(5))
            .await
            .expect("connect to the gateway")
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(&mut self) -> ExitStatus {
        signal(&self.child, nix::sys::signal::Signal::SIGTERM);
        wait_exit(&mut self.child, DEADLINE)
    }

    pub fn kill9(&mut self) {
        signal(&self.child, nix::sys::signal::Signal::SIGKILL);
        wait_exit(&mut self.child, DEADLINE);
    }

    /// Everything the gateway has logged so far.
    pub fn stderr_text(&mut self) -> String {
        let rest = self.stderr.as_mut().map(|l| l.drain()).unwrap_or_default();
        std::mem::take(&mut self.log) + &rest
    }

    /// The admin endpoint's address, from the gateway's log line
    /// `admin endpoint serving ... addr=HOST:PORT`.
    pub fn admin_addr(&mut self) -> std::net::SocketAddr {
        self.read_log_until("the admin endpoint line", |gw| gw.admin)
    }

    /// The exchange's TCP address (`--listen`, port 0 included), from the gateway's
    /// log line `eventgate is serving ... tcp=Some(HOST:PORT)`.
    pub fn tcp_addr(&mut self) -> std::net::SocketAddr {
        self.read_log_until("the serving line with a TCP address", |gw| gw.tcp)
    }

    /// Reads the log until `found` has an answer, noting the addresses on the way.
    fn read_log_until<T>(&mut self, what: &str, found: impl Fn(&Self) -> Option<T>) -> T {
        let end = Instant::now() + DEADLINE;
        loop {
            if let Some(answer) = found(self) {
                return answer;
            }
            let left = end.saturating_duration_since(Instant::now());
            let line = self
                .stderr
                .as_ref()
                .expect("stderr")
                .next(left)
                .unwrap_or_else(|| panic!("no {what} in the log:\n{}", self.log));
            self.log.push_str(&line);
            self.log.push('\n');
            let field = |prefix: &str| -> Option<std::net::SocketAddr> {
                let value = line
                    .split_whitespace()
                    .find_map(|w| w.strip_prefix(prefix))?;
                if value == "None" {
                    return None;
                }
                let value = value
                    .strip_prefix("Some(")
                    .map_or(value, |v| v.trim_end_matches(')'));
                Some(
                    value
                        .parse()
                        .unwrap_or_else(|_| panic!("no address in {line:?}")),
                )
            };
            if line.contains("admin endpoint serving") {
                self.admin = field("addr=");
            }
            if line.contains("eventgate is serving") {
                self.tcp = field("tcp=");
            }
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn signal(child: &Child, sig: nix::sys::signal::Signal) {
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let _ = nix::sys::signal::kill(pid, sig);
}

pub fn wait_exit(child: &mut Child, deadline: Duration) -> ExitStatus {
    wait_for("the process to exit", deadline, || {
        child.try_wait().ok().flatten()
    })
}

/// Lines from a child's pipe, read on a thread so tests can wait with a deadline.
pub struct Lines {
    rx: mpsc::Receiver<String>,
}

impl Lines {
    pub fn new(pipe: impl Read + Send + 'static) -> Lines {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Lines { rx }
    }

    /// The next line, or `None` if none came before the deadline or the pipe closed.
    pub fn next(&self, deadline: Duration) -> Option<String> {
        self.rx.recv_timeout(deadline).ok()
    }

    /// Lines until one satisfies `done` (included), panicking at the deadline.
    pub fn until(&self, what: &str, done: impl Fn(&str) -> bool) -> Vec<String> {
        let end = Instant::now() + DEADLINE;
        let mut seen = Vec::new();
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(line) => {
                    let last = done(&line);
                    seen.push(line);
                    if last {
                        return seen;
                    }
                }
                Err(_) => panic!("no line with {what} within {DEADLINE:?}; saw: {seen:#?}"),
            }
        }
    }

    pub fn drain(&mut self) -> String {
        let mut out = String::new();
        while let Ok(line) = self.rx.try_recv() {
            out.push_str(&line);
            out.push('\n');
        }
        out
    }
}

/// A long-running client process (e.g. `ctr events`) whose stdout is read by line.
pub struct Watcher {
    pub child: Child,
    pub stdout: Lines,
    pub stderr: Lines,
}

impl Watcher {
    pub fn spawn(mut cmd: Command) -> Watcher {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn watcher");
        let stdout = Lines::new(child.stdout.take().expect("stdout"));
        let stderr = Lines::new(child.stderr.take().expect("stderr"));
        Watcher {
            child,
            stdout,
            stderr,
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `cmd` with `input` on stdin; returns (success, stderr).
pub fn run_with_stdin(cmd: &mut Command, input: &[u8]) -> (bool, String) {
    use std::io::Write;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input)
        .expect("write stdin");
    let out = child.wait_with_output().expect("wait");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs `eventgate publish` and returns (success, stderr).
pub fn publish_json(address: &str, ns: &str, topic: &str, ty: &str, json: &str) -> (bool, String) {
    let out = eventgate()
        .args([
            "publish",
            "--address",
            address,
            "--namespace",
            ns,
            "--topic",
            topic,
        ])
        .args(["--event-type", ty, "--json", json])
        .stdin(Stdio::null())
        .output()
        .expect("run eventgate publish");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Publishes probe events until `watcher` prints one, proving its subscription is live
/// (containerd-style clients give no other sign). Returns the lines seen meanwhile.
pub fn prove_live(address: &str, watcher: &Watcher) -> Vec<String> {
    let end = Instant::now() + DEADLINE;
    loop {
        let (ok, err) = publish_json(
            address,
            "probe",
            "/probe",
            "containerd.events.TaskOOM",
            r#"{"container_id":"probe"}"#,
        );
        assert!(ok, "probe publish failed: {err}");
        if let Some(line) = watcher.stdout.next(Duration::from_millis(200)) {
            if line.contains("/probe") {
                return vec![];
            }
            panic!("unexpected line before the probe: {line}");
        }
        assert!(
            Instant::now() < end,
            "the watcher never printed a probe event"
        );
    }
}

/// Skips (drains) probe lines that were still in flight.
pub fn without_probes(lines: Vec<String>) -> Vec<String> {
    lines
        .into_iter()
        .filter(|l| !l.contains("/probe"))
        .collect()
}

pub fn have(binary: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {binary}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

pub fn path_str(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// An accepted `/tasks/exit` event in namespace `default`, as the pipeline hands it to
/// forwarders: timestamp 2024-05-01T10:00:00.123456789Z plus `seq` seconds.
pub fn task_exit_event(
    seq: u64,
    container: &str,
    status: u32,
) -> std::sync::Arc<eventgate::event::Event> {
    use eventgate::event::{Event, EventId, Source};
    let any = eventgate::proto::Registry::global()
        .encode_json(
            "containerd.events.TaskExit",
            &format!(r#"{{"container_id":"{container}","exit_status":{status}}}"#),
        )
        .expect("encode");
    std::sync::Arc::new(Event::new(
        seq,
        EventId::generate(),
        Source::Publish,
        eventgate::proto::containerd::types::Envelope {
            timestamp: Some(prost_types::Timestamp {
                seconds: 1_714_557_600 + seq as i64,
                nanos: 123_456_789,
            }),
            namespace: "default".into(),
            topic: "/tasks/exit".into(),
            event: Some(any),
        },
    ))
}

/// A `TaskOOM` payload for `container`.
pub fn task_oom(container: &str) -> Option<prost_types::Any> {
    Some(
        eventgate::proto::Registry::global()
            .encode_json(
                "containerd.events.TaskOOM",
                &format!(r#"{{"container_id":"{container}"}}"#),
            )
            .expect("encode"),
    )
}

/// Publishes `/tasks/exit` events for the containers `id(0)`, `id(1)`, ... back to
/// back until `stop`, reconnecting after failures; hands each id whose Publish
/// returned OK to `acked`. A failed call's outcome is unknown (it may be stored),
/// so its event is never published again.
pub async fn publish_until(
    address: &str,
    stop: &std::sync::atomic::AtomicBool,
    mut id: impl FnMut(u64) -> String,
    mut acked: impl FnMut(String),
) {
    let mut client = None;
    let mut n = 0u64;
    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
        let Some(c) = client.as_mut() else {
            client = eventgate::client::connect(address, Duration::from_millis(500))
                .await
                .ok();
            if client.is_none() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            continue;
        };
        let next = id(n);
        n += 1;
        match c.publish(exit_request(&next)).await {
            Ok(_) => acked(next),
            Err(_) => client = None,
        }
    }
}

/// A Publish request for a `/tasks/exit` of `container` in namespace `default`.
pub fn exit_request(
    container: &str,
) -> tonic::Request<eventgate::proto::containerd::services::events::v1::PublishRequest> {
    let any = eventgate::proto::Registry::global()
        .encode_json(
            "containerd.events.TaskExit",
            &format!(r#"{{"container_id":"{container}","exit_status":1}}"#),
        )
        .expect("encode");
    let mut req = tonic::Request::new(
        eventgate::proto::containerd::services::events::v1::PublishRequest {
            topic: "/tasks/exit".into(),
            event: Some(any),
        },
    );
    req.metadata_mut()
        .insert("containerd-namespace", "default".parse().expect("header"));
    req
}

/// A TCP port that was free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

/// A loopback port that refuses connections for as long as this lives, and that no
/// other socket can take in the meantime: it is bound but not listening. A port that
/// was merely free a moment ago can be handed to any outgoing connection as its local
/// port, and then the test cannot open it later.
pub struct ClosedPort(socket2::Socket);

impl ClosedPort {
    pub fn new() -> ClosedPort {
        use socket2::{Domain, Socket, Type};
        let socket = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
        let any = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
        socket.bind(&any.into()).expect("bind a loopback port");
        ClosedPort(socket)
    }

    pub fn port(&self) -> u16 {
        self.0
            .local_addr()
            .ok()
            .and_then(|a| a.as_socket())
            .expect("a bound IPv4 address")
            .port()
    }

    /// Starts accepting connections on the port.
    pub fn open(self) -> std::net::TcpListener {
        self.0.listen(128).expect("listen on the reserved port");
        self.0.into()
    }
}

/// Accepts on `listener` and relays every connection to `target`, on threads.
pub fn relay(listener: std::net::TcpListener, target: String) {
    std::thread::spawn(move || {
        for inbound in listener.incoming() {
            let Ok(inbound) = inbound else { break };
            let Ok(outbound) = std::net::TcpStream::connect(&target) else {
                continue;
            };
            for (mut from, mut to) in [
                (
                    inbound.try_clone().expect("clone"),
                    outbound.try_clone().expect("clone"),
                ),
                (outbound, inbound),
            ] {
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut from, &mut to);
                    let _ = to.shutdown(std::net::Shutdown::Both);
                });
            }
        }
    });
}

/// GET `path` from an HTTP endpoint; returns (status, body).
pub fn http_get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    http(addr, "GET", path)
}

/// One HTTP/1.1 request on a fresh connection; returns (status, body), de-chunked.
pub fn http(addr: std::net::SocketAddr, method: &str, path: &str) -> (u16, String) {
    try_http(addr, method, path).expect("HTTP request to the admin endpoint")
}

/// [`http`] with extra request headers (`("Authorization", "Bearer ...")`).
pub fn http_with(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, String) {
    try_http_with(addr, method, path, headers).expect("HTTP request to the admin endpoint")
}

/// `http`, for an endpoint that may be gone (a gateway on its way out).
pub fn try_http(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
) -> std::io::Result<(u16, String)> {
    try_http_with(addr, method, path, &[])
}

fn try_http_with(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> std::io::Result<(u16, String)> {
    use std::io::Write;
    let mut stream = std::net::TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(DEADLINE))?;
    let extra: String = headers
        .iter()
        .map(|(name, value)| format!("{name}: {value}\r\n"))
        .collect();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{extra}\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let (head, body) = response.split_once("\r\n\r\n").expect("headers end");
    let code = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("status line in {head:?}"));
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    Ok((
        code,
        if chunked {
            dechunk(body)
        } else {
            body.to_owned()
        },
    ))
}

/// An HTTP/1.1 chunked body, joined.
pub fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).expect("chunk size");
        if size == 0 {
            break;
        }
        out.push_str(&rest[..size]);
        body = &rest[size + 2..];
    }
    out
}

/// The gateway's /metrics, parsed.
pub fn scrape(gw: &mut Gateway) -> prometheus::Scrape {
    let (code, body) = http_get(gw.admin_addr(), "/metrics");
    assert_eq!(code, 200, "{body}");
    prometheus::parse(&body)
}

/// Container ids of the `/tasks/exit` lines in a JSON-lines log, in file order.
pub fn logged_exits(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|line| line["topic"] == "/tasks/exit")
        .map(|line| {
            line["event"]["container_id"]
                .as_str()
                .unwrap_or("")
                .to_owned()
        })
        .collect()
}

/// One HTTP GET of `path` from `port` on the loopback of the network namespace process
/// `pid` lives in: how the kubelet's probes reach a pod's port, for a container with
/// a network of its own (docker's `--network none`, systemd-nspawn's
/// `--private-network`). It runs on a thread of its own, since `setns` moves only the
/// calling thread.
pub fn http_in_netns(pid: u32, port: u16, path: &str) -> std::io::Result<(u16, String)> {
    let namespace = std::fs::File::open(format!("/proc/{pid}/ns/net"))?;
    let path = path.to_owned();
    std::thread::spawn(move || {
        nix::sched::setns(&namespace, nix::sched::CloneFlags::CLONE_NEWNET)
            .map_err(std::io::Error::from)?;
        try_http(
            std::net::SocketAddr::from(([127, 0, 0, 1], port)),
            "GET",
            &path,
        )
    })
    .join()
    .expect("the probe's thread")
}

/// Resident memory of a process (`VmRSS`, KiB), from /proc.
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}
