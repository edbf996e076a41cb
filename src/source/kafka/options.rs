//! The options of a `kafka` source and the librdkafka consumer configuration made
//! from them.

use std::time::Duration;

use rdkafka::ClientConfig;
use serde::{Deserialize, Deserializer};

use crate::forward::kafka::{self, Brokers, Properties, SECURITY_OWNED, Sasl, Security, Tls};
use crate::forward::{BuildError, Options, parse_options};

/// `[[source]]` keys of kind `kafka`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SourceOptions {
    /// `"host:port,host:port"` or a list of `host:port`.
    pub(crate) brokers: Brokers,
    /// Topic names; one starting with `^` is a regular expression (librdkafka's
    /// pattern subscription).
    pub(crate) topics: Vec<String>,
    /// The consumer group: gateways in one group share the topics' partitions.
    #[serde(default = "default_group")]
    pub(crate) group: String,
    /// The consumer's static identity in its group (KIP-345's `group.instance.id`):
    /// by default the node name and the source name, so a restarted gateway takes
    /// its place (and its partitions) back at once; `false` for none.
    #[serde(default)]
    pub(crate) instance_id: InstanceId,
    /// How message values are read; `auto` tells each message's format by its
    /// headers and first byte.
    #[serde(default)]
    pub(crate) value_format: Format,
    /// Where a group without committed offsets starts: `earliest` (everything the
    /// topic still holds) or `latest`.
    #[serde(default)]
    pub(crate) start: Start,
    /// The `postgres` forwarder whose database keeps the group's offsets, in each
    /// batch's own transaction (docs/fleet.md); none: librdkafka commits them to the
    /// group once the events are in the spool.
    #[serde(default)]
    pub(crate) offsets: Option<String>,
    pub(crate) tls: Option<Tls>,
    pub(crate) sasl: Option<Sasl>,
    #[serde(default)]
    pub(crate) properties: Properties,
    #[serde(skip)]
    pub(crate) security: Security,
}

fn default_group() -> String {
    "eventgate".into()
}

/// `instance_id`: a string, `true` (the default, derived from the node name) or
/// `false` (dynamic membership: each start joins as a new member).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) enum InstanceId {
    #[default]
    Derived,
    Off,
    Named(String),
}

impl<'de> Deserialize<'de> for InstanceId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = InstanceId;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str(
                    "`instance_id`: a group.instance.id (a string), true (the node name and the source name) or false (no static membership)",
                )
            }
            fn visit_bool<E: serde::de::Error>(self, on: bool) -> Result<InstanceId, E> {
                Ok(if on {
                    InstanceId::Derived
                } else {
                    InstanceId::Off
                })
            }
            fn visit_str<E: serde::de::Error>(self, id: &str) -> Result<InstanceId, E> {
                Ok(InstanceId::Named(id.to_owned()))
            }
        }
        d.deserialize_any(Visitor)
    }
}

/// The longest `group.instance.id` Kafka accepts.
const MAX_INSTANCE_ID: usize = 249;

/// Why `id` is not a `group.instance.id` Kafka accepts (its rule for topic names:
/// Java clients refuse anything else before they connect).
fn instance_id_problem(id: &str) -> Option<String> {
    if id.is_empty() {
        return Some("is empty".into());
    }
    if id == "." || id == ".." {
        return Some("cannot be \".\" or \"..\"".into());
    }
    let length = id.chars().count();
    if length > MAX_INSTANCE_ID {
        return Some(format!(
            "is {length} characters long; at most {MAX_INSTANCE_ID} are allowed"
        ));
    }
    let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    id.chars()
        .find(|c| !legal(*c))
        .map(|c| format!("contains {c:?}; only a-z A-Z 0-9 . _ - are allowed"))
}

/// librdkafka's `session.timeout.ms` when the properties do not set it.
pub(crate) const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(45);

/// The source's `fetch.wait.max.ms` unless `properties` set one (librdkafka's is
/// 500). Kafka answers a fetch as soon as there is data, and holds one this long
/// only when there is none: an idle source then asks ten times a second instead
/// of twice. tansu 0.6.0 holds fetches that have data too, and with 500 ms a
/// source read at about a sixth of the broker's pace there (docs/fleet.md).
pub(crate) const DEFAULT_FETCH_WAIT_MS: &str = "100";

/// `value_format`: every format the `kafka` forwarder writes, or `auto`.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Format {
    #[default]
    Auto,
    Protobuf,
    Json,
    CloudeventsBinary,
    CloudeventsStructured,
}

#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Start {
    #[default]
    Earliest,
    Latest,
}

/// The librdkafka properties the typed keys own (a passthrough `properties` entry
/// for one is ignored, with a warning), and why each is fixed.
const OWNED: &[(&str, &str)] = &[
    ("brokers", "bootstrap.servers"),
    ("brokers", "metadata.broker.list"),
    ("group", "group.id"),
    ("instance_id", "group.instance.id"),
    ("start", "auto.offset.reset"),
    // Offsets are stored only once events are durable here: librdkafka must not
    // store them on its own when it hands a message over.
    ("(at least once)", "enable.auto.offset.store"),
];

impl SourceOptions {
    pub(crate) fn parse(options: &Options) -> Result<Self, BuildError> {
        let mut parsed: SourceOptions = parse_options(options)?;
        parsed.validate()?;
        parsed.security = Security::resolve(parsed.tls.as_ref(), parsed.sasl.as_ref())?;
        Ok(parsed)
    }

    fn validate(&self) -> Result<(), BuildError> {
        let bad = |message: String| Err(BuildError::Options(message));
        if self.brokers.joined().is_empty() {
            return bad("`brokers` must name at least one host:port".into());
        }
        if self.topics.is_empty() {
            return bad("`topics` must name at least one topic".into());
        }
        for topic in &self.topics {
            let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
            if topic.starts_with('^') {
                if let Err(error) = regex::Regex::new(topic) {
                    return bad(format!(
                        "`topics`: {topic:?} is not a valid pattern: {error}"
                    ));
                }
            } else if topic.is_empty() || topic.len() > 249 || !topic.chars().all(legal) {
                return bad(format!(
                    "`topics`: {topic:?} is not a Kafka topic name (1 to 249 of a-z A-Z 0-9 . _ -; start a pattern with ^)"
                ));
            }
        }
        if self.group.trim().is_empty() {
            return bad("`group` must not be empty".into());
        }
        if let Some(store) = &self.offsets {
            if store.trim().is_empty() {
                return bad(
                    "`offsets` must name a `postgres` forwarder (or be left out: the group's commits)"
                        .into(),
                );
            }
            if self.start == Start::Latest {
                return bad(
                    "`start = \"latest\"` cannot go with `offsets`: a partition the store has no offset for is read from its beginning, so that what one gateway read but did not store is read again by the next"
                        .into(),
                );
            }
        }
        for (key, _) in self.properties.iter() {
            if key.trim().is_empty() {
                return bad("`properties` has an empty property name".into());
            }
        }
        Ok(())
    }

    /// The consumer's `group.instance.id` for source `source` on node `node`, or
    /// `None` with `instance_id = false`; an id Kafka would refuse is named.
    pub(crate) fn group_instance_id(
        &self,
        source: &str,
        node: &str,
    ) -> Result<Option<String>, BuildError> {
        let bad = |message: String| Err(BuildError::Options(message));
        match &self.instance_id {
            InstanceId::Off => Ok(None),
            InstanceId::Named(id) => match instance_id_problem(id) {
                None => Ok(Some(id.clone())),
                Some(problem) => bad(format!(
                    "`instance_id` {id:?} {problem} (it is the consumer's group.instance.id)"
                )),
            },
            InstanceId::Derived => {
                let id = format!("{node}-{source}");
                match instance_id_problem(&id) {
                    None => Ok(Some(id)),
                    Some(problem) => bad(format!(
                        "the default `instance_id` {id:?} (the node name {node:?}, '-', the source name) {problem}: set `instance_id` to a group.instance.id of your own, or `instance_id = false` to join as a new member at each start"
                    )),
                }
            }
        }
    }

    /// The group's session timeout as this consumer asks for it: how long the
    /// broker waits for a silent member before it gives its partitions to others.
    pub(crate) fn session_timeout(&self) -> Duration {
        self.properties
            .iter()
            .find(|(key, _)| *key == "session.timeout.ms")
            .and_then(|(_, value)| value.trim().parse::<u64>().ok())
            .map_or(DEFAULT_SESSION_TIMEOUT, Duration::from_millis)
    }

    /// The consumer's configuration: passthrough properties first, then the typed
    /// keys over them; `instance` is what `group_instance_id` made.
    pub(crate) fn client_config(&self, source: &str, instance: Option<&str>) -> ClientConfig {
        let mut config = ClientConfig::new();
        config.set("client.id", format!("eventgate-source-{source}"));
        config.set("fetch.wait.max.ms", DEFAULT_FETCH_WAIT_MS);
        for (key, value) in self.properties.iter() {
            let owner = OWNED
                .iter()
                .find(|(_, property)| *property == key)
                .map(|(typed, _)| *typed)
                .or_else(|| {
                    (self.security.is_set() && SECURITY_OWNED.contains(&key)).then_some("tls/sasl")
                });
            if let Some(typed) = owner {
                tracing::warn!(source, property = %key, typed_key = typed, "kafka property overridden by the source's typed key");
                continue;
            }
            config.set(key, value);
        }
        for (key, value) in &self.security.properties {
            config.set(*key, value);
        }
        // librdkafka's `debug` contexts log at debug level, which the client drops
        // unless asked for: asking for them means wanting to see them.
        if self.properties.iter().any(|(key, _)| key == "debug") {
            config.set_log_level(rdkafka::config::RDKafkaLogLevel::Debug);
        }
        config.set("bootstrap.servers", self.brokers.joined());
        config.set("group.id", self.group.trim());
        if let Some(instance) = instance {
            config.set("group.instance.id", instance);
        }
        config.set("enable.auto.offset.store", "false");
        config.set(
            "auto.offset.reset",
            match self.start {
                Start::Earliest => "earliest",
                Start::Latest => "latest",
            },
        );
        config
    }

    /// Builds the real librdkafka consumer without connecting, so that everything
    /// librdkafka would refuse at `serve` is refused by `check-config` too.
    pub(crate) fn probe(&self, source: &str, node: &str) -> Result<(), BuildError> {
        let instance = self.group_instance_id(source, node)?;
        kafka::probe::<rdkafka::consumer::BaseConsumer>(
            self.client_config(source, instance.as_deref()),
            |error| self.describe(error),
        )
    }

    /// A librdkafka error made safe to show.
    pub(crate) fn describe(&self, error: &rdkafka::error::KafkaError) -> String {
        kafka::describe(&self.properties, &self.security, error)
    }

    pub(crate) fn secrets(&self) -> Vec<String> {
        kafka::secrets(&self.properties, &self.security)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(text: &str) -> Result<SourceOptions, BuildError> {
        SourceOptions::parse(&toml::from_str(text).unwrap())
    }

    #[test]
    fn defaults_and_typed_keys_make_the_consumer_configuration() {
        let o = options(
            r#"brokers = ["k1:9092", "k2:9092"]
               topics = ["events"]
               properties = { "group.id" = "other", "enable.auto.offset.store" = "true", "fetch.min.bytes" = "10" }"#,
        )
        .unwrap();
        assert_eq!((o.value_format, o.start), (Format::Auto, Start::Earliest));
        let config = o.client_config("fleet", Some("central-1-fleet"));
        assert_eq!(config.get("bootstrap.servers"), Some("k1:9092,k2:9092"));
        assert_eq!(config.get("group.id"), Some("eventgate"));
        assert_eq!(config.get("enable.auto.offset.store"), Some("false"));
        assert_eq!(config.get("auto.offset.reset"), Some("earliest"));
        assert_eq!(config.get("fetch.min.bytes"), Some("10"));
        assert_eq!(config.get("client.id"), Some("eventgate-source-fleet"));
        assert_eq!(config.get("group.instance.id"), Some("central-1-fleet"));
        assert_eq!(config.get("fetch.wait.max.ms"), Some("100"));
        o.probe("fleet", "central-1").unwrap();
        let own_wait = options(
            r#"brokers = "k1:9092"
               topics = ["events"]
               properties = { "fetch.wait.max.ms" = "500" }"#,
        )
        .unwrap();
        let config = own_wait.client_config("fleet", None);
        assert_eq!(config.get("fetch.wait.max.ms"), Some("500"));
    }

    #[test]
    fn bad_options_are_named() {
        let cases = [
            (
                r#"brokers = "" 
                topics = ["t"]"#,
                "`brokers`",
            ),
            (
                r#"brokers = "k:9092"
                topics = []"#,
                "`topics` must name",
            ),
            (
                r#"brokers = "k:9092"
                topics = ["a b"]"#,
                "not a Kafka topic name",
            ),
            (
                r#"brokers = "k:9092"
                topics = ["^(("]"#,
                "not a valid pattern",
            ),
            (
                r#"brokers = "k:9092"
                topics = ["t"]
                group = " ""#,
                "`group`",
            ),
            (
                r#"brokers = "k:9092"
                topics = ["t"]
                value_format = "xml""#,
                "xml",
            ),
            (
                r#"brokers = "k:9092"
                topics = ["t"]
                topic = "t""#,
                "topic",
            ),
            (
                r#"brokers = "k:9092"
                topics = ["t"]
                properties = { "no.such.property" = "1" }"#,
                "no.such.property",
            ),
        ];
        for (text, expected) in cases {
            let error = options(text)
                .and_then(|o| o.probe("s", "node-1"))
                .expect_err(text)
                .to_string();
            assert!(error.contains(expected), "{text}: {error}");
        }
    }

    fn instance(text: &str, node: &str) -> Result<Option<String>, String> {
        let o = options(&format!("brokers = \"k:9092\"\ntopics = [\"t\"]\n{text}"))
            .map_err(|e| e.to_string())?;
        o.group_instance_id("fleet", node)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn the_instance_id_is_the_node_and_source_by_default_or_as_given() {
        assert_eq!(
            instance("", "central-1"),
            Ok(Some("central-1-fleet".into()))
        );
        assert_eq!(
            instance("instance_id = true", "central-1"),
            Ok(Some("central-1-fleet".into()))
        );
        assert_eq!(
            instance("instance_id = \"gw.a_1-x\"", "central-1"),
            Ok(Some("gw.a_1-x".into()))
        );
        assert_eq!(instance("instance_id = false", "central-1"), Ok(None));
        // Off: librdkafka gets none, even from the passthrough properties.
        let o = options(
            r#"brokers = "k:9092"
               topics = ["t"]
               instance_id = false
               properties = { "group.instance.id" = "sneaky" }"#,
        )
        .unwrap();
        let config = o.client_config(
            "fleet",
            o.group_instance_id("fleet", "n").unwrap().as_deref(),
        );
        assert_eq!(config.get("group.instance.id"), None);
        // On: the typed key's, not the property's.
        let o = options(
            r#"brokers = "k:9092"
               topics = ["t"]
               properties = { "group.instance.id" = "sneaky" }"#,
        )
        .unwrap();
        let id = o.group_instance_id("fleet", "n").unwrap();
        let config = o.client_config("fleet", id.as_deref());
        assert_eq!(config.get("group.instance.id"), Some("n-fleet"));
    }

    #[test]
    fn instance_ids_kafka_would_refuse_are_named() {
        let cases = [
            (
                "instance_id = \"a b\"",
                "central-1",
                "`instance_id` \"a b\" contains ' '; only a-z A-Z 0-9 . _ - are allowed (it is the consumer's group.instance.id)",
            ),
            (
                "instance_id = \"\"",
                "central-1",
                "`instance_id` \"\" is empty",
            ),
            (
                "instance_id = \"..\"",
                "central-1",
                "cannot be \".\" or \"..\"",
            ),
            (
                &format!("instance_id = \"{}\"", "x".repeat(250)),
                "central-1",
                "is 250 characters long; at most 249 are allowed",
            ),
            (
                "",
                "web:1",
                "the default `instance_id` \"web:1-fleet\" (the node name \"web:1\", '-', the source name) contains ':'; only a-z A-Z 0-9 . _ - are allowed: set `instance_id` to a group.instance.id of your own, or `instance_id = false` to join as a new member at each start",
            ),
            ("", &"n".repeat(245), "is 251 characters long"),
            (
                "instance_id = 3",
                "central-1",
                "expected `instance_id`: a group.instance.id (a string), true",
            ),
        ];
        for (text, node, expected) in cases {
            let error = instance(text, node).expect_err(text);
            assert!(error.contains(expected), "{text}: {error}");
        }
        // A node name Kafka would refuse is fine without static membership.
        assert_eq!(instance("instance_id = false", "web:1"), Ok(None));
        assert_eq!(
            instance("instance_id = \"web-1\"", "web:1"),
            Ok(Some("web-1".into()))
        );
    }

    #[test]
    fn the_session_timeout_is_the_property_or_librdkafkas_default() {
        let o = options("brokers = \"k:9092\"\ntopics = [\"t\"]").unwrap();
        assert_eq!(o.session_timeout(), Duration::from_secs(45));
        let o = options(
            r#"brokers = "k:9092"
               topics = ["t"]
               properties = { "session.timeout.ms" = "6000" }"#,
        )
        .unwrap();
        assert_eq!(o.session_timeout(), Duration::from_secs(6));
    }
}
