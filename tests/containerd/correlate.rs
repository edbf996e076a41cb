//! The `correlate` stage under a real event storm: a container restarted 100 times in
//! a row under a real containerd. The `kafka` forwarder with `correlate` receives
//! the first events and then aggregates that account for every other one (read back
//! with kafka-python); the `sqlite` audit store beside it keeps every event.

use crate::support;

use std::collections::BTreeMap;

use serde_json::Value;
use support::containerd::Containerd;
use support::pyconsumer::{PyMessage, consume};
use support::tansu::Tansu;
use support::*;

const RESTARTS: usize = 100;
const TASK_TOPICS: [&str; 4] = [
    "/tasks/create",
    "/tasks/start",
    "/tasks/exit",
    "/tasks/delete",
];

/// A proto3 JSON uint64 is a string; read either form.
fn count(value: &Value) -> u64 {
    value
        .as_u64()
        .or_else(|| value.as_str().and_then(|s| s.parse().ok()))
        .unwrap_or_else(|| panic!("not a count: {value}"))
}

fn metric(gateway: &mut Gateway, name: &str, labels: &[(&str, &str)]) -> f64 {
    scrape(gateway).get(name, labels).unwrap_or(0.0)
}

#[test]
fn a_crash_looping_container_reaches_kafka_aggregated_and_sqlite_complete() {
    let tansu = Tansu::start();
    let containerd = Containerd::start();
    let image = containerd.import_busybox();
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("eventgate.toml");
    std::fs::write(
        &config,
        format!(
            r#"[[upstream]]
name = "node"
address = "{address}"

[[forwarder]]
name = "audit"
kind = "sqlite"
path = "audit.db"

[[forwarder]]
name = "alerts"
kind = "kafka"
brokers = "{brokers}"
topic = "alerts"
create_topic = true
partitions = 1
replication_factor = 1
value_format = "json"
# Kubernetes' parameters, but aggregates sent 2 s after their first held event
# rather than a minute, to keep the test short.
correlate = {{ flush = "2s" }}
"#,
            address = containerd.address(),
            brokers = tansu.brokers(),
        ),
    )
    .expect("write config");
    let mut gateway = Gateway::start_in(dir, &["--config", path_str(&config)]);
    let db = gateway.dir.path().join("data/audit.db");
    support::audit::wait_stored(&db, "the connected marker", |r| {
        r.topic == "/eventgate/upstream/connected"
    });

    // One container, its task started and deleted 100 times: create, start, exit,
    // delete each time, as a crash loop publishes them.
    let id = format!("eg-crashloop-{}", std::process::id());
    let fifos = gateway.dir.path().join("fifo");
    containerd.ctr_in(
        "default",
        &[
            "container",
            "create",
            image,
            &id,
            "--",
            "/bin/busybox",
            "sh",
            "-c",
            "exit 1",
        ],
    );
    let started = std::time::Instant::now();
    for _ in 0..RESTARTS {
        let status = containerd
            .ctr()
            .args(["task", "start", "--fifo-dir", path_str(&fifos), &id])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .expect("ctr task start");
        // Attached, `ctr task start` deletes the exited task itself.
        assert_eq!(status.code(), Some(1), "the task exits 1");
    }
    let took = started.elapsed();
    containerd.ctr_in("default", &["container", "delete", &id]);

    // The audit store: every event of the storm.
    let rows = support::audit::wait_stored(&db, "the container's delete", |r| {
        r.topic == "/containers/delete" && r.container() == Some(id.as_str())
    });
    let stored_per_topic = |rows: &[support::audit::Row]| {
        let mut per: BTreeMap<String, u64> = BTreeMap::new();
        for r in rows.iter().filter(|r| r.container() == Some(id.as_str())) {
            *per.entry(r.topic.clone()).or_default() += 1;
        }
        per
    };
    let complete = stored_per_topic(&rows);
    for topic in TASK_TOPICS {
        assert_eq!(
            complete.get(topic),
            Some(&(RESTARTS as u64)),
            "sqlite keeps every {topic}: {complete:?}"
        );
    }

    // Kafka, read back as a consumer would, until the aggregates have come for
    // every event held back (each at most `flush` after its first).
    let summed = |messages: &[PyMessage]| {
        let mut plain: BTreeMap<String, u64> = BTreeMap::new();
        let mut aggregated: BTreeMap<String, u64> = BTreeMap::new();
        let mut by_reason: BTreeMap<&'static str, u64> = BTreeMap::new();
        for message in messages {
            let value = message.json();
            let event = &value["event"];
            match value["topic"].as_str() {
                Some("/eventgate/correlated") => {
                    assert_eq!(value["type_url"], "eventgate.events.v1.Correlated");
                    if event["object"] != id.as_str() {
                        continue;
                    }
                    let n = count(&event["count"]);
                    let mut parts = 0;
                    for reason in ["duplicates", "similar", "rate_limited"] {
                        let part = event.get(reason).map_or(0, count);
                        parts += part;
                        *by_reason.entry(reason).or_default() += part;
                    }
                    assert_eq!(n, parts, "the count is its parts: {event}");
                    assert!(event["last_event"].is_object(), "the last payload: {event}");
                    let topic = event["topic"].as_str().expect("topic").to_owned();
                    *aggregated.entry(topic).or_default() += n;
                }
                Some(topic)
                    if event["container_id"] == id.as_str() || event["id"] == id.as_str() =>
                {
                    *plain.entry(topic.to_owned()).or_default() += 1;
                }
                _ => {}
            }
        }
        (plain, aggregated, by_reason)
    };
    let (plain, aggregated, by_reason) =
        wait_for("every held event in an aggregate", DEADLINE * 2, || {
            let read = summed(&consume(&tansu.brokers(), "alerts", 1));
            let all = TASK_TOPICS.iter().all(|t| {
                read.0.get(*t).copied().unwrap_or(0) + read.1.get(*t).copied().unwrap_or(0)
                    >= RESTARTS as u64
            });
            all.then_some(read)
        });
    eprintln!(
        "{RESTARTS} restarts in {took:?}: sent {plain:?}, in aggregates {aggregated:?}, {by_reason:?}"
    );
    for topic in TASK_TOPICS {
        let sent = plain.get(topic).copied().unwrap_or(0);
        let summed = aggregated.get(topic).copied().unwrap_or(0);
        assert!(sent <= 10, "at most 10 similar {topic} go through: {sent}");
        assert_eq!(
            sent + summed,
            RESTARTS as u64,
            "{topic}: {sent} sent + {summed} in aggregates = every event (took {took:?})"
        );
    }
    let sent_total: u64 = TASK_TOPICS
        .iter()
        .map(|t| plain.get(*t).copied().unwrap_or(0))
        .sum();
    assert!(
        sent_total <= 25,
        "the object's burst: {sent_total} {plain:?}"
    );
    assert!(
        by_reason["similar"] > 0 && by_reason["rate_limited"] > 0,
        "{by_reason:?}"
    );
    // Every suppressed event is counted, by reason.
    let held: f64 = ["duplicate", "similar", "rate_limited"]
        .iter()
        .map(|r| {
            metric(
                &mut gateway,
                "eventgate_correlate_held_total",
                &[("forwarder", "alerts"), ("reason", r)],
            )
        })
        .sum();
    let all_summed: u64 = aggregated.values().sum();
    assert!(
        held >= all_summed as f64,
        "held {held}, in aggregates {all_summed}"
    );
    assert!(gateway.terminate().success());
}
