//! Reconstructed events are marked as such in every record eventgate keeps. No
//! command makes a reconciled event yet, so a gateway is built through the library
//! and given one with `Exchange::append`, next to live ones; then the store,
//! the file lines, the route filters and the real `eventgate query`, `stats`, `audit
//! verify` and `replay` are looked at. A subscriber sees ordinary envelopes.

use crate::support;

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

use eventgate::config::Config;
use eventgate::event::{Clock, Origin, Source};
use eventgate::gateway::{Gateway, Incoming};
use eventgate::proto::Registry;
use eventgate::proto::containerd::services::events::v1::SubscribeRequest;
use eventgate::proto::containerd::types::Envelope;
use serde_json::Value;
use support::*;

const T0: i64 = 1_714_557_600; // 2024-05-01T10:00:00Z

fn exit(container: &str, seconds: i64) -> Envelope {
    let json = format!(
        r#"{{"container_id":"{container}","pid":7,"exit_status":137,"exited_at":"2024-05-01T10:00:{:02}Z"}}"#,
        seconds - T0
    );
    let any = Registry::global()
        .encode_json("containerd.events.TaskExit", &json)
        .unwrap();
    Envelope {
        timestamp: Some(prost_types::Timestamp { seconds, nanos: 0 }),
        namespace: "default".into(),
        topic: "/tasks/exit".into(),
        event: Some(any),
    }
}

fn run(args: &[&str]) -> Output {
    eventgate()
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn file_lines(path: &Path) -> Vec<Value> {
    json_lines(&std::fs::read_to_string(path).unwrap_or_default())
}

/// The container and origin fields of JSON lines, in order.
fn marks(lines: &[Value]) -> Vec<(String, Value, Value)> {
    lines
        .iter()
        .map(|l| {
            (
                l["event"]["container_id"].as_str().unwrap_or("").to_owned(),
                l["origin"].clone(),
                l.get("origin_clock").cloned().unwrap_or(Value::Null),
            )
        })
        .collect()
}

fn mark(container: &str, origin: &str, clock: Option<&str>) -> (String, Value, Value) {
    (
        container.to_owned(),
        Value::from(origin),
        clock.map_or(Value::Null, Value::from),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn reconciled_events_are_marked_in_every_record_and_selectable_by_origin() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let toml = format!(
        r#"
        data_dir = "{}"
        [admin]
        listen = "127.0.0.1:0"
        [[forwarder]]
        name = "audit"
        kind = "sqlite"
        path = "audit.db"
        [[forwarder]]
        name = "log"
        kind = "file"
        path = "events.jsonl"
        [[forwarder]]
        name = "rebuilt"
        kind = "file"
        path = "rebuilt.jsonl"
        filters = ['origin==reconciled']
        [[forwarder]]
        name = "live"
        kind = "file"
        path = "live.jsonl"
        filters = ['origin!=reconciled']
        "#,
        data.display()
    );
    let config = Config::parse(&toml, "test").unwrap();
    let gateway = Gateway::start(&config).await.unwrap();
    let address = gateway.socket_path().display().to_string();
    let mut client = eventgate::client::connect(&address, Duration::from_secs(5))
        .await
        .unwrap();
    let mut everything = client
        .subscribe(SubscribeRequest { filters: vec![] })
        .await
        .unwrap()
        .into_inner();
    // Subscribe keeps containerd's fields: `origin` is not one of them, so the first
    // alternative matches nothing and only the second lets an event through.
    let mut by_origin = client
        .subscribe(SubscribeRequest {
            filters: vec![
                "origin==reconciled".into(),
                "event.container_id==plain".into(),
            ],
        })
        .await
        .unwrap()
        .into_inner();
    wait_for("two subscribers", DEADLINE, || {
        (gateway.exchange().subscriber_count() == 2).then_some(())
    });

    let exchange = gateway.exchange();
    let upstream = Source::Upstream("node-a".into());
    let sent = [
        (exit("gone", T0 + 5), Origin::reconciled(Clock::Daemon)),
        (exit("running", T0 + 30), Origin::Live),
        (
            exit("unknown", T0 + 40),
            Origin::reconciled(Clock::Reconcile),
        ),
    ];
    for (envelope, origin) in &sent {
        let incoming = Incoming::checked(upstream.clone(), envelope.clone()).origin(*origin);
        let appended = exchange.append(incoming).await.unwrap();
        let event = appended.acknowledged().await.unwrap();
        assert_eq!(event.identity.origin, *origin);
    }
    // Existing entry points are live.
    let incoming = Incoming::checked(upstream.clone(), exit("plain", T0 + 50));
    let plain = exchange.append(incoming).await.unwrap();
    let plain = plain.acknowledged().await.unwrap();
    assert_eq!(plain.identity.origin, Origin::Live);

    // The subscriber gets each envelope exactly as accepted, nothing added.
    for (envelope, _) in &sent {
        let got = tokio::time::timeout(DEADLINE, everything.message())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(&got, envelope);
    }
    let first = tokio::time::timeout(DEADLINE, by_origin.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(
        first, plain.envelope,
        "origin==reconciled matched on Subscribe"
    );

    drop((everything, by_origin, client));
    let reports = gateway.stop().await;
    let delivered = |name: &str| {
        reports
            .iter()
            .find(|r| r.forwarder == name)
            .map(|r| r.delivered)
    };
    assert_eq!(delivered("audit"), Some(4));
    assert_eq!(delivered("rebuilt"), Some(2));
    assert_eq!(delivered("live"), Some(2));

    // The SQLite row.
    let db = data.join("audit.db");
    let rows: Vec<(String, String, Option<String>)> = {
        let conn = rusqlite::Connection::open(&db).unwrap();
        let mut stmt = conn
            .prepare(
                "SELECT json_extract(event, '$.container_id'), origin, origin_clock \
                 FROM events ORDER BY row_id",
            )
            .unwrap();
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };
    let row =
        |c: &str, o: &str, k: Option<&str>| (c.to_owned(), o.to_owned(), k.map(str::to_owned));
    assert_eq!(
        rows,
        [
            row("gone", "reconciled", Some("daemon")),
            row("running", "live", None),
            row("unknown", "reconciled", Some("reconcile")),
            row("plain", "live", None),
        ]
    );

    // The file lines, and the route filters on origin.
    let expected = [
        mark("gone", "reconciled", Some("daemon")),
        mark("running", "live", None),
        mark("unknown", "reconciled", Some("reconcile")),
        mark("plain", "live", None),
    ];
    let log = file_lines(&data.join("events.jsonl"));
    assert_eq!(marks(&log), expected);
    assert!(
        log[1].get("origin_clock").is_none(),
        "no clock key for live"
    );
    assert_eq!(
        marks(&file_lines(&data.join("rebuilt.jsonl"))),
        [expected[0].clone(), expected[2].clone()]
    );
    assert_eq!(
        marks(&file_lines(&data.join("live.jsonl"))),
        [expected[1].clone(), expected[3].clone()]
    );

    // `eventgate query`, the real binary: the same lines as the file, and by origin.
    let db_arg = path_str(&db);
    let queried = json_lines(&stdout(&run(&[
        "query", "--db", db_arg, "--format", "json",
    ])));
    assert_eq!(queried, log, "query --format json prints the file's lines");
    for (filter, wanted) in [
        ("origin==reconciled", vec![0, 2]),
        ("origin==live", vec![1, 3]),
        ("origin_clock==daemon", vec![0]),
        ("origin_clock", vec![0, 2]),
        ("origin_clock!=daemon", vec![1, 2, 3]),
        ("origin~=^rec,event.container_id==unknown", vec![2]),
    ] {
        let out = stdout(&run(&["query", "--db", db_arg, "--format", "json", filter]));
        let wanted: Vec<_> = wanted.iter().map(|&i| expected[i].clone()).collect();
        assert_eq!(marks(&json_lines(&out)), wanted, "{filter}");
    }
    let stats = stdout(&run(&[
        "stats",
        "--db",
        db_arg,
        "--utc",
        "--bucket",
        "1d",
        "origin==reconciled",
    ]));
    let counted: Vec<Vec<&str>> = stats
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(counted.len(), 1, "{stats}");
    assert_eq!(
        counted[0][counted[0].len() - 2..],
        ["/tasks/exit", "2"],
        "{stats}"
    );

    // The origin columns are in the hash chain, and the chain is whole.
    let verified = run(&["audit", "verify", "--db", db_arg]);
    assert!(
        verified.status.success(),
        "{}{}",
        String::from_utf8_lossy(&verified.stdout),
        String::from_utf8_lossy(&verified.stderr)
    );

    // Replayed through a forwarder, a reconciled event is still reconciled; the
    // forwarder's own route filter on origin_clock applies as well.
    let replay_config = dir.path().join("replay.toml");
    std::fs::write(
        &replay_config,
        format!(
            "data_dir = {:?}\n[[forwarder]]\nname = \"again\"\nkind = \"file\"\n\
             path = \"replayed.jsonl\"\nfilters = ['origin_clock==daemon']\n",
            path_str(&dir.path().join("out"))
        ),
    )
    .unwrap();
    let summary = stdout(&run(&[
        "replay",
        "--db",
        db_arg,
        "--to-forwarder",
        "again",
        "--config",
        path_str(&replay_config),
        "--progress",
        "never",
        "origin==reconciled",
    ]));
    assert!(summary.contains("1 skipped"), "{summary}");
    let replayed = file_lines(&dir.path().join("out/replayed.jsonl"));
    assert_eq!(
        replayed,
        [log[0].clone()],
        "the line as it was first written"
    );
}

/// A dead letter keeps its origin: `eventgate dlq list` shows it, and after `dlq retry`
/// the real gateway redelivers the event to its forwarder still marked reconciled.
#[tokio::test(flavor = "multi_thread")]
async fn a_dead_letter_keeps_its_origin_through_list_and_retry() {
    use eventgate::event::{Event, EventId};
    use eventgate::internal::deadletter::{Failure, Reason, Store};
    use std::sync::Arc;
    use std::time::SystemTime;

    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let origin = Origin::reconciled(Clock::Reconcile);
    let event = Event::new(
        9,
        EventId::generate(),
        Source::Upstream("node-a".into()),
        exit("lost", T0 + 7),
    )
    .with_origin(origin);
    let id = event.identity.id.to_string();
    {
        let store = Store::open(data.join("deadletters.db"), true)
            .await
            .unwrap();
        let failure = Failure {
            reason: Reason::Permanent,
            error: "refused".into(),
            attempts: 1,
            first_attempt_at: SystemTime::now(),
            last_attempt_at: SystemTime::now(),
        };
        store
            .record("log", vec![Arc::new(event)], failure)
            .await
            .unwrap();
    }
    let data_arg = path_str(&data);
    let listed = json_lines(&stdout(&run(&[
        "dlq",
        "list",
        "--data-dir",
        data_arg,
        "--format",
        "json",
    ])));
    assert_eq!(
        marks(&listed),
        [mark("lost", "reconciled", Some("reconcile"))]
    );
    stdout(&run(&[
        "dlq",
        "retry",
        "--data-dir",
        data_arg,
        "--forwarder",
        "log",
    ]));

    let config = dir.path().join("eventgate.toml");
    std::fs::write(
        &config,
        "[[forwarder]]\nname = \"log\"\nkind = \"file\"\npath = \"events.jsonl\"\n",
    )
    .unwrap();
    let config = path_str(&config).to_owned();
    let gateway = support::Gateway::start_in(dir, &["--config", &config]);
    let path = gateway.dir.path().join("data/events.jsonl");
    let line = wait_for("the redelivered event in the file", DEADLINE, || {
        // Only a whole line: the gateway may be writing it.
        let text = std::fs::read_to_string(&path).ok()?;
        let (first, _) = text.split_once('\n')?;
        Some(serde_json::from_str::<Value>(first).unwrap())
    });
    assert_eq!(line["id"], id.as_str(), "the same event");
    assert_eq!(line["seq"], 9);
    assert_eq!(
        marks(&[line]),
        [mark("lost", "reconciled", Some("reconcile"))]
    );
}

/// Events a reconcile reconstructed from the CRI's or dockerd's record say whose record
/// it was, and carry the manager's reason, in every record: the audit store's columns
/// (in the hash chain), JSON lines, `query --format json`, the route filters and
/// `query`'s filters on `reconciled_from` and `reason`, the pod's timeline and
/// `replay`.
#[tokio::test(flavor = "multi_thread")]
async fn reconciled_events_say_whose_record_and_why_in_every_record() {
    use std::sync::Arc;

    use eventgate::event::{Witness, Workload};

    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let toml = format!(
        r#"
        data_dir = "{}"
        [admin]
        listen = "127.0.0.1:0"
        [[forwarder]]
        name = "audit"
        kind = "sqlite"
        path = "audit.db"
        [[forwarder]]
        name = "log"
        kind = "file"
        path = "events.jsonl"
        [[forwarder]]
        name = "ooms"
        kind = "file"
        path = "ooms.jsonl"
        filters = ['reason==OOMKilled,reconciled_from!=docker']
        "#,
        data.display()
    );
    let config = Config::parse(&toml, "test").unwrap();
    let gateway = Gateway::start(&config).await.unwrap();
    let pod = |reason: Option<&str>| {
        Some(Arc::new(Workload {
            kind: Some("container".into()),
            pod_name: Some("web-7".into()),
            pod_namespace: Some("shop".into()),
            pod_uid: Some("uid-1".into()),
            container_name: Some("nginx".into()),
            reason: reason.map(str::to_owned),
            ..Workload::default()
        }))
    };
    let by = |clock, from| Origin::Reconciled { clock, from };
    let sent = [
        (
            exit("oom", T0 + 5),
            by(Clock::Daemon, Witness::Cri),
            pod(Some("OOMKilled")),
        ),
        (
            exit("gone", T0 + 10),
            Origin::reconciled(Clock::Reconcile),
            pod(None),
        ),
        (exit("live", T0 + 20), Origin::Live, pod(None)),
        (
            exit("docker", T0 + 30),
            by(Clock::Daemon, Witness::Docker),
            pod(Some("OOMKilled")),
        ),
    ];
    let upstream = Source::Upstream("node-a".into());
    for (envelope, origin, workload) in &sent {
        let incoming = Incoming::checked(upstream.clone(), envelope.clone())
            .origin(*origin)
            .workload(workload.clone());
        let appended = gateway.exchange().append(incoming).await.unwrap();
        appended.durable.await.unwrap();
    }
    let reports = gateway.stop().await;
    let delivered = |name: &str| {
        reports
            .iter()
            .find(|r| r.forwarder == name)
            .map(|r| r.delivered)
    };
    assert_eq!(delivered("audit"), Some(4));
    assert_eq!(delivered("ooms"), Some(1));

    // The columns.
    let db = data.join("audit.db");
    let rows: Vec<(String, Option<String>, Option<String>)> = {
        let conn = rusqlite::Connection::open(&db).unwrap();
        let mut stmt = conn
            .prepare(
                "SELECT json_extract(event, '$.container_id'), reconciled_from, reason \
                 FROM events ORDER BY row_id",
            )
            .unwrap();
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };
    let row = |c: &str, from: Option<&str>, reason: Option<&str>| {
        (
            c.to_owned(),
            from.map(str::to_owned),
            reason.map(str::to_owned),
        )
    };
    assert_eq!(
        rows,
        [
            row("oom", Some("cri"), Some("OOMKilled")),
            row("gone", Some("containerd"), None),
            row("live", None, None),
            row("docker", Some("docker"), Some("OOMKilled")),
        ]
    );

    // The JSON lines, the route filter, and `query --format json` printing the same.
    let witness = |lines: &[Value]| -> Vec<(String, Value, Value)> {
        lines
            .iter()
            .map(|l| {
                (
                    l["event"]["container_id"].as_str().unwrap_or("").to_owned(),
                    l.get("reconciled_from").cloned().unwrap_or(Value::Null),
                    l.get("reason").cloned().unwrap_or(Value::Null),
                )
            })
            .collect()
    };
    let expected: Vec<(String, Value, Value)> = rows
        .iter()
        .map(|(c, from, reason)| {
            let json = |v: &Option<String>| v.as_deref().map_or(Value::Null, Value::from);
            (c.clone(), json(from), json(reason))
        })
        .collect();
    let log = file_lines(&data.join("events.jsonl"));
    assert_eq!(witness(&log), expected);
    assert_eq!(
        witness(&file_lines(&data.join("ooms.jsonl"))),
        [expected[0].clone()]
    );
    let db_arg = path_str(&db);
    let queried = json_lines(&stdout(&run(&[
        "query", "--db", db_arg, "--format", "json",
    ])));
    assert_eq!(queried, log, "query --format json prints the file's lines");
    for (filter, wanted) in [
        ("reconciled_from==cri", vec![0]),
        ("reconciled_from==containerd", vec![1]),
        ("reconciled_from", vec![0, 1, 3]),
        ("reconciled_from!=docker", vec![0, 1, 2]),
        ("reason==OOMKilled", vec![0, 3]),
        ("reason", vec![0, 3]),
        ("reason~=^OOM,reconciled_from==docker", vec![3]),
    ] {
        let out = stdout(&run(&["query", "--db", db_arg, "--format", "json", filter]));
        let wanted: Vec<_> = wanted.iter().map(|&i| expected[i].clone()).collect();
        assert_eq!(witness(&json_lines(&out)), wanted, "{filter}");
    }

    // Both columns are in the hash chain, and the chain is whole.
    let verified = run(&["audit", "verify", "--db", db_arg]);
    assert!(
        verified.status.success(),
        "{}{}",
        String::from_utf8_lossy(&verified.stdout),
        String::from_utf8_lossy(&verified.stderr)
    );

    // The pod's timeline says whose record and why; containerd's as before.
    let timeline = stdout(&run(&["query", "--db", db_arg, "--utc", "--pod", "web-7"]));
    for text in [
        "[reconciled by cri, reason OOMKilled]",
        "killed (SIGKILL) [reconciled]",
        "[reconciled by docker, reason OOMKilled]",
    ] {
        assert!(timeline.contains(text), "{text}: {timeline}");
    }

    // Replayed through a forwarder filtering on them: the lines as first written.
    let replay_config = dir.path().join("replay.toml");
    std::fs::write(
        &replay_config,
        format!(
            "data_dir = {:?}\n[[forwarder]]\nname = \"again\"\nkind = \"file\"\n\
             path = \"replayed.jsonl\"\nfilters = ['reconciled_from==docker']\n",
            path_str(&dir.path().join("out"))
        ),
    )
    .unwrap();
    stdout(&run(&[
        "replay",
        "--db",
        db_arg,
        "--to-forwarder",
        "again",
        "--config",
        path_str(&replay_config),
        "--progress",
        "never",
        "reason==OOMKilled",
    ]));
    let replayed = file_lines(&dir.path().join("out/replayed.jsonl"));
    assert_eq!(replayed, [log[3].clone()]);
}
