//! Parsing, defaults, validation messages and round trips of the config file.

use std::time::Duration;

use super::*;

#[test]
fn defaults_are_valid_and_socket_lives_in_data_dir() {
    let config = Config::parse("", "test").unwrap();
    assert_eq!(config, Config::default());
    assert_eq!(config.socket_path(), PathBuf::from("./data/eventgate.sock"));
    assert_eq!(config.socket_mode().unwrap(), 0o660);
    // What check-config prints parses back to the same thing.
    assert_eq!(
        Config::parse(&config.to_toml(&Kinds::default()), "round trip").unwrap(),
        config
    );
}

#[test]
fn keys_are_read() {
    let config = Config::parse(
        r#"
        data_dir = "/var/lib/eventgate"
        [exchange]
        socket = "/run/eventgate.sock"
        socket_mode = "0600"
        listen = "127.0.0.1:7338"
        subscriber_queue = 16
        shutdown_timeout = "250ms"
        [spool]
        fsync = "always"
        segment_bytes = "8MiB"
        max_bytes = "64MiB"
        full = "drop_oldest"
        block_timeout = "1s"
        min_free = "5%"
        "#,
        "test",
    )
    .unwrap();
    assert_eq!(config.socket_path(), PathBuf::from("/run/eventgate.sock"));
    assert_eq!(config.socket_mode().unwrap(), 0o600);
    assert_eq!(config.exchange.subscriber_queue, 16);
    assert_eq!(config.exchange.shutdown_timeout, Duration::from_millis(250));
    use crate::spool::{Fsync, FullPolicy};
    let spool = &config.spool;
    assert_eq!(
        (spool.fsync, spool.full),
        (Fsync::Always, FullPolicy::DropOldest)
    );
    assert_eq!(
        (spool.segment_bytes.0, spool.max_bytes.0),
        (8 << 20, 64 << 20)
    );
    assert_eq!(spool.block_timeout, Duration::from_secs(1));
    assert_eq!(spool.min_free, crate::spool::MinFree::Percent(5.0));
}

#[test]
fn the_dead_letter_store_lives_in_data_dir_unless_absolute() {
    let config = Config::parse("data_dir = \"/var/lib/eg\"", "test").unwrap();
    assert_eq!(
        config.dead_letter_path(),
        PathBuf::from("/var/lib/eg/deadletters.db")
    );
    assert_eq!(config.dead_letter.poll_interval, Duration::from_secs(1));
    let config = Config::parse(
        "data_dir = \"/var/lib/eg\"\n[dead_letter]\npath = \"/srv/dl.db\"\npoll_interval = \"250ms\"",
        "test",
    )
    .unwrap();
    assert_eq!(config.dead_letter_path(), PathBuf::from("/srv/dl.db"));
    assert_eq!(config.dead_letter.poll_interval, Duration::from_millis(250));
    assert_eq!(
        Config::parse(&config.to_toml(&Kinds::default()), "round trip").unwrap(),
        config
    );
}

#[test]
fn bad_keys_are_named() {
    let cases = [
        ("[exchange]\nsubscriber_queu = 3", "subscriber_queu"),
        (
            "[exchange]\nsubscriber_queue = 0",
            "exchange.subscriber_queue",
        ),
        ("[exchange]\nsubscriber_queue = \"x\"", "subscriber_queue"),
        ("[exchange]\nsocket_mode = \"rw\"", "exchange.socket_mode"),
        ("[exchange]\nlisten = \"0.0.0.0:1\"", "exchange.listen"),
        ("[exchange]\nlisten = \"nonsense\"", "listen"),
        (
            "[exchange]\nshutdown_timeout = \"soon\"",
            "shutdown_timeout",
        ),
        ("data_dir = \"\"", "data_dir"),
        ("[spool]\nfsync = \"sometimes\"", "sometimes"),
        ("[spool]\nfull = \"spill\"", "spill"),
        ("[spool]\nmax_bytes = \"1MiB\"", "spool.max_bytes"),
        ("[spool]\nsegment_bytes = 10", "spool.segment_bytes"),
        ("[spool]\nblock_timeout = \"0s\"", "spool.block_timeout"),
        ("[spool]\nsegment_size = 10", "segment_size"),
        ("[spool]\nmin_free = \"100%\"", "spool.min_free"),
        ("[spool]\nmin_free = \"plenty\"", "plenty"),
        ("[exchnage]", "exchnage"),
        ("[dead_letter]\npath = \"\"", "dead_letter.path"),
        (
            "[dead_letter]\npoll_interval = \"0s\"",
            "dead_letter.poll_interval",
        ),
        ("[dead_letter]\npoll_interval = \"often\"", "poll_interval"),
        ("[dead_letter]\npat = \"x.db\"", "pat"),
    ];
    for (text, key) in cases {
        let message = Config::parse(text, "test").unwrap_err().to_string();
        assert!(message.contains(key), "{text:?} -> {message}");
    }
}

#[test]
fn forwarders_default_to_file_and_sqlite_and_can_be_turned_off() {
    let config = Config::parse("", "test").unwrap();
    let kinds: Vec<_> = config.forwarders.iter().map(|f| f.kind.as_str()).collect();
    assert_eq!(kinds, ["file", "sqlite"]);
    assert!(
        Config::parse("forwarder = []", "test")
            .unwrap()
            .forwarders
            .is_empty()
    );
}

#[test]
fn forwarder_tables_split_pipeline_keys_from_kind_options() {
    let config = Config::parse(
        r#"
        [[forwarder]]
        name = "k"
        kind = "kafka"
        brokers = "127.0.0.1:9092"
        filters = ['topic=="/tasks/exit"']
        queue = { events = 10, bytes = "1MiB", overflow = "drop_oldest" }
        batch = { events = 5, linger = "20ms" }
        retry = { initial = "50ms", max = "2s", attempts = 7, elapsed = "1m" }
        "#,
        "test",
    )
    .unwrap();
    let spec = &config.forwarders[0];
    assert_eq!((spec.name.as_str(), spec.kind.as_str()), ("k", "kafka"));
    assert_eq!(
        spec.options.get("brokers").and_then(|v| v.as_str()),
        Some("127.0.0.1:9092")
    );
    assert_eq!(spec.options.len(), 1);
    assert_eq!(spec.queue.events, 10);
    assert_eq!(spec.queue.bytes.0, 1 << 20);
    assert_eq!(
        spec.queue.overflow,
        crate::pipeline::settings::Overflow::DropOldest
    );
    assert_eq!(spec.batch.events, 5);
    assert_eq!(spec.batch.linger, Duration::from_millis(20));
    assert_eq!(spec.retry.attempts, 7);
    assert_eq!(spec.retry.elapsed, Duration::from_secs(60));
    // What check-config prints parses back to the same thing.
    assert_eq!(
        Config::parse(&config.to_toml(&Kinds::default()), "round trip").unwrap(),
        config
    );
}

#[test]
fn bad_forwarder_keys_are_named() {
    let table = |body: &str| format!("[[forwarder]]\nname = \"f\"\nkind = \"file\"\n{body}");
    let cases = [
        (table("queue = { event = 3 }"), "event"),
        (table("queue = { overflow = \"sideways\" }"), "sideways"),
        (table("queue = { events = 0 }"), "queue.events"),
        (table("batch = { bytes = \"12 parsecs\" }"), "parsecs"),
        (
            table("retry = { initial = \"1s\", max = \"10ms\" }"),
            "retry.max",
        ),
        (table("retry = { timeout = \"0s\" }"), "retry.timeout"),
        (table("filters = ['topic==\"unterminated']"), "filters"),
        ("[[forwarder]]\nkind = \"file\"".into(), "name"),
        ("[[forwarder]]\nname = \"x\"".into(), "kind"),
        (
            "[[forwarder]]\nname = \"a b\"\nkind = \"file\"".into(),
            "name",
        ),
        (format!("{}\n{}", table(""), table("")), "unique"),
    ];
    for (text, key) in cases {
        let message = Config::parse(&text, "test").unwrap_err().to_string();
        assert!(message.contains(key), "{text:?} -> {message}");
    }
}

#[test]
fn upstream_tables_are_read_and_checked() {
    let config = Config::parse(
        r#"
        [[upstream]]
        address = "/run/containerd/containerd.sock"
        [[upstream]]
        name = "k3s"
        address = "unix:///run/k3s/containerd/containerd.sock"
        filters = ['topic~="^/tasks/"']
        reconnect = { initial = "50ms", max = "5s", stable = "1s" }
        connect_timeout = "2s"
        "#,
        "test",
    )
    .unwrap();
    let names: Vec<_> = config
        .upstreams
        .iter()
        .map(|u| u.effective_name())
        .collect();
    assert_eq!(names, ["containerd", "k3s"]);
    let k3s = &config.upstreams[1];
    assert_eq!(k3s.reconnect.max, Duration::from_secs(5));
    assert_eq!(k3s.connect_timeout, Duration::from_secs(2));
    assert_eq!(
        Config::parse(&config.to_toml(&Kinds::default()), "round trip").unwrap(),
        config
    );

    let table = |body: &str| format!("[[upstream]]\n{body}");
    let cases = [
        (table("name = \"x\""), "address"),
        (table("address = \"/a.sock\"\nfilter = []"), "filter"),
        (
            table("address = \"/a.sock\"\nfilters = ['topic==']"),
            "filters",
        ),
        (
            table("address = \"/a.sock\"\nreconnect = { initial = \"0s\" }"),
            "reconnect.initial",
        ),
        (
            format!(
                "{}\n{}",
                table("address = \"/a/c.sock\""),
                table("address = \"/b/c.sock\"")
            ),
            "unique",
        ),
    ];
    for (text, key) in cases {
        let message = Config::parse(&text, "test").unwrap_err().to_string();
        assert!(message.contains(key), "{text:?} -> {message}");
    }
}

#[test]
fn unknown_kinds_are_named_with_the_known_ones() {
    let config = Config::parse("[[forwarder]]\nname = \"x\"\nkind = \"s3\"", "test").unwrap();
    let message = config
        .check_kinds(&Kinds::default())
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("\"s3\"") && message.contains("kafka"),
        "{message}"
    );
}

/// toml's own error text quotes the offending line; a secret on it (or quoted by
/// the message) must not show, while the line, column and key still do.
#[test]
fn parse_errors_never_echo_a_secret_value() {
    let kafka =
        "[[forwarder]]\nname = \"k\"\nkind = \"kafka\"\nbrokers = \"b:9092\"\ntopic = \"t\"\n";
    let cases = [
        // Unterminated string.
        format!("{kafka}[forwarder.properties]\n\"sasl.password\" = \"hunter2-SECRET\n"),
        // A bad escape inside the secret.
        format!("{kafka}[forwarder.properties]\n\"sasl.password\" = \"hunter2\\q-SECRET\"\n"),
        // An unterminated inline table holding it.
        format!("{kafka}properties = {{ \"sasl.password\" = \"hunter2-SECRET\", \n"),
        // The same key twice: the error is on the second one.
        format!(
            "{kafka}[forwarder.properties]\n\"sasl.password\" = \"hunter2-SECRET\"\n\
             \"sasl.password\" = \"hunter2-SECRET\"\n"
        ),
        // A type error elsewhere, quoting a value the file also assigns to a secret.
        format!(
            "{kafka}[forwarder.properties]\n\"sasl.password\" = \"hunter2-SECRET\"\n\
             [exchange]\nsubscriber_queue = \"hunter2-SECRET\"\n"
        ),
    ];
    for text in &cases {
        let message = Config::parse(text, "in test.toml").unwrap_err().to_string();
        assert!(!message.contains("hunter2"), "{text}\n-> {message}");
        assert!(message.contains("line "), "{message}");
    }
    let message = Config::parse(&cases[0], "in test.toml")
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("line 7, column")
            && message.contains("`forwarder.properties.sasl.password`")
            && message.contains("\"sasl.password\" = \"***\""),
        "{message}"
    );
}

/// humantime takes durations far beyond what a clock can add; they are refused
/// with the key named, never a panic later.
#[test]
fn very_large_durations_are_refused_naming_the_key() {
    for (text, key) in [
        (
            "[exchange]\nshutdown_timeout = \"1000000000y\"",
            "`exchange.shutdown_timeout`",
        ),
        (
            "[exchange.limits]\nrequest_timeout = \"1000000000y\"",
            "`exchange.limits.request_timeout`",
        ),
        (
            "[pipeline]\ndrain_timeout = \"1000000000y\"",
            "`pipeline.drain_timeout`",
        ),
        (
            "[[forwarder]]\nname = \"a\"\nkind = \"file\"\npath = \"a\"\n\
             retry = { initial = \"1000000000y\" }",
            "`retry`",
        ),
    ] {
        let message = Config::parse(text, "test").unwrap_err().to_string();
        assert!(
            message.contains(key) && message.contains("more than 100 years"),
            "{text:?} -> {message}"
        );
    }
    assert_eq!(
        crate::units::parse_duration("101y").unwrap_err(),
        "\"101y\" is more than 100 years, the longest duration eventgate takes"
    );
    assert!(crate::units::parse_duration("100y").is_ok());
}

#[test]
fn a_source_keeping_its_offsets_names_a_postgres_forwarder() {
    let postgres = r#"
[[forwarder]]
name = "central"
kind = "postgres"
url = "postgres://eventgate@db/history"
tls = "disable"

[[forwarder]]
name = "audit"
kind = "sqlite"
"#;
    let source = |extra: &str| {
        format!(
            "{postgres}\n[[source]]\nkind = \"kafka\"\nbrokers = \"k:9092\"\ntopics = [\"fleet\"]\n{extra}"
        )
    };
    let config = Config::parse(&source("offsets = \"central\""), "test").unwrap();
    config
        .check_kinds(&crate::forward::Kinds::default())
        .unwrap();
    let cases = [
        (
            source("offsets = \"nowhere\""),
            "not configured (postgres forwarders: central)",
        ),
        (source("offsets = \"audit\""), "of kind \"sqlite\""),
        (source("offsets = \"\""), "must name a `postgres` forwarder"),
        (
            source("offsets = \"central\"\nstart = \"latest\""),
            "cannot go with `offsets`",
        ),
    ];
    for (text, expected) in cases {
        let message = format!(
            "{:#}",
            anyhow::Error::from(Config::parse(&text, "test").unwrap_err())
        );
        assert!(message.contains(expected), "{text:?} -> {message}");
    }
}

#[test]
fn bad_postgres_forwarder_keys_are_named() {
    let table =
        |body: &str| format!("[[forwarder]]\nname = \"central\"\nkind = \"postgres\"\n{body}");
    let cases = [
        (table(""), "url"),
        (
            table("url = \"postgres://u:pw@db/h\""),
            "must not hold the password",
        ),
        (
            table("url = \"postgres://u@db/h\"\nurl_typo = 1"),
            "unknown key `url_typo`",
        ),
        (
            table("url = \"postgres://u@db/h\"\ntls = \"prefer\""),
            "prefer",
        ),
        (
            table("url = \"postgres://u@db/h\"\npartition = \"week\""),
            "week",
        ),
        (
            table(
                "url = \"postgres://u@db/h\"\ntls = \"disable\"\nretention = { max_age = \"10m\" }",
            ),
            "at least 1h",
        ),
        (
            table("url = \"postgres://u@db/h\"\npassword_file = \"/a\"\npassword_env = \"B\""),
            "not both",
        ),
        (
            table("url = \"postgres://u@db/h\"\nconnections = 0"),
            "`connections` must be 1 to 8, not 0",
        ),
        (
            table("url = \"postgres://u@db/h\"\nconnections = 9"),
            "`connections` must be 1 to 8, not 9",
        ),
        (
            table("url = \"postgres://u@db/h\"\nconnections = -1"),
            "connections",
        ),
    ];
    for (text, expected) in cases {
        let config = Config::parse(&text, "test").unwrap();
        let message = config
            .check_kinds(&crate::forward::Kinds::default())
            .unwrap_err()
            .to_string();
        assert!(message.contains(expected), "{text:?} -> {message}");
    }
}
