//! A fleet into PostgreSQL: node gateways produce to a real Kafka-protocol broker
//! (tansu), two central gateways in one consumer group take the events in and store
//! them with a `postgres` forwarder that also keeps the group's offsets. Crashes of a
//! central gateway and a restart of the database server mid-stream: every event is
//! stored exactly once, with its node.

use std::time::Duration;

use crate::support::postgres::Postgres;
use crate::support::tansu::Tansu;
use crate::support::*;

const TOPIC: &str = "fleet";
const PARTITIONS: u32 = 4;
/// Time for the fleet's events to reach the database, a group rebalance after a
/// crash (the session timeout below) included.
const ARRIVAL: Duration = Duration::from_secs(120);

fn node(tansu: &Tansu, name: &str) -> Gateway {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("eventgate.toml");
    std::fs::write(
        &config,
        format!(
            r#"[[forwarder]]
name = "kafka"
kind = "kafka"
brokers = "{brokers}"
topic = "{TOPIC}"
create_topic = true
partitions = {PARTITIONS}
"#,
            brokers = tansu.brokers()
        ),
    )
    .unwrap();
    Gateway::start_in(dir, &["--config", path_str(&config), "--node", name])
}

fn central(tansu: &Tansu, pg: &Postgres, name: &str) -> Gateway {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("eventgate.toml");
    // A file of this gateway's own: tests run in parallel, each with its own server.
    let password = dir.path().join("pg-password");
    std::fs::write(&password, pg.password()).unwrap();
    std::fs::write(
        &config,
        format!(
            r#"[[forwarder]]
name = "central"
kind = "postgres"
url = "postgres://postgres@127.0.0.1:{port}/history"
password_file = "{password}"
tls = "disable"
writer = "{name}"
retry = {{ initial = "50ms", max = "500ms" }}

[[source]]
kind = "kafka"
name = "fleet"
brokers = "{brokers}"
topics = ["{TOPIC}"]
group = "centrals"
offsets = "central"
properties = {{ "session.timeout.ms" = "10000", "heartbeat.interval.ms" = "1000" }}
"#,
            port = pg.port(),
            password = password.display(),
            brokers = tansu.brokers()
        ),
    )
    .unwrap();
    Gateway::start_in(dir, &["--config", path_str(&config), "--node", name])
}

/// Publishes `count` task exits from the node, numbered from `from`.
fn publish(node: &Gateway, name: &str, from: u32, count: u32) {
    for pid in from..from + count {
        let (ok, err) = publish_json(
            &node.address(),
            "default",
            "/tasks/exit",
            "containerd.events.TaskExit",
            &format!(r#"{{"container_id":"{name}-c{}","pid":{pid}}}"#, pid % 8),
        );
        assert!(ok, "publish: {err}");
    }
}

/// (node, rows, distinct ids) per node.
fn per_node(pg: &Postgres) -> Vec<(String, u64, u64)> {
    let text = pg
        .try_sql_in(
            "history",
            "SELECT node || ' ' || count(*) || ' ' || count(DISTINCT id) FROM events GROUP BY node ORDER BY node",
        )
        .unwrap_or_default();
    text.lines()
        .map(|line| {
            let mut parts = line.split_whitespace();
            let node = parts.next().unwrap().to_owned();
            let rows = parts.next().unwrap().parse().unwrap();
            let distinct = parts.next().unwrap().parse().unwrap();
            (node, rows, distinct)
        })
        .collect()
}

fn total(pg: &Postgres) -> u64 {
    per_node(pg).iter().map(|(_, rows, _)| rows).sum()
}

/// Waits for `done`; at the deadline, fails with what the store holds and what the
/// central gateways logged.
fn until(pg: &Postgres, centrals: &mut [Gateway], what: &str, done: impl Fn(&Postgres) -> bool) {
    let started = std::time::Instant::now();
    while !done(pg) {
        if started.elapsed() > ARRIVAL {
            let offsets = pg.sql_in(
                "history",
                "SELECT topic, partition, next_offset, epoch, owner FROM kafka_offsets ORDER BY 1, 2",
            );
            let logs: Vec<String> = centrals.iter_mut().map(Gateway::stderr_text).collect();
            let missing = pg.sql_in(
                "history",
                "SELECT n.node || ':' || p FROM (VALUES ('node-a'), ('node-b')) n(node), generate_series(0, 319) p
                 WHERE NOT EXISTS (SELECT 1 FROM events e WHERE e.node = n.node AND (e.event->>'pid')::int = p)",
            );
            panic!(
                "timed out after {ARRIVAL:?} waiting for {what}: stored {:?}, missing {missing}\noffsets:\n{offsets}\n{}",
                per_node(pg),
                logs.join("\n----\n")
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn two_centrals_store_every_event_once_across_a_crash_and_a_database_restart() {
    let tansu = Tansu::start();
    let mut pg = Postgres::start();
    pg.sql("CREATE DATABASE history");
    let a = node(&tansu, "node-a");
    let b = node(&tansu, "node-b");
    let one = central(&tansu, &pg, "central-1");
    let two = central(&tansu, &pg, "central-2");

    let streams = [("node-a", &a), ("node-b", &b)].map(|(name, gw)| {
        let address = gw.address();
        let name = name.to_owned();
        std::thread::spawn(move || {
            for round in 0..300u32 {
                let (ok, err) = publish_json(
                    &address,
                    "default",
                    "/tasks/exit",
                    "containerd.events.TaskExit",
                    &format!(
                        r#"{{"container_id":"{name}-c{}","pid":{round}}}"#,
                        round % 8
                    ),
                );
                assert!(ok, "publish: {err}");
            }
        })
    });
    // Mid-stream: one central gateway is killed, and started again at once.
    let mut centrals = [one, two];
    until(&pg, &mut centrals, "the first events stored", |pg| {
        total(pg) > 50
    });
    centrals[0].crash_restart();
    // Later, the database server is stopped and started while batches go in.
    let before = total(&pg);
    until(&pg, &mut centrals, "more events stored", |pg| {
        total(pg) > before + 50
    });
    pg.restart();
    for stream in streams {
        stream.join().unwrap();
    }
    publish(&a, "node-a", 300, 20);
    publish(&b, "node-b", 300, 20);
    until(&pg, &mut centrals, "every event stored", |pg| {
        let nodes = per_node(pg);
        for (node, rows, distinct) in &nodes {
            assert_eq!(
                rows, distinct,
                "{node}: an event was stored twice: {nodes:?}"
            );
        }
        nodes == [("node-a".into(), 320, 320), ("node-b".into(), 320, 320)]
    });
    // Both gateways wrote, and the offsets stored are where each partition ends.
    let writers = pg.sql_in("history", "SELECT count(DISTINCT written_by) FROM events");
    assert_eq!(writers, "2", "one central gateway did all the work");
    let offsets = pg.sql_in(
        "history",
        "SELECT sum(next_offset) FROM kafka_offsets WHERE consumer_group = 'centrals'",
    );
    assert_eq!(offsets, "640", "the stored offsets do not cover the topic");
}
