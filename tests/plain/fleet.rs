//! A fleet's configuration: `check-config` refuses a bad `[[source]]`, naming it and
//! the key. The fleet itself, through a real broker: tests/kafka/fleet.rs.

use crate::support;

use support::*;

// ---------------------------------------------------------------- the fleet

// ---------------------------------------------------------------- reading stores

// ---------------------------------------------------------------- tests

/// A bad `[[source]]` is refused by check-config (and serve), naming the source and
/// the key: its `instance_id` (or the default one, made of the node name) included.
#[test]
fn check_config_refuses_a_bad_source_naming_it_and_the_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("eventgate.toml");
    let cases = [
        (
            "[[source]]\nname = \"fleet\"\nkind = \"kafka\"\nbrokers = \"127.0.0.1:9092\"\ntopics = []\n",
            ["source \"fleet\"", "`topics`"],
        ),
        (
            "[[source]]\nname = \"fleet\"\nkind = \"nope\"\nbrokers = \"127.0.0.1:9092\"\ntopics = [\"t\"]\n",
            ["source \"fleet\"", "`kind` \"nope\""],
        ),
        (
            "[[source]]\nkind = \"kafka\"\nbrokers = \"127.0.0.1:9092\"\ntopics = [\"t\"]\nstart = \"middle\"\n",
            ["source \"kafka\"", "middle"],
        ),
        (
            "[[source]]\nname = \"fleet\"\nkind = \"kafka\"\nbrokers = \"127.0.0.1:9092\"\ntopics = [\"t\"]\ninstance_id = \"a b\"\n",
            ["source \"fleet\"", "`instance_id` \"a b\" contains ' '"],
        ),
        // The default instance id is made of the node name, which may hold what a
        // group.instance.id may not.
        (
            "node = \"web:1\"\n[[source]]\nkind = \"kafka\"\nbrokers = \"127.0.0.1:9092\"\ntopics = [\"t\"]\n",
            [
                "source \"kafka\"",
                "the default `instance_id` \"web:1-kafka\" (the node name \"web:1\"",
            ],
        ),
    ];
    for (config, wanted) in cases {
        std::fs::write(&path, config).expect("write config");
        for command in [vec!["check-config"], vec!["serve", "--config"]] {
            let data = dir.path().join("data");
            let out = eventgate()
                .args(&command)
                .arg(&path)
                .args(if command[0] == "serve" {
                    vec!["--data-dir", path_str(&data)]
                } else {
                    vec![]
                })
                .stdin(std::process::Stdio::null())
                .output()
                .expect("run eventgate");
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{command:?} accepted {config}");
            for w in wanted {
                assert!(err.contains(w), "{command:?} on {config}: {err}");
            }
        }
    }
}
