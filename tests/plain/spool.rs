//! The spool as a user meets it through the real binary: a full spool under each
//! policy. A Kafka forwarder whose brokers cannot be reached holds its records in the
//! spool (unreachable brokers only warn at start). Damaged spool files:
//! tests/kafka/spool.rs.

use crate::support;

use std::path::Path;

use rusqlite::{Connection, OpenFlags};
use support::config::Config;
use support::*;

fn write_config(path: &Path, brokers: &str, spool: &str) {
    Config::new()
        // The Kafka forwarder cannot deliver; its events are safe in the spool, so there
        // is nothing to wait for at shutdown.
        .toml("[pipeline]\ndrain_timeout = \"1s\"\n")
        .toml(&format!("\n[spool]\n{spool}\n"))
        .sqlite("audit", "audit.db", "")
        .kafka("kafka", brokers, "events", 1, "")
        .write_to(path);
}

/// (topic, container_id or forwarder) of every stored row, in storage order.
fn stored(db: &Path) -> Vec<(String, String)> {
    let Ok(conn) = Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY) else {
        return Vec::new();
    };
    let Ok(mut statement) = conn.prepare(
        "SELECT topic, coalesce(json_extract(event, '$.container_id'), json_extract(event, '$.forwarder'), '')
         FROM events ORDER BY row_id",
    ) else {
        return Vec::new();
    };
    statement
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .expect("query")
        .collect::<Result<_, _>>()
        .unwrap_or_default()
}

const SMALL_SPOOL: &str = r#"segment_bytes = "4KiB"
max_bytes = "12KiB"
block_timeout = "300ms""#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_spool_under_block_refuses_with_resource_exhausted_and_keeps_serving() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("eventgate.toml");
    write_config(
        &config,
        "127.0.0.1:1",
        &format!("{SMALL_SPOOL}\nfull = \"block\""),
    );
    let mut gateway = Gateway::start_in(dir, &["--config", path_str(&config)]);
    let mut client = gateway.client().await;
    let mut accepted = Vec::new();
    let refusal = loop {
        let id = format!("c{}", accepted.len());
        match client.publish(exit_request(&id)).await {
            Ok(_) => accepted.push(id),
            Err(status) => break status,
        }
        assert!(accepted.len() < 10_000, "the spool never filled up");
    };
    assert_eq!(
        refusal.code(),
        tonic::Code::ResourceExhausted,
        "{refusal:?}"
    );
    assert!(
        refusal.message().contains("spool is full"),
        "{}",
        refusal.message()
    );
    // Nothing accepted was lost, and the gateway still answers (subscribers, other
    // calls): a second refusal comes after the same wait, not a hang.
    let db = gateway.dir.path().join("data/audit.db");
    wait_for(
        "the audit store to hold every accepted event",
        DEADLINE,
        || (stored(&db).len() == accepted.len()).then_some(()),
    );
    let again = client.publish(exit_request("late")).await.unwrap_err();
    assert_eq!(again.code(), tonic::Code::ResourceExhausted);
    assert!(gateway.terminate().success(), "{}", gateway.stderr_text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_spool_under_drop_oldest_keeps_accepting_and_records_the_loss() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("eventgate.toml");
    write_config(
        &config,
        "127.0.0.1:1",
        &format!("{SMALL_SPOOL}\nfull = \"drop_oldest\""),
    );
    let mut gateway = Gateway::start_in(dir, &["--config", path_str(&config)]);
    let mut client = gateway.client().await;
    for n in 0..400 {
        client
            .publish(exit_request(&format!("c{n}")))
            .await
            .expect("drop_oldest never refuses");
    }
    let db = gateway.dir.path().join("data/audit.db");
    // Only the forwarder that had not delivered them lost anything: the audit store
    // gets every event, and a marker says where the Kafka record has a hole.
    let rows = wait_for(
        "every event and a drop marker in the audit store",
        DEADLINE,
        || {
            let rows = stored(&db);
            let exits = rows
                .iter()
                .filter(|(topic, _)| topic == "/tasks/exit")
                .count();
            let marked = rows.iter().any(|(topic, forwarder)| {
                topic == "/eventgate/spool/dropped" && forwarder == "kafka"
            });
            (exits == 400 && marked).then_some(rows)
        },
    );
    assert!(
        rows.iter()
            .filter(|(topic, _)| topic == "/eventgate/spool/dropped")
            .all(|(_, forwarder)| forwarder == "kafka")
    );
    assert!(gateway.terminate().success(), "{}", gateway.stderr_text());
}
