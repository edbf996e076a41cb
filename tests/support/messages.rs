//! Kafka messages as the kafka forwarder's tests read them back (from tansu or from
//! librdkafka's mock cluster): headers, keys, per-key order.

use std::collections::BTreeMap;

use eventgate::proto::Registry;
use rdkafka::message::{Headers, Message, OwnedMessage};

/// A `TaskExit` payload of `container` with `pid`.
pub fn task_exit(container: &str, pid: u32) -> prost_types::Any {
    Registry::global()
        .encode_json(
            "containerd.events.TaskExit",
            &format!(r#"{{"container_id":"{container}","pid":{pid}}}"#),
        )
        .expect("encode")
}

/// The value of the message's header `name`, as text.
pub fn header(message: &OwnedMessage, name: &str) -> Option<String> {
    let headers = message.headers()?;
    headers
        .iter()
        .find(|h| h.key == name)
        .and_then(|h| h.value)
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

/// The message's key, as text.
pub fn key(message: &OwnedMessage) -> String {
    String::from_utf8_lossy(message.key().unwrap_or_default()).into_owned()
}

/// For each key, the values of `field` in the order Kafka holds them.
pub fn per_key(
    messages: &[OwnedMessage],
    field: impl Fn(&OwnedMessage) -> u64,
) -> BTreeMap<String, Vec<u64>> {
    let mut out: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for m in messages {
        out.entry(key(m)).or_default().push(field(m));
    }
    out
}
