//! The spool as a user meets it through the real binary: damaged spool files after a
//! crash, every intact event delivered to a tansu broker. A full spool under each policy:
//! tests/plain/spool.rs.

use crate::support;

use std::path::{Path, PathBuf};

use eventgate::proto::Registry;
use eventgate::proto::containerd::types::Envelope;
use prost::Message as _;
use rdkafka::message::Message;
use support::spooled::{stored, write_config};
use support::tansu::{Tansu, consume};
use support::*;

fn segments(data: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(data.join("spool/segments"))
        .expect("segments dir")
        .map(|e| e.expect("entry").path())
        .collect();
    files.sort();
    files
}

/// Byte offsets of the records in a segment file (`u32 len | u32 crc | body`).
fn record_offsets(bytes: &[u8]) -> Vec<usize> {
    let mut offsets = Vec::new();
    let mut at = 0;
    while at + 8 <= bytes.len() {
        offsets.push(at);
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        at += 8 + len;
    }
    offsets
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damaged_spool_files_are_reported_and_every_intact_event_delivered() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("eventgate.toml");
    // Kafka unreachable: its cursor stays at the start while the audit store keeps up.
    write_config(&config, "127.0.0.1:1", "");
    let mut gateway = Gateway::start_in(dir, &["--config", path_str(&config)]);
    let data = gateway.dir.path().join("data");
    let mut client = gateway.client().await;
    let ids: Vec<String> = (0..30).map(|n| format!("c{n}")).collect();
    for id in &ids {
        client.publish(exit_request(id)).await.expect("publish");
    }
    let db = data.join("audit.db");
    wait_for("the audit store to hold every event", DEADLINE, || {
        (stored(&db).len() == ids.len()).then_some(())
    });
    gateway.kill9();

    // A bit flip inside the 11th record, and a crash in the middle of the last one.
    let files = segments(&data);
    assert_eq!(files.len(), 1, "{files:?}");
    let mut bytes = std::fs::read(&files[0]).expect("segment");
    let offsets = record_offsets(&bytes);
    assert_eq!(offsets.len(), ids.len());
    bytes[offsets[10] + 40] ^= 0x10;
    bytes.truncate(offsets[29] + 13);
    std::fs::write(&files[0], &bytes).expect("damage the segment");

    let tansu = Tansu::start();
    write_config(&config, &tansu.brokers(), "");
    gateway.crash_restart();
    let mut log = String::new();
    wait_for("the gateway to report the damage", DEADLINE, || {
        log.push_str(&gateway.stderr_text());
        log.contains("corrupt").then_some(())
    });
    let quarantined = std::fs::read_dir(data.join("spool/corrupt"))
        .expect("corrupt dir")
        .count();
    assert!(quarantined >= 1, "the flipped record is kept aside");

    let expected: Vec<&String> = ids
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 10 && *i != 29)
        .map(|(_, id)| id)
        .collect();
    let messages = consume(&tansu.brokers(), "events", expected.len());
    let delivered: Vec<String> = messages
        .iter()
        .map(|m| Envelope::decode(m.payload().expect("value")).expect("an Envelope"))
        .map(|e| {
            Registry::global()
                .decode(e.event.as_ref().expect("payload"))
                .expect("decodes")
                .get_field_by_name("container_id")
                .and_then(|v| v.as_str().map(str::to_owned))
                .expect("container_id")
        })
        .collect();
    assert_eq!(
        delivered.iter().collect::<Vec<_>>(),
        expected,
        "every intact event, once, in order"
    );
    // The audit store had them all before the crash, and holds each once.
    assert_eq!(stored(&db).len(), ids.len());
    assert!(gateway.terminate().success(), "{}", gateway.stderr_text());
}
