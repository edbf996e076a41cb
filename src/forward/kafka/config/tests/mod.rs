mod docs;

use super::*;

fn options(text: &str) -> Result<KafkaOptions, BuildError> {
    KafkaOptions::parse(&toml::from_str(text).unwrap())
}

#[test]
fn typed_keys_win_over_properties() {
    let o = options(
        r#"
        brokers = ["a:9092", "b:9092"]
        topic = "events"
        message_timeout = "7s"
        properties = { "linger.ms" = 5, "acks" = "1", "metadata.broker.list" = "x:1", "delivery.timeout.ms" = "9" }
        "#,
    )
    .unwrap();
    let config = o.client_config("k");
    assert_eq!(config.get("bootstrap.servers"), Some("a:9092,b:9092"));
    assert_eq!(config.get("metadata.broker.list"), None);
    assert_eq!(config.get("acks"), Some("all"));
    assert_eq!(config.get("enable.idempotence"), Some("true"));
    assert_eq!(config.get("message.timeout.ms"), Some("7000"));
    assert_eq!(config.get("delivery.timeout.ms"), None);
    assert_eq!(config.get("linger.ms"), Some("5"));
    assert_eq!(config.get("client.id"), Some("eventgate-k"));

    let alias = options(
        r#"
        brokers = ["a:9092"]
        topic = "events"
        properties = { "queue.buffering.max.ms" = 20 }
        "#,
    )
    .unwrap()
    .client_config("k");
    assert_eq!(alias.get("linger.ms"), None);
    assert_eq!(alias.get("queue.buffering.max.ms"), Some("20"));
    let plain = options("brokers = [\"a:9092\"]\ntopic = \"events\"")
        .unwrap()
        .client_config("k");
    assert_eq!(plain.get("linger.ms"), Some("0"));
}

#[test]
fn bad_options_are_named() {
    let err = |text: &str| options(text).unwrap_err().to_string();
    assert!(err(r#"topic = "t""#).contains("brokers"));
    assert!(err(r#"brokers = "a:1""#).contains("topic"));
    assert!(
        err(r#"brokers = "a:1"
topic = "t"
acks = 1"#)
        .contains("idempotence = false")
    );
    assert!(
        err(r#"brokers = "a:1"
topic = "t"
acks = "some""#)
        .contains("acks")
    );
    assert!(
        err(r#"brokers = "a:1"
topic = "t"
colour = "red""#)
        .contains("colour")
    );
    assert!(
        err(r#"brokers = "a:1"
topic = "bad topic""#)
        .contains("bad topic")
    );
    assert!(
        err(r#"brokers = "a:1"
topic = "t"
partitions = 0"#)
        .contains("partitions")
    );
    assert!(
        options(
            r#"brokers = "a:1"
topic = "t"
acks = 0
idempotence = false"#
        )
        .is_ok()
    );
}
