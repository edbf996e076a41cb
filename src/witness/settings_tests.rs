//! The witness's file: the example in deploy/ holds and documents every key with
//! the defaults the code applies; unknown keys and unusable values are refused
//! naming the key.

use super::*;

const EXAMPLE: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/deploy/witness.example.toml"
));

const LOG_KEY: &str =
    "audit.example.com/web-1+6ede5fc0+AX5mZcLSCG0bYiq9qa4J1Rn7Rj2rRYTZ94XxDkj++h0s";
const OTHER_KEY: &str =
    "audit.example.com/web-1-2026+3f8d4acf+AQOzzoRy1N1gD/9BCn8yXjwwy9iZxdKuMQlRL4aIH59X";

fn parse(text: &str) -> Result<Vec<Log>, WitnessConfigError> {
    WitnessSettings::parse(text, "in test.toml")?.validate("in test.toml")
}

/// The example with every commented-out assignment and table header made live.
fn uncommented(text: &str) -> String {
    let assignment = regex::Regex::new(r"^# (\[\[log\]\]|[a-z_]+ = .*)$").unwrap();
    text.lines()
        .map(|line| match assignment.captures(line) {
            Some(live) => live[1].to_owned(),
            None => line.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_example_is_valid_and_states_the_defaults_the_code_applies() {
    let settings = WitnessSettings::parse(EXAMPLE, "example").unwrap();
    let logs = settings.validate("example").unwrap();
    assert_eq!(logs.len(), 1);
    assert_eq!(logs[0].keys.len(), 1);
    assert_eq!(settings.listen, default_listen());
    assert_eq!(settings.data_dir, default_data_dir());
    assert_eq!(settings.listen.to_string(), "127.0.0.1:7380");

    // What is commented out is real keys with the defaults' values: made live, it
    // parses (no unknown key) to the same listener and directory, and adds the
    // rotation's key and the second log.
    let live = uncommented(EXAMPLE);
    assert_ne!(live, EXAMPLE, "the example comments out its defaults");
    let explicit = WitnessSettings::parse(&live, "example, uncommented").unwrap();
    assert_eq!(explicit.listen, settings.listen);
    assert_eq!(explicit.data_dir, settings.data_dir);
    let logs = explicit.validate("example, uncommented").unwrap();
    assert_eq!(logs.len(), 2);
    assert_eq!(logs[0].keys.len(), 2);
    for key in ["listen", "key", "data_dir", "[[log]]", "origin", "keys"] {
        assert!(
            EXAMPLE.contains(&format!("\n{key}")) || EXAMPLE.contains(&format!("\n# {key}")),
            "deploy/witness.example.toml does not document `{key}`"
        );
    }
}

#[test]
fn unknown_keys_are_refused_by_name() {
    let base = format!("key = \"w.key\"\n[[log]]\norigin = \"o\"\nkey = \"{LOG_KEY}\"\n");
    assert!(parse(&base).is_ok());
    for (text, name) in [
        (format!("lisen = \"127.0.0.1:1\"\n{base}"), "lisen"),
        (format!("{base}orgin = \"p\"\n"), "orgin"),
        (format!("{base}[metrics]\n"), "metrics"),
    ] {
        let error = parse(&text).unwrap_err().to_string();
        assert!(error.contains(name), "{text}: {error}");
    }
}

#[test]
fn every_unusable_value_is_refused_naming_its_key() {
    let log = |body: &str| format!("key = \"w.key\"\n[[log]]\n{body}\n");
    let signer = crate::note::Signer::generate("audit.example.com/web-1").unwrap();
    let witness = crate::tlog::cosignature::Cosigner::generate("w.example/w1")
        .unwrap()
        .witness_key();
    let cases = [
        (
            "listen = \"localhost\"\n".to_owned()
                + &log(&format!("origin = \"o\"\nkey = \"{LOG_KEY}\"")),
            "listen",
            "socket address",
        ),
        (
            format!("[[log]]\norigin = \"o\"\nkey = \"{LOG_KEY}\"\n"),
            "key",
            "missing field `key`",
        ),
        (
            format!("key = \"\"\n[[log]]\norigin = \"o\"\nkey = \"{LOG_KEY}\"\n"),
            "`key`",
            "witness keygen",
        ),
        (
            format!(
                "data_dir = \"\"\n{}",
                log(&format!("origin = \"o\"\nkey = \"{LOG_KEY}\""))
            ),
            "`data_dir`",
            "empty",
        ),
        ("key = \"w.key\"\n".to_owned(), "`log`", "no table"),
        (
            log(&format!("key = \"{LOG_KEY}\"")),
            "origin",
            "missing field `origin`",
        ),
        (
            log(&format!("origin = \"\"\nkey = \"{LOG_KEY}\"")),
            "`log[0].origin`",
            "empty",
        ),
        (
            log(&format!("origin = \"a\\nb\"\nkey = \"{LOG_KEY}\"")),
            "`log[0].origin`",
            "control character",
        ),
        (log("origin = \"o\""), "`log[0]`", "no `key`"),
        (log("origin = \"o\"\nkeys = []"), "`log[0]`", "no `key`"),
        (
            log("origin = \"o\"\nkey = \"nonsense\""),
            "`log[0].key`",
            "NAME+KEY_ID+KEY",
        ),
        (
            log(&format!(
                "origin = \"o\"\nkeys = [\"{LOG_KEY}\", \"x+1+2\"]"
            )),
            "`log[0].keys[1]`",
            "8 hex digits",
        ),
        (
            log(&format!("origin = \"o\"\nkey = \"{}\"", witness.to_text())),
            "`log[0].key`",
            "signature type 0x04",
        ),
        (
            log(&format!(
                "origin = \"o\"\nkey = \"{LOG_KEY}\"\nkeys = [\"{LOG_KEY}\"]"
            )),
            "`log[0].keys[0]`",
            "given twice",
        ),
        (
            format!(
                "{}[[log]]\norigin = \"o\"\nkey = \"{OTHER_KEY}\"\n",
                log(&format!("origin = \"o\"\nkey = \"{LOG_KEY}\""))
            ),
            "`log[1].origin`",
            "also log[0]'s",
        ),
    ];
    for (text, key, problem) in cases {
        let error = parse(&text).unwrap_err().to_string();
        assert!(
            error.contains(key) && error.contains(problem),
            "{text}\n=> {error}\n(expected {key} and {problem})"
        );
    }

    // A signer key pasted as the log's key is refused without being quoted.
    let secret = signer.to_text();
    let error = parse(&log(&format!("origin = \"o\"\nkey = \"{secret}\"")))
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("`log[0].key`") && error.contains("signer key"),
        "{error}"
    );
    assert!(!error.contains(&secret[20..]), "{error}");

    // Both forms together, and a rotation's keys, are one log's keys.
    let logs = parse(&log(&format!(
        "origin = \"o\"\nkey = \"{LOG_KEY}\"\nkeys = [\"{OTHER_KEY}\"]"
    )))
    .unwrap();
    assert_eq!(logs[0].keys.len(), 2);
}
