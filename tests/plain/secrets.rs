//! Kafka secrets given through `properties` never show: not in the log (at debug
//! level, librdkafka's own lines included), errors, /metrics, /status, /readyz,
//! `eventgate status`, `check-config --print`, or the error for a configuration
//! file that does not parse. They are masked by key, so a short one does not mangle
//! the words that contain it.

use crate::support;

use support::config::Config;
use support::*;

const PASSWORD: &str = "pw-hunter2-SECRET";
const KEY_PASSWORD: &str = "keypw-SECRET-42";
const KEY_PEM: &str = "-----BEGIN PRIVATE KEY-----pem-SECRET-body";

fn assert_hidden(what: &str, text: &str) {
    for secret in [PASSWORD, KEY_PASSWORD, KEY_PEM, "pem-SECRET-body"] {
        assert!(!text.contains(secret), "{what} shows a secret:\n{text}");
    }
}

/// A Kafka forwarder whose broker, on `port`, refuses connections.
fn kafka_config(dir: &std::path::Path, port: u16, properties: &str) -> std::path::PathBuf {
    Config::new()
        .toml("[pipeline]\ndrain_timeout = \"1s\"\n")
        .forwarder(
            "kafka",
            "kafka",
            &format!(
                "brokers = \"127.0.0.1:{port}\"\ntopic = \"events\"\nmessage_timeout = \"500ms\"\n\
                 retry = {{ initial = \"50ms\", max = \"200ms\" }}\nproperties = {{ {properties} }}\n"
            ),
        )
        .write_to(&dir.join("kafka.toml"))
}

#[test]
fn secrets_appear_in_no_output() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = ClosedPort::new();
    let config = kafka_config(
        dir.path(),
        broker.port(),
        &format!(
            "\"security.protocol\" = \"SASL_PLAINTEXT\", \"sasl.mechanism\" = \"PLAIN\", \
             \"sasl.username\" = \"eventgate\", \"sasl.password\" = \"{PASSWORD}\", \
             \"debug\" = \"conf,security,broker\""
        ),
    );

    let out = eventgate()
        .args(["check-config", "--print"])
        .arg(&config)
        .output()
        .expect("check-config");
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        printed.contains("\"sasl.password\" = \"***\"") && printed.contains("sasl.username"),
        "{printed}"
    );
    assert_hidden("check-config --print", &printed);

    let mut gw = Gateway::start_in(
        dir,
        &["--config", path_str(&config), "--log-level", "debug"],
    );
    let admin = gw.admin_addr();
    let (ok, err) = publish_json(
        &gw.address(),
        "default",
        "/tasks/oom",
        "containerd.events.TaskOOM",
        r#"{"container_id":"c"}"#,
    );
    assert!(ok, "{err}");
    // Wait until the forwarder has failed an attempt, so error texts exist (shown
    // with ?verbose from the first one, ready or not: see admin.max_failing).
    let readyz = wait_for("the kafka forwarder to report a failure", DEADLINE, || {
        let (_, body) = http_get(admin, "/readyz?verbose");
        body.contains("forwarder kafka: retrying").then_some(body)
    });
    assert_hidden("/readyz", &readyz);
    let (_, status) = http_get(admin, "/status");
    assert!(status.contains("kafka"), "{status}");
    assert_hidden("/status", &status);
    let (_, metrics) = http_get(admin, "/metrics");
    assert_hidden("/metrics", &metrics);
    let out = eventgate()
        .args(["status", "--sample", "10ms", "--admin"])
        .arg(admin.to_string())
        .output()
        .expect("status");
    assert_hidden("eventgate status", &String::from_utf8_lossy(&out.stdout));
    gw.terminate();
    let log = gw.stderr_text();
    assert!(
        log.contains("librdkafka"),
        "librdkafka's lines are logged:\n{log}"
    );
    assert_hidden("the log", &log);
}

#[test]
fn secrets_stay_hidden_when_the_configuration_is_refused() {
    // librdkafka here is built without OpenSSL, so the SSL properties are refused
    // when the producer is made; its error texts quote values.
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = ClosedPort::new();
    let config = kafka_config(
        dir.path(),
        broker.port(),
        &format!(
            "\"security.protocol\" = \"SSL\", \"ssl.key.password\" = \"{KEY_PASSWORD}\", \
             \"ssl.key.pem\" = \"{KEY_PEM}\", \"sasl.password\" = \"{PASSWORD}\""
        ),
    );
    let out = eventgate()
        .args(["check-config", "--print"])
        .arg(&config)
        .output()
        .expect("check-config");
    assert_hidden(
        "check-config --print",
        &String::from_utf8_lossy(&out.stdout),
    );
    assert_hidden("check-config errors", &String::from_utf8_lossy(&out.stderr));

    let out = eventgate()
        .arg("serve")
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .args(["--config", path_str(&config), "--log-level", "debug"])
        .output()
        .expect("serve");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("ssl") || stderr.contains("SSL"), "{stderr}");
    assert_hidden("serve's start error", &stderr);
}

/// toml's own error text quotes the line it failed on; `check-config` and `serve`
/// name the line and key instead, with the secret masked.
#[test]
fn a_config_that_does_not_parse_does_not_echo_its_secrets() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = ClosedPort::new();
    let config = kafka_config(
        dir.path(),
        broker.port(),
        &format!("\"sasl.username\" = \"eventgate\", \"sasl.password\" = \"{PASSWORD}"),
    );
    let out = eventgate()
        .arg("check-config")
        .arg(&config)
        .output()
        .expect("check-config");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("line ") && stderr.contains("\"sasl.password\" = \"***\""),
        "the line is shown with the secret masked: {stderr}"
    );
    assert_hidden("check-config's parse error", &stderr);
    let out = eventgate()
        .arg("serve")
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .args(["--config", path_str(&config)])
        .output()
        .expect("serve");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert_hidden("serve's parse error", &stderr);
}

/// A one-character password used to be masked wherever its character appeared:
/// `p` turned librdkafka's `[thrd:app]` into `[thrd:a******]`.
#[test]
fn a_one_character_password_does_not_mangle_the_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = ClosedPort::new();
    let config = kafka_config(
        dir.path(),
        broker.port(),
        "\"security.protocol\" = \"SASL_PLAINTEXT\", \"sasl.mechanism\" = \"PLAIN\", \
         \"sasl.username\" = \"eventgate\", \"sasl.password\" = \"p\", \"debug\" = \"conf\"",
    );
    let mut gw = Gateway::start_in(
        dir,
        &["--config", path_str(&config), "--log-level", "debug"],
    );
    gw.terminate();
    let log = gw.stderr_text();
    assert!(
        log.contains("librdkafka: [thrd:app]") && log.contains("sasl_plaintext://"),
        "librdkafka's lines are logged whole:\n{log}"
    );
    assert!(!log.contains("***"), "nothing to mask was logged:\n{log}");
}
