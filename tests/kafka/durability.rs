//! The durability promise, end to end through the real binary: once Publish returned
//! OK, the event reaches every forwarder, whatever crashes in between; the SQLite
//! store and the log file hold it exactly once. Crashes are SIGKILL; the Kafka outage is a frozen
//! (SIGSTOPped) tansu broker, whose data survives it.

use crate::support;

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use eventgate::proto::Registry;
use eventgate::proto::containerd::types::Envelope;
use prost::Message as _;
use rand::Rng;
use rdkafka::message::Message;
use rusqlite::{Connection, OpenFlags};
use support::config::Config;
use support::tansu::{Tansu, consume};
use support::*;

fn config(dir: &Path, brokers: &str, kafka_extra: &str) -> String {
    Config::new()
        .sqlite("audit", "audit.db", "")
        .file("log", "events.jsonl", "")
        .kafka("kafka", brokers, "events", 1, kafka_extra)
        .write(dir)
}

/// Container id -> number of rows, from the audit store.
fn stored(db: &Path) -> HashMap<String, i64> {
    let Ok(conn) = Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY) else {
        return HashMap::new();
    };
    let Ok(mut statement) = conn.prepare(
        "SELECT json_extract(event, '$.container_id'), count(*) FROM events
         WHERE topic = '/tasks/exit' GROUP BY 1",
    ) else {
        return HashMap::new();
    };
    statement
        .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))
        .expect("query")
        .collect::<Result<_, _>>()
        .unwrap_or_default()
}

/// Container ids of the Kafka topic's exit events, in partition order.
fn in_kafka(brokers: &str, at_least: usize) -> Vec<String> {
    consume(brokers, "events", at_least)
        .iter()
        .map(|m| Envelope::decode(m.payload().expect("value")).expect("an Envelope"))
        .filter(|e| e.topic == "/tasks/exit")
        .map(|e| {
            let msg = Registry::global()
                .decode(e.event.as_ref().expect("payload"))
                .expect("decodes");
            msg.get_field_by_name("container_id")
                .and_then(|v| v.as_str().map(str::to_owned))
                .expect("container_id")
        })
        .collect()
}

/// Publishes `p<publisher>-<n>` events until `stop`; returns the ids whose Publish
/// returned OK.
async fn publisher(address: String, publisher: usize, stop: Arc<AtomicBool>) -> Vec<String> {
    let mut acked = Vec::new();
    publish_until(
        &address,
        &stop,
        |n| format!("p{publisher}-{n}"),
        |id| acked.push(id),
    )
    .await;
    acked
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_at_random_points_loses_no_acknowledged_event() {
    let tansu = Tansu::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(dir.path(), &tansu.brokers(), "");
    let gateway = Arc::new(Mutex::new(Gateway::start_in(dir, &["--config", &config])));
    let (address, data) = {
        let gw = gateway.lock().unwrap();
        (gw.address(), gw.dir.path().join("data"))
    };
    let stop = Arc::new(AtomicBool::new(false));
    let publishers: Vec<_> = (0..4)
        .map(|p| tokio::spawn(publisher(address.clone(), p, Arc::clone(&stop))))
        .collect();
    for _ in 0..5 {
        let pause = rand::rng().random_range(150..700);
        tokio::time::sleep(Duration::from_millis(pause)).await;
        let gw = Arc::clone(&gateway);
        tokio::task::spawn_blocking(move || gw.lock().unwrap().crash_restart())
            .await
            .expect("restart");
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::SeqCst);
    let mut acked = Vec::new();
    for p in publishers {
        acked.extend(p.await.expect("publisher"));
    }
    assert!(
        acked.len() > 200,
        "only {} publishes succeeded",
        acked.len()
    );

    let db = data.join("audit.db");
    let rows = wait_for(
        "every acknowledged event in SQLite",
        Duration::from_secs(60),
        || {
            let rows = stored(&db);
            acked.iter().all(|id| rows.contains_key(id)).then_some(rows)
        },
    );
    let doubled: Vec<_> = rows.iter().filter(|(_, n)| **n > 1).collect();
    assert!(doubled.is_empty(), "stored more than once: {doubled:?}");

    let log = data.join("events.jsonl");
    let lines = wait_for(
        "every acknowledged event in the log",
        Duration::from_secs(60),
        || {
            let lines = logged_exits(&log);
            let set: HashSet<&String> = lines.iter().collect();
            acked.iter().all(|id| set.contains(id)).then_some(lines)
        },
    );
    // Cut back to its last checkpoint at each start, the log has no line twice.
    let mut seen = HashSet::new();
    let twice: Vec<&String> = lines.iter().filter(|id| !seen.insert(*id)).collect();
    assert!(twice.is_empty(), "in the log more than once: {twice:?}");
    let brokers = tansu.brokers();
    let n = acked.len();
    let kafka: HashSet<String> = match std::panic::catch_unwind(move || in_kafka(&brokers, n)) {
        Ok(kafka) => kafka.into_iter().collect(),
        Err(panic) => {
            eprintln!("gateway log:\n{}", gateway.lock().unwrap().stderr_text());
            std::panic::resume_unwind(panic)
        }
    };
    let missing: Vec<_> = acked.iter().filter(|id| !kafka.contains(*id)).collect();
    assert!(missing.is_empty(), "missing from Kafka: {missing:?}");
    let mut gw = gateway.lock().unwrap();
    assert!(gw.terminate().success(), "{}", gw.stderr_text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_broker_holds_back_only_kafka_and_its_backlog_arrives_in_order() {
    let tansu = Tansu::start();
    let dir = tempfile::tempdir().expect("tempdir");
    // A small memory queue, so the outage outgrows it and the backlog comes from the
    // spool; a short delivery timeout, so librdkafka reports failures during it.
    let config = config(
        dir.path(),
        &tansu.brokers(),
        "message_timeout = \"2s\"\nqueue = { events = 50 }\nretry = { timeout = \"3s\", max = \"500ms\" }",
    );
    let mut gateway = Gateway::start_in(dir, &["--config", &config]);
    let data = gateway.dir.path().join("data");
    let mut client = gateway.client().await;
    let ids: Vec<String> = (0..600).map(|n| format!("c{n}")).collect();
    for id in &ids[..10] {
        client.publish(exit_request(id)).await.expect("publish");
    }
    assert_eq!(in_kafka(&tansu.brokers(), 10), ids[..10]);

    tansu.freeze();
    for id in &ids[10..] {
        client
            .publish(exit_request(id))
            .await
            .expect("publish while Kafka is down");
    }
    // The audit store and the log keep up while Kafka is down.
    let db = data.join("audit.db");
    wait_for("SQLite to keep up during the outage", DEADLINE, || {
        (stored(&db).len() == ids.len()).then_some(())
    });
    wait_for("the log to keep up during the outage", DEADLINE, || {
        (logged_exits(&data.join("events.jsonl")) == ids).then_some(())
    });
    tansu.resume();
    let brokers = tansu.brokers();
    let n = ids.len();
    let kafka = match std::panic::catch_unwind(move || in_kafka(&brokers, n)) {
        Ok(kafka) => kafka,
        Err(panic) => {
            eprintln!("gateway log:\n{}", gateway.stderr_text());
            std::panic::resume_unwind(panic)
        }
    };
    // At least once, in order: drop repeats of a message that was retried.
    let mut seen = HashSet::new();
    let first_copies: Vec<String> = kafka
        .into_iter()
        .filter(|id| seen.insert(id.clone()))
        .collect();
    assert_eq!(first_copies, ids, "every event, in publish order");
    assert!(gateway.terminate().success(), "{}", gateway.stderr_text());
}
