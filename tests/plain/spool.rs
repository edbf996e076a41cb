//! The spool as a user meets it through the real binary: a full spool under each
//! policy. A Kafka forwarder whose brokers cannot be reached holds its records in the
//! spool (unreachable brokers only warn at start). Damaged spool files:
//! tests/kafka/spool.rs.

use crate::support;

use support::config::Config;
use support::spooled::{stored, write_config};
use support::*;

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

/// A reserve above 0 but small enough for one SQLite checkpoint to use up is
/// accepted with a warning, by `check-config` and by `serve` alike; the default
/// reserve and a reserve turned off draw none.
#[test]
fn a_reserve_one_sqlite_checkpoint_can_use_up_is_warned_about() {
    let dir = tempfile::tempdir().expect("tempdir");
    let check = |min_free: &str| {
        let config = Config::new()
            .toml(&format!(
                "data_dir = \"{}\"\n[spool]\nmin_free = \"{min_free}\"\n",
                dir.path().join("data").display()
            ))
            .write(dir.path());
        let out = eventgate()
            .args(["check-config", &config])
            .output()
            .expect("check-config");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let warned = check("1MiB");
    assert!(
        warned.contains(
            "warning: `spool.min_free` (1MiB) is below 16.0MiB: the sinks on the same file system write in bursts"
        ),
        "{warned}"
    );
    assert_eq!(check("256MiB"), "");
    assert_eq!(check("0"), "");

    let mut gw = Gateway::start(&["--spool-min-free", "1MiB"]);
    let log = gw.stderr_text();
    assert!(
        log.contains("`spool.min_free` (1MiB) is below 16.0MiB"),
        "{log}"
    );
    assert!(gw.terminate().success());
}
