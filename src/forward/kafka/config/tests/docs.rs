//! The defaults the example config and docs/forwarders.md state for the `kafka`
//! forwarder are the ones the code applies: each documented value, set explicitly,
//! parses to the same options as leaving the key out.

use crate::forward::kafka::config::*;

const EXAMPLE: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/deploy/eventgate.example.toml"
));
const DOCS: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/forwarders.md"));

/// Keys with a plain default value (not required, not machine-dependent, not a table).
const DEFAULTED: [&str; 8] = [
    "create_topic",
    "partitions",
    "replication_factor",
    "acks",
    "idempotence",
    "value_format",
    "key",
    "message_timeout",
];

const REQUIRED: &str = "brokers = \"b:9092\"\ntopic = \"events\"\n";

fn parse(text: &str) -> KafkaOptions {
    let table = toml::from_str(text).unwrap_or_else(|e| panic!("{text}: {e}"));
    KafkaOptions::parse(&table).unwrap_or_else(|e| panic!("{text}: {e}"))
}

/// What the defaults come to, as text that changes when any of them does.
fn settled(options: &KafkaOptions) -> String {
    format!(
        "{} {} {} {:?} {} {:?} {:?} {:?}",
        options.create_topic,
        options.partitions,
        options.replication_factor,
        options.acks,
        options.idempotence,
        options.value_format,
        options.key,
        options.message_timeout
    )
}

fn assert_documented(source: &str, documented: &[(String, String)]) {
    let named: Vec<&str> = documented.iter().map(|(key, _)| key.as_str()).collect();
    for key in DEFAULTED {
        assert!(
            named.contains(&key),
            "{source} states no default for `{key}`"
        );
    }
    let explicit: String = documented
        .iter()
        .map(|(key, value)| format!("{key} = {value}\n"))
        .collect();
    assert_eq!(
        settled(&parse(&format!("{REQUIRED}{explicit}"))),
        settled(&parse(REQUIRED)),
        "{source} states defaults the code does not apply:\n{explicit}"
    );
}

#[test]
fn the_example_config_states_the_defaults_the_code_applies() {
    let block = EXAMPLE
        .split("# --- kafka")
        .nth(1)
        .and_then(|rest| rest.split("\n# ---").next())
        .expect("the example config's kafka section");
    let documented: Vec<(String, String)> = block
        .lines()
        .filter_map(|line| line.strip_prefix("# "))
        .filter_map(|line| line.split_once(" = "))
        .filter(|(key, _)| DEFAULTED.contains(&key.trim()))
        .map(|(key, rest)| {
            let value = rest.split("  #").next().unwrap_or(rest);
            (key.trim().to_owned(), value.trim().to_owned())
        })
        .collect();
    assert_documented("deploy/eventgate.example.toml", &documented);
}

#[test]
fn the_forwarders_doc_states_the_defaults_the_code_applies() {
    let section = DOCS
        .split("## `kafka` forwarder")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("docs/forwarders.md's kafka section");
    let mut documented = Vec::new();
    for row in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = row.split(" | ").collect();
        let keys = cells[0].trim_start_matches("| ").split(", ");
        let values = cells[1].split(", ");
        for (key, value) in keys.zip(values) {
            let key = key.trim_matches('`');
            if DEFAULTED.contains(&key) {
                documented.push((key.to_owned(), value.trim_matches('`').to_owned()));
            }
        }
    }
    assert_documented("docs/forwarders.md", &documented);
}
