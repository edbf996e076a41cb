//! The resumable Subscribe (`eventgate.services.events.v1.Events`) and `eventgate
//! events --since/--after`, through the real binary: a subscriber that was away gets
//! exactly what it missed, then the live events, in gateway order.

use crate::support;

use std::collections::HashMap;
use std::time::Duration;

use eventgate::proto::containerd::services::events::v1::PublishRequest;
use eventgate::proto::eventgate::services::events::v1::events_client::EventsClient as ResumeClient;
use eventgate::proto::eventgate::services::events::v1::{
    Record, SubscribeRequest, subscribe_request::Start,
};
use support::config::Config;
use support::*;
use tonic::transport::Channel;
use tonic::{Code, Request, Streaming};

async fn publish(gw_address: &str, ids: impl IntoIterator<Item = String>) {
    let mut client = eventgate::client::connect(gw_address, Duration::from_secs(5))
        .await
        .expect("connect");
    for id in ids {
        let mut req = Request::new(PublishRequest {
            topic: "/tasks/oom".into(),
            event: task_oom(&id),
        });
        req.metadata_mut()
            .insert("containerd-namespace", "default".parse().expect("header"));
        client.publish(req).await.expect("publish");
    }
}

fn ids(prefix: &str, range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("{prefix}{i}")).collect()
}

async fn resume(address: &str, start: Option<Start>) -> Result<Streaming<Record>, tonic::Status> {
    let channel = eventgate::client::connect_channel(address, Duration::from_secs(5))
        .await
        .expect("connect");
    let mut client: ResumeClient<Channel> = ResumeClient::new(channel);
    tokio::time::timeout(
        DEADLINE,
        client.subscribe(SubscribeRequest {
            filters: vec![],
            start,
            until: None,
        }),
    )
    .await
    .expect("an answer within the deadline")
    .map(|r| r.into_inner())
}

fn container_id(record: &Record) -> String {
    let envelope = record.envelope.as_ref().expect("envelope");
    let any = envelope.event.as_ref().expect("payload");
    let decoded = eventgate::proto::Registry::global()
        .decode(any)
        .expect("decode");
    decoded
        .get_field_by_name("container_id")
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// The next `n` records, checking that seqs only go up.
async fn take(stream: &mut Streaming<Record>, n: usize, last_seq: &mut u64) -> Vec<String> {
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let record = tokio::time::timeout(DEADLINE, stream.message())
            .await
            .expect("a record within the deadline")
            .expect("stream ok")
            .expect("stream not ended");
        assert!(
            record.seq > *last_seq,
            "seq {} after {}",
            record.seq,
            last_seq
        );
        *last_seq = record.seq;
        out.push(container_id(&record));
    }
    out
}

#[tokio::test]
async fn a_resumed_subscriber_gets_exactly_what_it_missed_then_live_events() {
    let gw = Gateway::start(&[]);
    let address = gw.address();
    let mut stream = resume(&address, None).await.expect("subscribe");
    publish(&address, ids("a", 0..10)).await;
    let mut last = 0;
    assert_eq!(take(&mut stream, 10, &mut last).await, ids("a", 0..10));
    drop(stream);

    publish(&address, ids("b", 0..25)).await;
    let mut resumed = resume(&address, Some(Start::AfterSeq(last)))
        .await
        .expect("resume");
    let missed = take(&mut resumed, 25, &mut last).await;
    assert_eq!(
        missed,
        ids("b", 0..25),
        "exactly the missed events, in order"
    );
    publish(&address, ids("c", 0..10)).await;
    assert_eq!(take(&mut resumed, 10, &mut last).await, ids("c", 0..10));
}

#[tokio::test]
async fn a_subscriber_resumes_across_a_gateway_restart() {
    let mut gw = Gateway::start(&[]);
    let address = gw.address();
    publish(&address, ids("a", 0..10)).await;
    let mut stream = resume(&address, Some(Start::AfterSeq(0)))
        .await
        .expect("subscribe");
    let mut last = 0;
    assert_eq!(take(&mut stream, 10, &mut last).await, ids("a", 0..10));
    drop(stream);
    publish(&address, ids("b", 0..15)).await;
    gw.restart();
    publish(&address, ids("c", 0..5)).await;

    let mut resumed = resume(&address, Some(Start::AfterSeq(last)))
        .await
        .expect("resume after the restart");
    let mut expected = ids("b", 0..15);
    expected.extend(ids("c", 0..5));
    assert_eq!(take(&mut resumed, 20, &mut last).await, expected);
    publish(&address, ids("d", 0..5)).await;
    assert_eq!(take(&mut resumed, 5, &mut last).await, ids("d", 0..5));
}

/// Small segments, so the spool releases what its forwarders have delivered.
fn small_spool_config(dir: &std::path::Path, with_store: bool) -> String {
    let checkpoint = "checkpoint = { interval = \"100ms\" }\n";
    let config = Config::new()
        .toml("[spool]\nsegment_bytes = \"4KiB\"\nmax_bytes = \"64MiB\"\n")
        .file("log", "events.jsonl", checkpoint);
    let config = if with_store {
        config.sqlite("audit", "audit.db", checkpoint)
    } else {
        config
    };
    config.write(dir)
}

#[tokio::test]
async fn a_position_older_than_anything_kept_is_refused_naming_the_oldest() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = small_spool_config(dir.path(), false);
    let gw = Gateway::start_in(dir, &["--config", &config]);
    let address = gw.address();
    publish(&address, ids("a", 0..300)).await;
    // The file forwarder delivers and checkpoints; the spool then releases segments.
    let status = loop_until_refused(&address).await;
    assert_eq!(status.code(), Code::OutOfRange, "{status:?}");
    let message = status.message();
    let oldest: u64 = message
        .split("oldest kept event is seq ")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("the message names the oldest seq: {message}"));
    assert!(oldest > 1, "{message}");
    // From the oldest kept one on, it is served: that event first.
    let mut stream = resume(&address, Some(Start::AfterSeq(oldest - 1)))
        .await
        .expect("resume from the oldest kept");
    let first = tokio::time::timeout(DEADLINE, stream.message())
        .await
        .expect("in time")
        .expect("ok")
        .expect("a record");
    assert_eq!(first.seq, oldest);
}

async fn loop_until_refused(address: &str) -> tonic::Status {
    let end = std::time::Instant::now() + DEADLINE;
    loop {
        match resume(address, Some(Start::AfterSeq(0))).await {
            Err(status) => return status,
            Ok(_) if std::time::Instant::now() > end => {
                panic!("the spool never released its first segment")
            }
            Ok(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

#[tokio::test]
async fn a_long_backlog_comes_from_the_store_then_the_spool_then_live_while_publishers_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = small_spool_config(dir.path(), true);
    let mut gw = Gateway::start_in(dir, &["--config", &config]);
    let address = gw.address();
    const BACKLOG: usize = 20_000;
    const PER_PUBLISHER: usize = 1_500;
    let mut backlog = Vec::new();
    for p in 0..4 {
        let address = address.clone();
        backlog.push(tokio::spawn(async move {
            publish(&address, ids(&format!("old{p}-"), 0..BACKLOG / 4)).await
        }));
    }
    for task in backlog {
        task.await.expect("publisher");
    }
    // The first events have left the spool: only the store has them.
    let segments = gw.dir.path().join("data/spool/segments");
    wait_for("the spool to release its first segments", DEADLINE, || {
        let first = std::fs::read_dir(&segments)
            .ok()?
            .filter_map(|e| {
                e.ok()?
                    .file_name()
                    .to_str()?
                    .strip_suffix(".log")?
                    .parse::<u64>()
                    .ok()
            })
            .min()?;
        (first > 1000).then_some(())
    });

    let mut stream = resume(&address, Some(Start::AfterSeq(0)))
        .await
        .expect("resume");
    let mut publishers = Vec::new();
    for p in 0..4 {
        let address = address.clone();
        publishers.push(tokio::spawn(async move {
            publish(&address, ids(&format!("new{p}-"), 0..PER_PUBLISHER)).await
        }));
    }
    let total = BACKLOG + 4 * PER_PUBLISHER;
    let mut last = 0;
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut next_of: HashMap<String, usize> = HashMap::new();
    for id in take(&mut stream, total, &mut last).await {
        let (publisher, n) = id.rsplit_once('-').expect("id shape");
        let n: usize = n.parse().expect("number");
        let expected = next_of.entry(publisher.to_owned()).or_insert(0);
        assert_eq!(n, *expected, "{publisher}'s events in order, none missing");
        *expected += 1;
        *seen.entry(id).or_default() += 1;
    }
    for task in publishers {
        task.await.expect("publisher");
    }
    assert_eq!(seen.len(), total, "every event exactly once");
    assert!(seen.values().all(|&n| n == 1));
    let scraped = scrape(&mut gw);
    let from = |source| {
        scraped
            .get("eventgate_resume_replayed_total", &[("from", source)])
            .unwrap_or(0.0)
    };
    assert!(
        from("store") >= 1000.0,
        "the store served the start: {}",
        from("store")
    );
    assert!(
        from("spool") >= 1.0,
        "the spool served the rest: {}",
        from("spool")
    );
    assert!(
        scraped
            .get("eventgate_resume_switched_total", &[])
            .unwrap_or(0.0)
            >= 1.0
    );
}

#[tokio::test]
async fn a_slow_resumer_is_cut_off_naming_its_last_seq_and_resumes_from_it() {
    let mut gw = Gateway::start(&["--subscriber-queue", "8"]);
    let address = gw.address();
    publish(&address, ids("a", 0..20)).await;
    let mut stream = resume(&address, Some(Start::AfterSeq(0)))
        .await
        .expect("resume");
    let mut last = 0;
    assert_eq!(take(&mut stream, 20, &mut last).await, ids("a", 0..20));
    // The client stops reading while events keep coming.
    let mut published = 0;
    wait_for("the resumer to be cut off", Duration::from_secs(60), || {
        let scraped = scrape(&mut gw);
        // The exchange cuts the live subscription off; the resumer reports it once
        // the client reads again.
        if scraped
            .get("eventgate_subscribers_cut_off_total", &[])
            .unwrap_or(0.0)
            >= 1.0
        {
            return Some(());
        }
        let batch = ids("b", published..published + 500);
        published += 500;
        let address = address.clone();
        std::thread::spawn(move || {
            tokio::runtime::Runtime::new()
                .expect("runtime")
                .block_on(publish(&address, batch))
        })
        .join()
        .expect("publisher");
        None
    });
    let mut received = Vec::new();
    let status = loop {
        match tokio::time::timeout(DEADLINE, stream.message())
            .await
            .expect("in time")
        {
            Ok(Some(record)) => {
                assert!(record.seq > last);
                last = record.seq;
                received.push(container_id(&record));
            }
            Ok(None) => panic!("the stream ended without a status"),
            Err(status) => break status,
        }
    };
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(
        status
            .message()
            .contains(&format!("resume with after_seq {last}")),
        "names the last delivered seq {last}: {}",
        status.message()
    );
    assert_eq!(
        received,
        ids("b", 0..received.len()),
        "nothing skipped before the cut-off"
    );
    let mut resumed = resume(&address, Some(Start::AfterSeq(last)))
        .await
        .expect("resume");
    let rest = take(&mut resumed, published - received.len(), &mut last).await;
    assert_eq!(
        rest,
        ids("b", received.len()..published),
        "the rest, from where it stopped"
    );
    let scraped = scrape(&mut gw);
    assert_eq!(
        scraped.get("eventgate_resume_cut_off_total", &[]),
        Some(1.0)
    );
}

#[test]
fn events_since_and_after_print_history_then_live_events() {
    let gw = Gateway::start(&[]);
    let address = gw.address();
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(publish(&address, ids("a", 0..3)));

    let mut cmd = eventgate();
    cmd.args(["events", "-a", &address, "--after", "1", "--format", "json"]);
    let after = Watcher::spawn(cmd);
    let mut cmd = eventgate();
    cmd.args(["events", "-a", &address, "--since", "10m"]);
    let since = Watcher::spawn(cmd);

    let line = |w: &Watcher| w.stdout.next(DEADLINE).expect("a line");
    let history: Vec<serde_json::Value> = (0..2)
        .map(|_| serde_json::from_str(&line(&after)).expect("json"))
        .collect();
    assert_eq!(history[0]["seq"], 2);
    assert_eq!(history[0]["event"]["container_id"], "a1");
    assert_eq!(history[1]["seq"], 3);
    for expected in ["a0", "a1", "a2"] {
        let text = line(&since);
        assert!(
            text.contains(" default /tasks/oom ") && text.contains(expected),
            "{text}"
        );
    }
    runtime.block_on(publish(&address, ids("b", 0..2)));
    let live: serde_json::Value = serde_json::from_str(&line(&after)).expect("json");
    assert_eq!(live["seq"], 4);
    assert_eq!(live["event"]["container_id"], "b0");
    assert!(line(&since).contains("b0"));
    assert!(line(&since).contains("b1"));
}

#[test]
fn events_until_a_past_time_prints_that_history_and_exits() {
    let gw = Gateway::start(&[]);
    let address = gw.address();
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(publish(&address, ids("a", 0..3)));
    let until = humantime::format_rfc3339_nanos(std::time::SystemTime::now()).to_string();
    runtime.block_on(publish(&address, ids("late", 0..2)));
    let mut cmd = eventgate();
    cmd.args([
        "events", "-a", &address, "--after", "0", "--until", &until, "--format", "json",
    ]);
    let mut watcher = Watcher::spawn(cmd);
    let status = wait_exit(&mut watcher.child, DEADLINE);
    assert!(status.success(), "{status}: {}", watcher.stderr.drain());
    let printed: Vec<String> = std::iter::from_fn(|| watcher.stdout.next(Duration::from_secs(1)))
        .map(|line| {
            let json: serde_json::Value = serde_json::from_str(&line).expect("json");
            json["event"]["container_id"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    assert_eq!(
        printed,
        ids("a", 0..3),
        "the events up to --until, then the end"
    );
}

#[tokio::test]
async fn resumers_still_reading_history_count_against_max_subscribers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("limits.toml");
    std::fs::write(&config, "[exchange.limits]\nmax_subscribers = 2\n").expect("config");
    let gw = Gateway::start_in(dir, &["--config", path_str(&config)]);
    let address = gw.address();
    // More history than a client that does not read can have buffered for it (its
    // HTTP/2 window is 1 MiB): its catch-up waits on it, short of the head.
    publish(&address, ids("a", 0..20_000)).await;
    let first = resume(&address, Some(Start::AfterSeq(0)))
        .await
        .expect("first");
    let _second = resume(&address, Some(Start::AfterSeq(0)))
        .await
        .expect("second");
    let status = resume(&address, Some(Start::AfterSeq(0)))
        .await
        .expect_err("a third is over the limit");
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(
        status.message().contains("max_subscribers"),
        "names the limit: {}",
        status.message()
    );
    // A client that leaves frees its place.
    drop(first);
    let deadline = std::time::Instant::now() + DEADLINE;
    loop {
        match resume(&address, Some(Start::AfterSeq(19_999))).await {
            Ok(_) => break,
            Err(status)
                if status.code() == Code::ResourceExhausted
                    && std::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(status) => panic!("a place is free again once a resumer left: {status:?}"),
        }
    }
}
