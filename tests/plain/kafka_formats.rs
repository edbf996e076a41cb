//! The refusal of bad values of the `kafka` forwarder's format, key and node options by
//! `check-config` and `serve`. Read back from a real broker: tests/kafka/kafka_formats.rs.

use crate::support;

use std::process::Stdio;

use support::*;

/// A bad value of each new key is refused by `check-config` and by `serve`, naming
/// the key (and, for the enumerations, every allowed value), before any broker is
/// contacted.
#[test]
fn check_config_names_bad_format_key_node_and_topic_values() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("bad.toml");
    let long_literal = "a".repeat(249);
    let cases: [(String, &[&str]); 5] = [
        (
            "value_format = \"cloudevents\"".into(),
            &[
                "`value_format`",
                "protobuf",
                "json",
                "cloudevents_binary",
                "cloudevents_structured",
            ],
        ),
        (
            "key = \"container\"".into(),
            &["`key`", "object", "namespace", "topic", "event_id", "none"],
        ),
        ("node = \"  \"".into(), &["`node`", "empty"]),
        ("node = 7".into(), &["`node`"]),
        (
            format!("topic = \"{long_literal}{{namespace}}\""),
            &["`topic`", "no room"],
        ),
    ];
    for (line, expected) in cases {
        let topic = if line.starts_with("topic") {
            String::new()
        } else {
            "topic = \"events\"\n".into()
        };
        std::fs::write(
            &path,
            format!(
                "[[forwarder]]\nname = \"k\"\nkind = \"kafka\"\nbrokers = \"127.0.0.1:1\"\n{topic}{line}\n"
            ),
        )
        .expect("write");
        for command in ["check-config", "serve --config"] {
            let data = dir.path().join("data");
            let mut cmd = eventgate();
            cmd.args(command.split(' ')).arg(&path).stdin(Stdio::null());
            if command.starts_with("serve") {
                cmd.arg("--data-dir").arg(&data);
            }
            let out = cmd.output().expect("run eventgate");
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{command} accepted {line}");
            for word in expected {
                assert!(
                    err.contains(word),
                    "{command} {line}: {word} missing in {err}"
                );
            }
            assert!(!err.contains("panicked"), "{err}");
        }
    }
}
