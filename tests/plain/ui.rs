//! `/ui` on the admin endpoint of a real `eventgate serve`: the page and its assets
//! with their security headers, the store's endpoints (errors, paging, one event,
//! exports with hostile text), the live stream (fast, filtered, and a stalled reader
//! dropped while publishing goes on), the fleet numbers, and the two settings.

use crate::support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use eventgate::event::{Event, EventId, Source, Workload};
use eventgate::proto::Registry;
use eventgate::proto::containerd::types::Envelope;
use serde_json::Value;
use support::config::Config;
use support::stores::write_store;
use support::*;

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

struct Reply {
    code: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

/// One request on a fresh connection, with the response's headers.
fn request(addr: SocketAddr, method: &str, path: &str) -> Reply {
    let mut stream = TcpStream::connect(addr).expect("connect to the admin endpoint");
    stream.set_read_timeout(Some(DEADLINE)).unwrap();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("read the response");
    let text = String::from_utf8(raw).expect("UTF-8 response");
    let (head, body) = text.split_once("\r\n\r\n").expect("end of headers");
    let mut lines = head.lines();
    let code = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .expect("status line");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(n, v)| n.eq_ignore_ascii_case("transfer-encoding") && v == "chunked");
    let body = if chunked {
        support::dechunk(body)
    } else {
        body.to_owned()
    };
    Reply {
        code,
        headers,
        body,
    }
}

fn get(addr: SocketAddr, path: &str) -> Reply {
    request(addr, "GET", path)
}

/// `application/x-www-form-urlencoded` for a query parameter's value.
pub(crate) fn enc(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn publish_exit(gw: &Gateway, container: &str) {
    let (ok, err) = publish_json(
        &gw.address(),
        "default",
        "/tasks/exit",
        "containerd.events.TaskExit",
        &format!(
            r#"{{"container_id":{},"exit_status":1}}"#,
            serde_json::json!(container)
        ),
    );
    assert!(ok, "publish: {err}");
}

fn audit_db(gw: &Gateway) -> std::path::PathBuf {
    gw.dir.path().join("data/audit.db")
}

/// `eventgate query --format json` of the gateway's store, parsed.
fn query_json(gw: &Gateway, filters: &[&str]) -> Vec<Value> {
    let db = audit_db(gw);
    let mut args = vec!["query", "--db", path_str(&db), "--format", "json"];
    args.extend(filters);
    eventgate_stdout(&args)
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect()
}

#[test]
fn the_page_its_assets_and_the_api_carry_the_security_headers() {
    let mut gw = Gateway::start(&[]);
    let admin = gw.admin_addr();
    let mut asset_bytes = 0;
    for (path, code, kind) in [
        ("/ui", 200, "text/html"),
        ("/ui/", 200, "text/html"),
        ("/ui/app.js", 200, "text/javascript"),
        ("/ui/app.css", 200, "text/css"),
        ("/ui/api/events", 200, "application/json"),
        ("/ui/api/fleet", 200, "application/json"),
        ("/ui/api/event/1000000", 404, "application/json"),
        ("/ui/nothing-here", 404, "application/json"),
        ("/ui/api/events?limit=0", 400, "application/json"),
    ] {
        let reply = get(admin, path);
        assert_eq!(reply.code, code, "{path}: {}", reply.body);
        assert_eq!(reply.header("content-security-policy"), Some(CSP), "{path}");
        assert_eq!(reply.header("x-content-type-options"), Some("nosniff"));
        assert_eq!(reply.header("referrer-policy"), Some("no-referrer"));
        assert!(reply.header("cache-control").is_some(), "{path}");
        assert!(
            reply.header("content-type").unwrap_or("").starts_with(kind),
            "{path}: {:?}",
            reply.header("content-type")
        );
        if path.ends_with(".js") || path.ends_with(".css") || path == "/ui" {
            asset_bytes += reply.body.len();
        }
    }
    assert!(asset_bytes < 300 * 1024, "{asset_bytes} bytes of assets");
    let page = get(admin, "/ui").body;
    assert!(page.contains("src=\"/ui/app.js\"") && !page.contains("<script>"));
    assert_eq!(get(admin, "/ui").header("cache-control"), Some("no-store"));

    let post = request(admin, "POST", "/ui/api/events");
    assert_eq!(post.code, 405);
    assert_eq!(post.header("allow"), Some("GET"));
    assert_eq!(post.header("content-security-policy"), Some(CSP));
}

#[test]
fn bad_parameters_are_named_and_a_bad_filter_gets_the_message_query_prints() {
    let mut gw = Gateway::start(&[]);
    let admin = gw.admin_addr();
    publish_exit(&gw, "c0");
    audit::wait_rows(&audit_db(&gw), 1);

    let bad = r#"topic=="/tasks/exit","#;
    let reply = get(admin, &format!("/ui/api/events?filter={}", enc(bad)));
    assert_eq!(reply.code, 400, "{}", reply.body);
    let error = reply.json();
    assert_eq!(error["param"], "filter");
    let message = error["error"].as_str().expect("a message");
    let db = audit_db(&gw);
    let out = eventgate()
        .args(["query", "--db", path_str(&db), bad])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let printed = String::from_utf8_lossy(&out.stderr);
    assert!(
        !message.is_empty() && printed.contains(message),
        "query printed {printed:?}, /ui said {message:?}"
    );

    for (query, param) in [
        ("limit=1001", "limit"),
        ("limit=ten", "limit"),
        ("after=-3", "after"),
        ("since=yesterday", "since"),
        ("until=2024-13-01T00:00:00Z", "until"),
    ] {
        let reply = get(admin, &format!("/ui/api/events?{query}"));
        assert_eq!(reply.code, 400, "{query}: {}", reply.body);
        assert_eq!(reply.json()["param"], param, "{query}");
    }
    let reply = get(admin, "/ui/api/export?format=xml");
    assert_eq!(
        (reply.code, reply.json()["param"].clone()),
        (400, "format".into())
    );
    let reply = get(admin, "/ui/api/event/x1");
    assert_eq!(
        (reply.code, reply.json()["param"].clone()),
        (400, "row".into())
    );
}

#[test]
fn events_are_paged_by_row_and_each_row_reads_as_query_prints_it() {
    let mut gw = Gateway::start(&[]);
    let admin = gw.admin_addr();
    for i in 0..5 {
        publish_exit(&gw, &format!("page-{i}"));
    }
    audit::wait_rows(&audit_db(&gw), 5);

    let mut seen = Vec::new();
    let mut after = 0;
    let mut pages = 0;
    loop {
        let reply = get(admin, &format!("/ui/api/events?limit=2&after={after}"));
        assert_eq!(reply.code, 200, "{}", reply.body);
        let page = reply.json();
        let events = page["events"].as_array().expect("events").clone();
        assert!(events.len() <= 2);
        pages += 1;
        for e in &events {
            seen.push((
                e["row"].as_i64().expect("row"),
                e["event"]["event"]["container_id"]
                    .as_str()
                    .unwrap_or("")
                    .to_owned(),
            ));
        }
        match page["next"].as_i64() {
            Some(next) => {
                assert_eq!(Some(next), events.last().and_then(|e| e["row"].as_i64()));
                after = next;
            }
            None => break,
        }
    }
    assert_eq!(pages, 3);
    let names: Vec<&str> = seen.iter().map(|(_, c)| c.as_str()).collect();
    assert_eq!(names, ["page-0", "page-1", "page-2", "page-3", "page-4"]);
    assert!(
        seen.windows(2).all(|w| w[0].0 < w[1].0),
        "rows ascend: {seen:?}"
    );

    let filtered = get(
        admin,
        &format!(
            "/ui/api/events?filter={}",
            enc(r#"event.container_id=="page-3""#)
        ),
    )
    .json();
    assert_eq!(filtered["events"].as_array().map(Vec::len), Some(1));
    assert_eq!(filtered["next"], Value::Null);

    let printed = query_json(&gw, &[r#"event.container_id=="page-3""#]);
    let row = filtered["events"][0]["row"].as_i64().unwrap();
    let one = get(admin, &format!("/ui/api/event/{row}"));
    assert_eq!(one.code, 200);
    assert_eq!(one.json(), printed[0]);
    assert_eq!(filtered["events"][0]["event"], printed[0]);
}

/// A store written before the gateway starts, with a hostile container record.
fn hostile_store(data: &Path) {
    std::fs::create_dir_all(data).unwrap();
    let hostile = "=HYPERLINK(\"javascript:alert(1)\",\"<script>x</script>\"), \"quoted\"\nline";
    let any = Registry::global()
        .encode_json(
            "containerd.events.TaskExit",
            &serde_json::json!({ "container_id": "-c1", "exit_status": 137 }).to_string(),
        )
        .unwrap();
    let workload = Workload {
        pod_name: Some("@pod".into()),
        pod_namespace: Some("shop".into()),
        container_name: Some("+web".into()),
        labels: [("app".to_owned(), hostile.to_owned())].into(),
        ..Workload::default()
    };
    let event = Event::new(
        1,
        EventId::generate(),
        Source::Publish,
        Envelope {
            timestamp: Some(prost_types::Timestamp::from(SystemTime::now())),
            namespace: "k8s.io".into(),
            topic: "/tasks/exit".into(),
            event: Some(any),
        },
    )
    .with_workload(Some(Arc::new(workload)))
    .with_node(Some("node-a".into()));
    write_store(&data.join("audit.db"), &[event]);
}

/// A minimal RFC 4180 reader: records of cells.
fn parse_csv(text: &str) -> Vec<Vec<String>> {
    let (mut records, mut record, mut cell) = (Vec::new(), Vec::new(), String::new());
    let mut chars = text.chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                cell.push('"');
            }
            (true, '"') => quoted = false,
            (true, c) => cell.push(c),
            (false, '"') => quoted = true,
            (false, ',') => record.push(std::mem::take(&mut cell)),
            (false, '\r') => {}
            (false, '\n') => {
                record.push(std::mem::take(&mut cell));
                records.push(std::mem::take(&mut record));
            }
            (false, c) => cell.push(c),
        }
    }
    records
}

#[test]
fn exports_are_query_json_lines_and_csv_with_hostile_text_made_inert() {
    let dir = tempfile::tempdir().unwrap();
    hostile_store(&dir.path().join("data"));
    let mut gw = Gateway::start_in(dir, &[]);
    let admin = gw.admin_addr();
    publish_exit(&gw, "=1+1");
    audit::wait_rows(&audit_db(&gw), 2);

    let jsonl = get(admin, "/ui/api/export?format=jsonl");
    assert_eq!(jsonl.code, 200);
    assert!(
        jsonl
            .header("content-disposition")
            .unwrap_or("")
            .starts_with("attachment")
    );
    let db = audit_db(&gw);
    let printed = eventgate_stdout(&["query", "--db", path_str(&db), "--format", "json"]);
    assert_eq!(jsonl.body, printed, "the same lines as query --format json");
    assert_eq!(jsonl.header("x-eventgate-rows"), Some("2"));
    assert_eq!(jsonl.header("x-eventgate-truncated"), None);

    let csv = get(
        admin,
        "/ui/api/export?format=csv&filter=namespace%3D%3Dk8s.io",
    );
    assert_eq!(csv.code, 200, "{}", csv.body);
    assert!(
        csv.header("content-type")
            .unwrap_or("")
            .starts_with("text/csv")
    );
    let records = parse_csv(&csv.body);
    assert_eq!(records.len(), 2, "a header and one event: {records:?}");
    let header = &records[0];
    let cell = |name: &str| {
        let i = header.iter().position(|h| h == name).expect(name);
        records[1][i].clone()
    };
    assert_eq!(cell("pod"), "'@pod");
    assert_eq!(cell("container"), "'+web");
    assert_eq!(cell("node"), "node-a");
    let labels: Value = serde_json::from_str(&cell("labels")).expect("labels as JSON");
    assert_eq!(
        labels["app"],
        "=HYPERLINK(\"javascript:alert(1)\",\"<script>x</script>\"), \"quoted\"\nline",
        "the hostile label round-trips"
    );
    let event: Value = serde_json::from_str(&cell("event")).unwrap();
    assert_eq!(event["container_id"], "-c1");

    let other = get(
        admin,
        "/ui/api/export?format=csv&filter=namespace%3D%3Ddefault",
    );
    let records = parse_csv(&other.body);
    let i = records[0].iter().position(|h| h == "event").unwrap();
    assert!(records[1][i].contains("=1+1") && records[1][i].starts_with('{'));
}

/// Reads an SSE response's raw bytes in the background.
pub(crate) struct LiveStream {
    pub(crate) text: Arc<std::sync::Mutex<String>>,
    stream: TcpStream,
}

impl Drop for LiveStream {
    fn drop(&mut self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }
}

impl LiveStream {
    pub(crate) fn open(admin: SocketAddr, query: &str) -> LiveStream {
        Self::open_with(admin, query, "")
    }

    /// With `headers` (each line ending in CRLF) added to the request.
    pub(crate) fn open_with(admin: SocketAddr, query: &str, headers: &str) -> LiveStream {
        let mut stream = TcpStream::connect(admin).unwrap();
        write!(
            stream,
            "GET /ui/api/live?{query} HTTP/1.1\r\nHost: {admin}\r\n{headers}\r\n"
        )
        .unwrap();
        let text = Arc::new(std::sync::Mutex::new(String::new()));
        let shared = Arc::clone(&text);
        let kept = stream.try_clone().unwrap();
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            while let Ok(n) = stream.read(&mut buf) {
                if n == 0 {
                    break;
                }
                shared
                    .lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        let live = LiveStream { text, stream: kept };
        wait_for("the live stream to open", DEADLINE, || {
            live.has(": connected").then_some(())
        });
        live
    }

    pub(crate) fn has(&self, needle: &str) -> bool {
        self.text.lock().unwrap().contains(needle)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_events_arrive_within_a_second_through_the_pages_filter() {
    let mut gw = Gateway::start(&[]);
    let admin = gw.admin_addr();
    let filter = enc(r#"event.container_id=="wanted""#);
    let live =
        tokio::task::spawn_blocking(move || LiveStream::open(admin, &format!("filter={filter}")))
            .await
            .unwrap();
    let head = live.text.lock().unwrap().clone();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: text/event-stream")
    );
    assert!(head.contains(CSP));

    let mut client = gw.client().await;
    client.publish(exit_request("unwanted")).await.unwrap();
    client.publish(exit_request("wanted")).await.unwrap();
    let published = Instant::now();
    while !live.has("\"container_id\":\"wanted\"") {
        assert!(
            published.elapsed() < Duration::from_secs(1),
            "no live event within 1 s: {}",
            live.text.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let text = live.text.lock().unwrap().clone();
    assert!(text.contains("data: {"), "{text}");
    assert!(
        !text.contains("unwanted"),
        "the filter lets only its events through"
    );

    let bad = get(admin, &format!("/ui/api/live?filter={}", enc("topic==")));
    assert_eq!(
        (bad.code, bad.json()["param"].clone()),
        (400, "filter".into())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_live_page_is_disconnected_while_publishing_goes_on() {
    let mut gw = Gateway::start(&[]);
    let admin = gw.admin_addr();
    // A page that sends its request and never reads.
    let mut stalled = TcpStream::connect(admin).unwrap();
    write!(
        stalled,
        "GET /ui/api/live HTTP/1.1\r\nHost: {admin}\r\n\r\n"
    )
    .unwrap();
    wait_for("the live page's subscription", DEADLINE, || {
        let (_, status) = http_get(admin, "/status");
        let status: Value = serde_json::from_str(&status).ok()?;
        (status["subscribers"].as_u64() >= Some(1)).then_some(())
    });

    // 32 MB of events: more than socket buffers and the page's queue hold.
    let big = "x".repeat(32 << 10);
    let mut client = gw.client().await;
    let start = Instant::now();
    for i in 0..1000 {
        client
            .publish(exit_request(&format!("{i}-{big}")))
            .await
            .unwrap_or_else(|e| panic!("publish {i} refused while a page stalls: {e}"));
    }
    let took = start.elapsed();
    assert!(took < DEADLINE, "1000 publishes took {took:?}");

    let dropped = wait_for("the stalled page to be counted", DEADLINE, || {
        let s = scrape(&mut gw);
        s.get("eventgate_ui_live_dropped_total", &[])
            .filter(|n| *n >= 1.0)
    });
    assert_eq!(dropped, 1.0);
    // Its connection is closed: what was in flight, then the end.
    stalled.set_read_timeout(Some(DEADLINE)).unwrap();
    let mut sink = Vec::new();
    let _ = stalled.read_to_end(&mut sink);
    assert!(sink.len() < 64 << 20);
    // Live pages still work.
    let live = tokio::task::spawn_blocking(move || LiveStream::open(admin, ""))
        .await
        .unwrap();
    client.publish(exit_request("after")).await.unwrap();
    let end = Instant::now() + DEADLINE;
    while !live.has("\"container_id\":\"after\"") {
        assert!(Instant::now() < end, "no live event after the drop");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// An event of `node` at `at` (a connected marker when `gap` is given: the gap before
/// it began at `gap`).
fn fleet_event(node: &str, at: SystemTime, gap: Option<SystemTime>) -> Event {
    let ts = |t: SystemTime| prost_types::Timestamp::from(t);
    let (namespace, topic, any) = match gap {
        None => (
            "default",
            "/tasks/exit",
            Registry::global()
                .encode_json("containerd.events.TaskExit", r#"{"container_id":"c"}"#)
                .unwrap(),
        ),
        Some(from) => (
            "eventgate",
            "/eventgate/upstream/connected",
            Registry::global()
                .encode_json(
                    "eventgate.events.v1.UpstreamConnected",
                    &serde_json::json!({
                        "upstream": "containerd",
                        "connected_at": ts(at).to_string(),
                        "gap_started_at": ts(from).to_string(),
                    })
                    .to_string(),
                )
                .unwrap(),
        ),
    };
    Event::new(
        1,
        EventId::generate(),
        Source::Upstream("edge".into()),
        Envelope {
            timestamp: Some(ts(at)),
            namespace: namespace.into(),
            topic: topic.into(),
            event: Some(any),
        },
    )
    .with_node(Some(node.into()))
}

#[test]
fn the_fleet_view_counts_events_and_gaps_per_node() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let now = SystemTime::now();
    let ago = |secs: u64| now - Duration::from_secs(secs);
    write_store(
        &data.join("audit.db"),
        &[
            fleet_event("node-a", ago(7200), None),
            fleet_event("node-a", ago(3600), None),
            fleet_event("node-a", ago(60), None),
            fleet_event("node-b", ago(1800), None),
            // node-b was not recorded for 90 s before this.
            fleet_event("node-b", ago(900), Some(ago(990))),
            // Outside the default 24 hours.
            fleet_event("node-b", ago(100_000), None),
        ],
    );
    let mut gw = Gateway::start_in(dir, &[]);
    let admin = gw.admin_addr();
    let reply = get(admin, "/ui/api/fleet");
    assert_eq!(reply.code, 200, "{}", reply.body);
    let nodes = reply.json()["nodes"].as_array().expect("nodes").clone();
    let node = |name: &str| {
        nodes
            .iter()
            .find(|n| n["node"] == name)
            .unwrap_or_else(|| panic!("no {name} in {nodes:?}"))
            .clone()
    };
    let a = node("node-a");
    assert_eq!(a["events"], 3);
    assert_eq!(a["gaps"], 0);
    assert!(
        (a["events_per_hour"].as_f64().unwrap() - 3.0 / 24.0).abs() < 1e-3,
        "{a}"
    );
    let last = a["last_event"].as_str().expect("last_event");
    let last = chrono::DateTime::parse_from_rfc3339(last).expect("RFC 3339");
    let expected = chrono::DateTime::<chrono::Utc>::from(ago(60));
    assert!(
        (last.timestamp() - expected.timestamp()).abs() <= 1,
        "{last}"
    );
    let b = node("node-b");
    assert_eq!(
        b["events"], 1,
        "the marker is not one of the node's events: {b}"
    );
    assert_eq!(b["gaps"], 1);
    assert!(
        (b["gap_seconds"].as_f64().unwrap() - 90.0).abs() < 0.01,
        "{b}"
    );

    let hour = get(admin, "/ui/api/fleet?since=1h").json();
    let a = hour["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["node"] == "node-a")
        .cloned();
    assert_eq!(a.map(|a| a["events"].clone()), Some(1.into()));
}

#[test]
fn the_ui_can_be_turned_off_and_a_store_must_be_named_right() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config::new()
        .toml("[admin]\nui = false\n")
        .write(dir.path());
    let mut gw = Gateway::start(&["--config", &config]);
    let admin = gw.admin_addr();
    assert_eq!(get(admin, "/ui").code, 404);
    assert_eq!(get(admin, "/ui/api/events").code, 404);
    assert_eq!(get(admin, "/healthz").code, 200);

    let config = Config::new()
        .sqlite("audit", "audit.db", "")
        .sqlite("archive", "archive.db", "")
        .toml("\n[admin]\nui_store = \"log\"\n")
        .write(dir.path());
    for command in ["check-config", "serve --config"] {
        let out = eventgate()
            .args(command.split(' '))
            .arg(&config)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{command} accepted it");
        assert!(
            err.contains("admin.ui_store") && err.contains("\"audit\", \"archive\""),
            "{command}: {err}"
        );
    }
}

#[test]
fn without_a_store_the_page_is_served_and_reads_say_what_to_configure() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config::new()
        .file("log", "events.jsonl", "")
        .write(dir.path());
    let mut gw = Gateway::start(&["--config", &config]);
    let admin = gw.admin_addr();
    assert_eq!(get(admin, "/ui").code, 200);
    let reply = get(admin, "/ui/api/events");
    assert_eq!(reply.code, 503);
    assert!(
        reply.json()["error"].as_str().unwrap().contains("sqlite"),
        "{}",
        reply.body
    );
}

#[test]
fn a_named_store_is_the_one_read() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config::new()
        .sqlite("everything", "all.db", "")
        .sqlite("exits", "exits.db", "filters = ['topic==\"/nothing\"']\n")
        .toml("\n[admin]\nui_store = \"exits\"\n")
        .write(dir.path());
    let mut gw = Gateway::start(&["--config", &config]);
    let admin = gw.admin_addr();
    publish_exit(&gw, "c1");
    audit::wait_rows(&gw.dir.path().join("data/all.db"), 1);
    let reply = get(admin, "/ui/api/events");
    assert_eq!(reply.code, 200, "{}", reply.body);
    assert_eq!(reply.json()["events"].as_array().map(Vec::len), Some(0));
}

#[test]
fn the_timeline_is_an_svg_of_the_view_and_a_file_to_download() {
    let dir = tempfile::tempdir().unwrap();
    hostile_store(&dir.path().join("data"));
    let mut gw = Gateway::start_in(dir, &[]);
    let admin = gw.admin_addr();

    let svg = get(admin, "/ui/api/timeline.svg?since=1h&group=pod");
    assert_eq!(svg.code, 200, "{}", svg.body);
    assert!(
        svg.header("content-type")
            .unwrap_or("")
            .starts_with("image/svg+xml")
    );
    assert_eq!(svg.header("content-security-policy"), Some(CSP));
    assert!(svg.body.starts_with("<svg") && svg.body.contains("class=\"eg-timeline\""));
    assert!(
        !svg.body.contains("<script"),
        "event text is escaped: {}",
        svg.body
    );
    let row = svg
        .body
        .split("data-row=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("a mark with its row");
    let event = get(admin, &format!("/ui/api/event/{row}"));
    assert_eq!(event.code, 200);
    assert_eq!(event.json()["container"]["name"], "+web");

    let html = get(admin, "/ui/api/timeline.html?pod=%40pod&ns=shop");
    assert_eq!(html.code, 200, "{}", html.body);
    assert!(
        html.header("content-disposition")
            .unwrap_or("")
            .starts_with("attachment")
    );
    assert!(html.body.contains("<svg") && !html.body.contains("<script"));

    // A pod named alone is found in its namespace, as `eventgate timeline --pod` finds
    // it, and the picture is the one that command writes.
    let now = chrono::Utc::now();
    let since = (now - chrono::Duration::hours(1)).to_rfc3339();
    let until = (now + chrono::Duration::hours(1)).to_rfc3339();
    let page = get(
        admin,
        &format!(
            "/ui/api/timeline.svg?pod=%40pod&since={}&until={}",
            enc(&since),
            enc(&until)
        ),
    );
    assert_eq!(page.code, 200, "{}", page.body);
    let file = gw.dir.path().join("pod.svg");
    let db = audit_db(&gw);
    eventgate_stdout(&[
        "timeline",
        "--db",
        path_str(&db),
        "--pod",
        "@pod",
        "--since",
        &since,
        "--until",
        &until,
        "--out",
        path_str(&file),
    ]);
    assert_eq!(page.body, std::fs::read_to_string(&file).unwrap());
    let unknown = get(admin, "/ui/api/timeline.svg?pod=nobody");
    assert_eq!(
        (unknown.code, unknown.json()["param"].clone()),
        (400, "pod".into())
    );

    let bad = get(admin, "/ui/api/timeline.svg?group=container");
    assert_eq!(
        (bad.code, bad.json()["param"].clone()),
        (400, "group".into())
    );
    let empty = get(
        admin,
        "/ui/api/timeline.svg?since=2024-05-01T11:00:00Z&until=2024-05-01T10:00:00Z",
    );
    assert_eq!(
        (empty.code, empty.json()["param"].clone()),
        (400, "until".into())
    );
}

#[test]
fn at_most_sixteen_live_pages_are_open_at_once() {
    let mut gw = Gateway::start(&[]);
    let admin = gw.admin_addr();
    let mut pages: Vec<LiveStream> = (0..16).map(|_| LiveStream::open(admin, "")).collect();
    let refused = get(admin, "/ui/api/live");
    assert_eq!(refused.code, 503, "{}", refused.body);
    assert!(
        refused.json()["error"]
            .as_str()
            .unwrap()
            .contains("16 live pages")
    );
    pages.pop();
    wait_for("a closed page's place to be free", DEADLINE, || {
        let mut stream = TcpStream::connect(admin).ok()?;
        write!(stream, "GET /ui/api/live HTTP/1.1\r\nHost: {admin}\r\n\r\n").ok()?;
        let mut head = [0u8; 12];
        stream.read_exact(&mut head).ok()?;
        head.ends_with(b"200").then_some(())
    });
}
