//! Consuming with kafka-python (`tests/support/consume.py`): a client that shares no
//! code with eventgate or librdkafka, as a consumer in another language would.
//! `tests/run.sh` installs kafka-python.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use base64::Engine as _;
use serde::Deserialize;

use super::DEADLINE;

/// kafka-python's connection security settings, each passed only when set.
#[derive(Clone, Debug, Default)]
pub struct Security {
    pub security_protocol: Option<String>,
    pub ssl_cafile: Option<PathBuf>,
    /// A client certificate and key, for endpoints that require one.
    pub ssl_certfile: Option<PathBuf>,
    pub ssl_keyfile: Option<PathBuf>,
    pub sasl_mechanism: Option<String>,
    pub sasl_plain_username: Option<String>,
    pub sasl_plain_password: Option<String>,
}

/// One message as kafka-python read it.
#[derive(Clone, Debug)]
pub struct PyMessage {
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    /// In the order the message holds them.
    pub headers: Vec<(String, Option<Vec<u8>>)>,
    pub value: Option<Vec<u8>>,
}

impl PyMessage {
    /// The first header `name`, as text.
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .and_then(|(_, value)| value.as_deref())
            .map(|v| String::from_utf8(v.to_vec()).expect("a UTF-8 header value"))
    }

    pub fn key_text(&self) -> Option<String> {
        self.key
            .as_deref()
            .map(|k| String::from_utf8(k.to_vec()).expect("a UTF-8 key"))
    }

    /// The value parsed as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(self.value.as_deref().expect("a value")).expect("a JSON value")
    }
}

/// What one run of consume.py read.
#[derive(Clone, Debug)]
pub struct Consumed {
    pub messages: Vec<PyMessage>,
    /// Record batches read, by compression codec ("none", "gzip", "zstd", ...).
    pub codecs: BTreeMap<String, usize>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Output {
    Message(Line),
    Summary { codecs: BTreeMap<String, usize> },
}

#[derive(Deserialize)]
struct Line {
    partition: i32,
    offset: i64,
    key: Option<String>,
    headers: Vec<(String, Option<String>)>,
    value: Option<String>,
}

fn bytes(text: Option<String>) -> Option<Vec<u8>> {
    text.map(|t| {
        base64::engine::general_purpose::STANDARD
            .decode(t)
            .expect("base64 from consume.py")
    })
}

/// Every message of `topic` from the beginning, once at least `count` arrived and
/// every partition was read to its end; in (partition, offset) order.
pub fn consume(brokers: &str, topic: &str, count: usize) -> Vec<PyMessage> {
    consume_with(brokers, topic, count, &Security::default()).messages
}

pub fn consume_with(brokers: &str, topic: &str, count: usize, security: &Security) -> Consumed {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/consume.py");
    let mut cmd = Command::new("python3");
    cmd.arg(script)
        .args(["--bootstrap", brokers, "--topic", topic])
        .args(["--count", &count.to_string()])
        .args(["--deadline", &DEADLINE.as_secs().to_string()]);
    let text = [
        ("--security-protocol", &security.security_protocol),
        ("--sasl-mechanism", &security.sasl_mechanism),
        ("--sasl-plain-username", &security.sasl_plain_username),
        ("--sasl-plain-password", &security.sasl_plain_password),
    ];
    for (flag, value) in text {
        if let Some(value) = value {
            cmd.args([flag, value]);
        }
    }
    let files = [
        ("--ssl-cafile", &security.ssl_cafile),
        ("--ssl-certfile", &security.ssl_certfile),
        ("--ssl-keyfile", &security.ssl_keyfile),
    ];
    for (flag, file) in files {
        if let Some(file) = file {
            cmd.arg(flag).arg(file);
        }
    }
    let out = cmd
        .output()
        .expect("run python3 (tests/run.sh installs kafka-python)");
    assert!(
        out.status.success(),
        "consume.py on {topic} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let mut consumed = Consumed {
        messages: Vec::new(),
        codecs: BTreeMap::new(),
    };
    for line in String::from_utf8(out.stdout).expect("UTF-8 output").lines() {
        match serde_json::from_str(line).expect("one JSON line per message, then a summary") {
            Output::Message(line) => consumed.messages.push(PyMessage {
                partition: line.partition,
                offset: line.offset,
                key: bytes(line.key),
                headers: line
                    .headers
                    .into_iter()
                    .map(|(k, v)| (k, bytes(v)))
                    .collect(),
                value: bytes(line.value),
            }),
            Output::Summary { codecs } => consumed.codecs = codecs,
        }
    }
    consumed
}
