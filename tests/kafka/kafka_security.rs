//! The `kafka` forwarder against secured endpoints, end to end: the real
//! `eventgate serve` produces through a TLS endpoint (stunnel, client certificates
//! required) and a SASL endpoint (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, over TLS and
//! not) in front of a tansu broker, and kafka-python reads what arrived through the
//! same endpoints. A wrong CA and a wrong password are refused by the endpoint and
//! named in /readyz, with the events kept for when the setting is fixed. A central
//! gateway's Kafka source reads through the SASL-over-TLS endpoint the same way.
//!
//! tansu's own TLS and SASL cannot serve here (its 0.6 TLS listener is not wired,
//! and its SASL keeps no users with in-memory storage), hence the fronts.

use crate::support;

use std::collections::BTreeSet;
use std::path::Path;

use support::config::Config;
use support::fronts::Front;
use support::pyconsumer::{PyMessage, Security, consume_with};
use support::tansu::Tansu;
use support::*;

const USER: &str = "eventgate";
const PASSWORD: &str = "s3cret-Kafka-pw";

/// One `[[forwarder]]` of kind `kafka` per (name, topic, security keys); quick
/// retries and not-ready from the first failed attempt, so a refusal shows at once;
/// a short drain at shutdown, since a refused forwarder's events cannot drain.
fn write_config(dir: &Path, brokers: &str, forwarders: &[(&str, &str, String)]) -> String {
    let config =
        Config::new().toml("[admin]\nmax_failing = \"0s\"\n\n[pipeline]\ndrain_timeout = \"1s\"\n");
    forwarders
        .iter()
        .fold(config, |config, (name, topic, extra)| {
            config.kafka(
                name,
                brokers,
                topic,
                1,
                &format!(
                    "message_timeout = \"3s\"\n\
                     retry = {{ timeout = \"5s\", initial = \"100ms\", max = \"500ms\" }}\n{extra}"
                ),
            )
        })
        .write(dir)
}

fn publish_exits(gateway: &Gateway, count: u32) {
    for pid in 0..count {
        let json = format!(r#"{{"container_id":"web","pid":{pid},"exit_status":1}}"#);
        let (ok, out) = publish_json(
            &gateway.address(),
            "default",
            "/tasks/exit",
            "containerd.events.TaskExit",
            &json,
        );
        assert!(ok, "publish: {out}");
    }
}

/// /readyz once it names `forwarder`, as a 503 body.
fn readyz_naming(gateway: &mut Gateway, forwarder: &str) -> String {
    let admin = gateway.admin_addr();
    let needle = format!("forwarder {forwarder}:");
    wait_for(&format!("/readyz to name {forwarder}"), DEADLINE, || {
        let (code, body) = http_get(admin, "/readyz");
        (code == 503 && body.contains(&needle)).then_some(body)
    })
}

/// The distinct event ids read.
fn event_ids(messages: &[PyMessage]) -> BTreeSet<String> {
    messages
        .iter()
        .map(|m| m.header("event_id").expect("an event_id header"))
        .collect()
}

fn backlog(gateway: &mut Gateway, forwarder: &str) -> Option<f64> {
    scrape(gateway).get(
        "eventgate_forwarder_backlog_events",
        &[("forwarder", forwarder)],
    )
}

/// TLS with a client certificate delivers, and kafka-python reads the events
/// through the same endpoint; a forwarder trusting another CA is refused by its own
/// certificate check, /readyz says so in librdkafka's words, and its events wait.
#[test]
fn tls_with_client_certificates_delivers_and_a_wrong_ca_is_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pki = certs::generate(dir.path(), "kafka");
    let other = certs::generate(dir.path(), "other");
    let front_port = free_port();
    let tansu = Tansu::behind(front_port);
    let _front = Front::stunnel(
        dir.path(),
        front_port,
        &tansu.brokers(),
        &pki.server_cert,
        &pki.server_key,
        &pki.ca,
    );
    let brokers = format!("127.0.0.1:{front_port}");
    let tls = |ca: &Path| {
        format!(
            "tls = {{ ca = \"{}\", cert = \"{}\", key = \"{}\" }}",
            path_str(ca),
            path_str(&pki.client_cert),
            path_str(&pki.client_key)
        )
    };
    let config = write_config(
        dir.path(),
        &brokers,
        &[
            ("tls", "tls-events", tls(&pki.ca)),
            ("wrong-ca", "tls-wrong-ca", tls(&other.ca)),
        ],
    );
    let gateway_dir = tempfile::tempdir().expect("tempdir");
    let mut gateway = Gateway::start_in(gateway_dir, &["--config", &config]);
    publish_exits(&gateway, 3);

    let security = Security {
        security_protocol: Some("SSL".into()),
        ssl_cafile: Some(pki.ca.clone()),
        ssl_certfile: Some(pki.client_cert.clone()),
        ssl_keyfile: Some(pki.client_key.clone()),
        ..Security::default()
    };
    let read = consume_with(&brokers, "tls-events", 3, &security);
    assert_eq!(event_ids(&read.messages).len(), 3, "every event, once");

    let body = readyz_naming(&mut gateway, "wrong-ca");
    // librdkafka words it "SSL handshake failed: ... certificate verify failed" or
    // "SSL routines::certificate verify failed (... in state SSL_HANDSHAKE)",
    // depending on when the handshake breaks; the cause is named either way.
    assert!(
        body.contains("certificate verify failed"),
        "the refusal is named: {body}"
    );
    assert!(
        !body.contains("forwarder tls:"),
        "the forwarder with the right CA is fine: {body}"
    );
    assert_eq!(backlog(&mut gateway, "wrong-ca"), Some(3.0), "nothing lost");
    assert!(gateway.terminate().success());
}

fn sasl(mechanism: &str, password_file: &Path) -> String {
    format!(
        "sasl = {{ mechanism = \"{mechanism}\", username = \"{USER}\", password_file = \"{}\" }}",
        path_str(password_file)
    )
}

/// Every user/password mechanism over TLS (`sasl_ssl`) against an endpoint that
/// checks them: each delivers, and kafka-python authenticating the same way reads
/// every event; a wrong password is refused by the endpoint, named in /readyz, and
/// its events wait.
#[test]
fn sasl_plain_and_scram_over_tls_deliver_and_a_wrong_password_is_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pki = certs::generate(dir.path(), "kafka");
    let password = dir.path().join("password");
    std::fs::write(&password, format!("{PASSWORD}\n")).expect("write");
    let wrong = dir.path().join("wrong-password");
    std::fs::write(&wrong, "not-the-password\n").expect("write");
    let front_port = free_port();
    let tansu = Tansu::behind(front_port);
    let mut front = Front::sasl(
        front_port,
        &tansu.brokers(),
        USER,
        &password,
        Some((&pki.server_cert, &pki.server_key)),
    );
    let brokers = front.address();
    let tls = format!("tls = {{ ca = \"{}\" }}", path_str(&pki.ca));
    let mechanisms = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"];
    let mut forwarders: Vec<(&str, &str, String)> = mechanisms
        .iter()
        .map(|m| (*m, *m, format!("{tls}\n{}", sasl(m, &password))))
        .collect();
    forwarders.push((
        "wrong-password",
        "wrong-password",
        format!("{tls}\n{}", sasl("SCRAM-SHA-512", &wrong)),
    ));
    let config = write_config(dir.path(), &brokers, &forwarders);
    let gateway_dir = tempfile::tempdir().expect("tempdir");
    let mut gateway = Gateway::start_in(gateway_dir, &["--config", &config]);
    publish_exits(&gateway, 2);

    for mechanism in mechanisms {
        let security = Security {
            security_protocol: Some("SASL_SSL".into()),
            ssl_cafile: Some(pki.ca.clone()),
            sasl_mechanism: Some(mechanism.into()),
            sasl_plain_username: Some(USER.into()),
            sasl_plain_password: Some(PASSWORD.into()),
            ..Security::default()
        };
        let read = consume_with(&brokers, mechanism, 2, &security);
        assert_eq!(
            event_ids(&read.messages).len(),
            2,
            "{mechanism}: every event, once"
        );
    }
    let body = readyz_naming(&mut gateway, "wrong-password");
    assert!(
        body.contains("SASL authentication error") && body.contains("invalid credentials"),
        "the refusal is named: {body}"
    );
    for mechanism in mechanisms {
        assert!(!body.contains(&format!("forwarder {mechanism}:")), "{body}");
    }
    assert_eq!(
        backlog(&mut gateway, "wrong-password"),
        Some(2.0),
        "nothing lost"
    );
    let (_, status) = http_get(gateway.admin_addr(), "/status");
    let (_, metrics) = http_get(gateway.admin_addr(), "/metrics");
    let logged = gateway.stderr_text();
    for text in [&body, &status, &metrics, &logged] {
        assert!(!text.contains(PASSWORD) && !text.contains("not-the-password"));
    }
    assert!(gateway.terminate().success());
    let log = front.log_text();
    for mechanism in mechanisms {
        assert!(
            log.contains(&format!("authenticated {USER} with {mechanism}")),
            "the endpoint saw {mechanism}: {log}"
        );
    }
}

/// SASL without TLS (`sasl_plaintext`) with SCRAM, the mechanism that keeps the
/// password off the wire, and zstd-compressed batches that a consumer in another
/// language decompresses.
#[test]
fn sasl_scram_over_plaintext_delivers_zstd_batches() {
    let dir = tempfile::tempdir().expect("tempdir");
    let password = dir.path().join("password");
    std::fs::write(&password, PASSWORD).expect("write");
    let front_port = free_port();
    let tansu = Tansu::behind(front_port);
    let _front = Front::sasl(front_port, &tansu.brokers(), USER, &password, None);
    let brokers = format!("127.0.0.1:{front_port}");
    let keys = format!(
        "{}\nproperties = {{ \"compression.type\" = \"zstd\" }}",
        sasl("SCRAM-SHA-256", &password)
    );
    let config = write_config(dir.path(), &brokers, &[("scram", "scram-zstd", keys)]);
    let gateway_dir = tempfile::tempdir().expect("tempdir");
    let mut gateway = Gateway::start_in(gateway_dir, &["--config", &config]);
    publish_exits(&gateway, 5);

    let security = Security {
        security_protocol: Some("SASL_PLAINTEXT".into()),
        sasl_mechanism: Some("SCRAM-SHA-256".into()),
        sasl_plain_username: Some(USER.into()),
        sasl_plain_password: Some(PASSWORD.into()),
        ..Security::default()
    };
    let read = consume_with(&brokers, "scram-zstd", 5, &security);
    assert_eq!(event_ids(&read.messages).len(), 5, "every event, once");
    assert!(
        !read.codecs.is_empty() && read.codecs.keys().all(|codec| codec == "zstd"),
        "every batch zstd-compressed: {:?}",
        read.codecs
    );
    assert!(gateway.terminate().success());
}

/// A central gateway's Kafka source reads through a SASL endpoint over TLS
/// (SCRAM-SHA-512, the CA checked) what a node gateway produced through the same
/// endpoint: every event, once, with the id it had on the node, its password never
/// shown; a source with the wrong password reads nothing and says why in its log.
#[test]
fn a_kafka_source_reads_through_sasl_over_tls() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pki = certs::generate(dir.path(), "kafka");
    let password = dir.path().join("password");
    std::fs::write(&password, format!("{PASSWORD}\n")).expect("write");
    let wrong = dir.path().join("wrong-password");
    std::fs::write(&wrong, "not-the-password\n").expect("write");
    let front_port = free_port();
    let tansu = Tansu::behind(front_port);
    let front = Front::sasl(
        front_port,
        &tansu.brokers(),
        USER,
        &password,
        Some((&pki.server_cert, &pki.server_key)),
    );
    let brokers = front.address();
    let tls = format!("tls = {{ ca = \"{}\" }}", path_str(&pki.ca));
    let node_config = write_config(
        dir.path(),
        &brokers,
        &[(
            "fleet",
            "fleet-secure",
            format!("{tls}\n{}", sasl("SCRAM-SHA-512", &password)),
        )],
    );
    // The node keeps its own audit store too, to compare ids with.
    let mut text = std::fs::read_to_string(&node_config).expect("read");
    text.push_str("[[forwarder]]\nname = \"audit\"\nkind = \"sqlite\"\npath = \"audit.db\"\n");
    std::fs::write(&node_config, text).expect("write");
    let node_dir = tempfile::tempdir().expect("tempdir");
    let node = Gateway::start_in(node_dir, &["--config", &node_config, "--node", "web-1"]);
    publish_exits(&node, 3);

    let central = |name: &str, password_file: &Path| {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("central.toml");
        std::fs::write(
            &config,
            format!(
                "[[source]]\nkind = \"kafka\"\nbrokers = \"{brokers}\"\ntopics = [\"fleet-secure\"]\n\
                 group = \"{name}\"\n{tls}\n{}\n",
                sasl("SCRAM-SHA-512", password_file)
            ),
        )
        .expect("write");
        let config = path_str(&config).to_owned();
        Gateway::start_in(dir, &["--config", &config])
    };
    let mut good = central("central", &password);
    let mut refused = central("refused", &wrong);
    let stored = |gateway: &Gateway| -> Vec<serde_json::Value> {
        let out = eventgate()
            .args(["query", "--data-dir"])
            .arg(gateway.dir.path().join("data"))
            .args(["--format", "json"])
            .output()
            .expect("query");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).expect("JSON"))
            .collect()
    };
    let rows = wait_for("the central to store the node's 3 events", DEADLINE, || {
        let rows = stored(&good);
        (rows.len() >= 3).then_some(rows)
    });
    let node_ids: BTreeSet<String> = wait_for("the node's own store", DEADLINE, || {
        let rows = stored(&node);
        (rows.len() == 3).then_some(rows)
    })
    .iter()
    .map(|r| r["id"].as_str().expect("id").to_owned())
    .collect();
    let central_ids: Vec<String> = rows
        .iter()
        .map(|r| r["id"].as_str().expect("id").to_owned())
        .collect();
    assert_eq!(central_ids.len(), 3, "once each: {rows:?}");
    assert_eq!(
        central_ids.iter().cloned().collect::<BTreeSet<_>>(),
        node_ids
    );
    assert!(rows.iter().all(|r| r["node"] == "web-1"), "{rows:?}");

    wait_for("the refused source to say why", DEADLINE, || {
        let log = refused.stderr_text();
        (log.contains("refused") && log.contains("SASL authentication error")).then_some(())
    });
    assert!(
        stored(&refused).is_empty(),
        "nothing read without the password"
    );
    for gateway in [&mut good, &mut refused] {
        let logged = gateway.stderr_text();
        assert!(!logged.contains(PASSWORD) && !logged.contains("not-the-password"));
    }
    assert!(good.terminate().success());
    assert!(refused.terminate().success());
}
