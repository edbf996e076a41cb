//! Checkpoints through the real binary: forwarders write without waiting for the
//! disk, and their spool cursors never get ahead of what the sink made durable.
//! The gateway is SIGKILLed with lines past the file's last checkpoint (a process
//! crash keeps them), and again after the file was cut to what was synced plus a torn
//! line (a power loss keeps only that); after each restart the log holds every event
//! exactly once, in order, and so does the SQLite store.

use crate::support;

use std::collections::HashMap;
use std::fs;
use std::io::Write;
use std::path::Path;

use rusqlite::{Connection, OpenFlags};
use support::*;

/// Both default forwarders, with checkpoints only at shutdown or when much has been
/// sent: what a test sends after a start stays past the last checkpoint.
const CONFIG: &str = r#"
[[forwarder]]
name = "log"
kind = "file"
path = "events.jsonl"
checkpoint = { interval = "1h", bytes = "1GiB" }

[[forwarder]]
name = "audit"
kind = "sqlite"
path = "audit.db"
checkpoint = { interval = "1h", bytes = "1GiB" }
"#;

async fn publish(gw: &Gateway, ids: std::ops::Range<u32>) {
    let mut client = gw.client().await;
    for n in ids {
        client
            .publish(exit_request(&format!("c{n}")))
            .await
            .expect("publish");
    }
}

fn ids(range: std::ops::Range<u32>) -> Vec<String> {
    range.map(|n| format!("c{n}")).collect()
}

/// `key value...` lines of the file forwarder's checkpoint record.
fn record(data: &Path) -> HashMap<String, u64> {
    let text = fs::read_to_string(data.join("checkpoints/log.file")).expect("checkpoint record");
    text.lines()
        .filter_map(|line| {
            let (key, value) = line.split_once(' ')?;
            Some((key.to_owned(), value.split(' ').next()?.parse().ok()?))
        })
        .collect()
}

/// The spool cursors as last persisted.
fn cursors(data: &Path) -> HashMap<String, u64> {
    let text = fs::read_to_string(data.join("spool/cursors")).expect("cursors");
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let (name, seq) = line.split_once(' ')?;
            Some((name.to_owned(), seq.parse().ok()?))
        })
        .collect()
}

/// Exit rows per container id in the audit store, and the store's checkpoint.
fn audit(data: &Path) -> (HashMap<String, i64>, Option<u64>) {
    let conn = Connection::open_with_flags(data.join("audit.db"), OpenFlags::SQLITE_OPEN_READ_ONLY)
        .expect("open audit.db");
    let mut stmt = conn
        .prepare("SELECT json_extract(event, '$.container_id'), count(*) FROM events WHERE topic = '/tasks/exit' GROUP BY 1")
        .expect("prepare");
    let rows = stmt
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
        .expect("query")
        .map(|row| row.expect("row"))
        .collect();
    let next = conn
        .query_row(
            "SELECT next_seq FROM checkpoints WHERE forwarder = 'audit'",
            [],
            |row| row.get::<_, i64>(0),
        )
        .ok()
        .map(|n| n as u64);
    (rows, next)
}

/// At the moment of a crash: no cursor past what its sink recorded as durable.
fn assert_cursors_behind_the_sinks(data: &Path) {
    let cursors = cursors(data);
    let log = record(data)["next"];
    assert!(
        cursors["log"] <= log,
        "log cursor {} ahead of its checkpoint {log}",
        cursors["log"]
    );
    let (_, audit) = audit(data);
    let audit = audit.expect("the audit store's checkpoint");
    assert!(
        cursors["audit"] <= audit,
        "audit cursor {} ahead of its checkpoint {audit}",
        cursors["audit"]
    );
}

fn wait_logged(gw: &mut Gateway, path: &Path, expected: &[String]) {
    let deadline = std::time::Instant::now() + DEADLINE;
    loop {
        let found = logged_exits(path);
        if found == expected {
            return;
        }
        if std::time::Instant::now() > deadline {
            panic!(
                "the log does not hold every event once:\n{found:?}\nexpected {expected:?}\n{}",
                gw.stderr_text()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashes_and_a_power_loss_image_leave_every_event_in_the_log_exactly_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("eventgate.toml");
    fs::write(&config, CONFIG).expect("config");
    let mut gw = Gateway::start_in(dir, &["--config", path_str(&config)]);
    let data = gw.dir.path().join("data");
    let log = data.join("events.jsonl");

    // A: checkpointed by a clean stop.
    publish(&gw, 0..30).await;
    wait_logged(&mut gw, &log, &ids(0..30));
    assert!(gw.restart().success(), "{}", gw.stderr_text());
    let checkpointed = record(&data)["len"];
    assert_eq!(checkpointed, fs::metadata(&log).expect("log").len());

    // B: written, not checkpointed; a crash keeps the lines.
    publish(&gw, 30..60).await;
    wait_logged(&mut gw, &log, &ids(0..60));
    assert!(fs::metadata(&log).expect("log").len() > checkpointed);
    assert_cursors_behind_the_sinks(&data);
    gw.crash_restart();
    wait_logged(&mut gw, &log, &ids(0..60));

    // C: a power loss keeps only what was synced, and a torn line after it.
    publish(&gw, 60..90).await;
    wait_logged(&mut gw, &log, &ids(0..90));
    assert_cursors_behind_the_sinks(&data);
    gw.kill9();
    let synced = record(&data)["len"];
    let file = fs::OpenOptions::new().append(true).open(&log).expect("log");
    file.set_len(synced).expect("truncate");
    (&file)
        .write_all(br#"{"timestamp":"2024-05-01T10:00"#)
        .expect("torn line");
    drop(file);
    gw.respawn();
    wait_logged(&mut gw, &log, &ids(0..90));

    let rows = wait_for("the audit store to hold every event", DEADLINE, || {
        let (rows, _) = audit(&data);
        (rows.len() == 90).then_some(rows)
    });
    let doubled: Vec<_> = rows.iter().filter(|(_, n)| **n > 1).collect();
    assert!(doubled.is_empty(), "stored more than once: {doubled:?}");
    assert!(gw.terminate().success(), "{}", gw.stderr_text());
    // A clean stop checkpoints everything: the log's record covers the whole file.
    assert_eq!(record(&data)["len"], fs::metadata(&log).expect("log").len());
    assert_eq!(logged_exits(&log), ids(0..90));
}
