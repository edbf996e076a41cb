//! Signed checkpoints leave the host as they are made: a real `eventgate serve` with
//! `[signing]` stores events, signs checkpoints of its audit store's chain head, and
//! ships them through the file forwarder and the Kafka forwarder (a real tansu broker,
//! read back with kafka-python). What each carries verifies against the store with
//! `audit verify --key --checkpoints`, and `audit head` prints the newest note.

use crate::support;

use std::path::Path;

use serde_json::Value;
use support::pyconsumer;
use support::tansu::Tansu;
use support::*;

const TOPIC: &str = "/eventgate/audit/checkpoint";

/// `audit keygen NAME --out DIR/NAME.key`: the verifier key it prints.
fn keygen(dir: &Path, name: &str) -> (String, String) {
    let key = dir.join(format!("{name}.key"));
    let verifier = eventgate_stdout(&["audit", "keygen", name, "--out", path_str(&key)]);
    (path_str(&key).to_owned(), verifier.trim().to_owned())
}

fn checkpoints(lines: &[Value]) -> Vec<&Value> {
    lines.iter().filter(|l| l["topic"] == TOPIC).collect()
}

#[test]
fn checkpoints_are_shipped_by_every_forwarder_and_verify_the_store() {
    let tansu = Tansu::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let (key, verifier) = keygen(dir.path(), "node-7");
    let config = dir.path().join("eventgate.toml");
    std::fs::write(
        &config,
        format!(
            "node = \"node-7\"\n\
             [signing]\nkey = \"{key}\"\ninterval = \"1s\"\nevery_rows = 50\n\n\
             [[forwarder]]\nname = \"log\"\nkind = \"file\"\npath = \"events.jsonl\"\n\n\
             [[forwarder]]\nname = \"audit\"\nkind = \"sqlite\"\npath = \"audit.db\"\n\n\
             [[forwarder]]\nname = \"ship\"\nkind = \"kafka\"\nbrokers = \"{}\"\n\
             topic = \"audit-checkpoints\"\ncreate_topic = true\npartitions = 1\n\
             replication_factor = 1\nvalue_format = \"json\"\n\
             filters = ['topic==\"{TOPIC}\"']\n",
            tansu.brokers()
        ),
    )
    .expect("write config");
    let mut gateway = Gateway::start_in(dir, &["--config", path_str(&config)]);
    for n in 0..120 {
        let (ok, err) = publish_json(
            &gateway.address(),
            "default",
            "/tasks/exit",
            "containerd.events.TaskExit",
            &format!("{{\"container_id\":\"c{n}\",\"exit_status\":{}}}", n % 3),
        );
        assert!(ok, "{err}");
    }
    // Checkpoints every second and every 50 rows: several, the later ones covering
    // every event published.
    let lines = wait_for("three checkpoints in the file", DEADLINE, || {
        let lines = gateway.logged();
        (checkpoints(&lines).len() >= 3).then_some(lines)
    });
    let shipped = checkpoints(&lines);
    for line in &shipped {
        let event = &line["event"];
        assert_eq!(line["namespace"], "eventgate", "{line}");
        assert_eq!(event["node"], "node-7", "{line}");
        assert_eq!(event["forwarder"], "audit", "{line}");
        let note = event["note"].as_str().expect("a note");
        // A C2SP tlog-checkpoint: the origin binds node and store.
        let origin = format!(
            "node-7/eventgate/{}\n",
            event["store"].as_str().unwrap_or_default()
        );
        assert!(note.starts_with(&origin), "{note}");
        assert!(
            note.contains("\neventgate audit checkpoint v2\nnode node-7\n"),
            "{note}"
        );
        assert!(note.contains("\n\n\u{2014} node-7 "), "{note}");
    }
    // Each names the one before it.
    for pair in shipped.windows(2) {
        assert!(
            !pair[1]["event"]["prev"]
                .as_str()
                .unwrap_or_default()
                .is_empty()
        );
    }
    assert!(gateway.terminate().success(), "{}", gateway.stderr_text());

    let data = gateway.dir.path().join("data");
    let db = data.join("audit.db");
    let log = data.join("events.jsonl");
    let verify = |checkpoints: &Path| {
        eventgate()
            .args(["audit", "verify", "--db", path_str(&db), "--key", &verifier])
            .arg("--checkpoints")
            .arg(checkpoints)
            .output()
            .expect("run audit verify")
    };
    let out = verify(&log);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.contains("intact"), "{said}");

    // The Kafka topic holds them too, off the host: the same notes verify.
    let all = checkpoints(&gateway.logged()).len();
    let messages = pyconsumer::consume(&tansu.brokers(), "audit-checkpoints", all);
    assert_eq!(messages.len(), all, "one message per checkpoint");
    let from_kafka = gateway.dir.path().join("from-kafka.jsonl");
    let text: String = messages.iter().map(|m| format!("{}\n", m.json())).collect();
    std::fs::write(&from_kafka, text).expect("write");
    let out = verify(&from_kafka);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // `audit head` prints the newest note, the last one the stop signed.
    let head = eventgate_stdout(&["audit", "head", "--db", path_str(&db)]);
    let newest = checkpoints(&gateway.logged())
        .last()
        .and_then(|l| l["event"]["note"].as_str().map(str::to_owned))
        .expect("a note");
    assert!(head.contains(&newest), "{head}\nnewest:\n{newest}");
}
