//! The options of a `kafka` source and the librdkafka consumer configuration made
//! from them.

use rdkafka::ClientConfig;
use serde::Deserialize;

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

    /// The consumer's configuration: passthrough properties first, then the typed
    /// keys over them.
    pub(crate) fn client_config(&self, source: &str) -> ClientConfig {
        let mut config = ClientConfig::new();
        config.set("client.id", format!("eventgate-source-{source}"));
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
        config.set("bootstrap.servers", self.brokers.joined());
        config.set("group.id", self.group.trim());
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
    pub(crate) fn probe(&self, source: &str) -> Result<(), BuildError> {
        kafka::probe::<rdkafka::consumer::BaseConsumer>(self.client_config(source), |error| {
            self.describe(error)
        })
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
        let config = o.client_config("fleet");
        assert_eq!(config.get("bootstrap.servers"), Some("k1:9092,k2:9092"));
        assert_eq!(config.get("group.id"), Some("eventgate"));
        assert_eq!(config.get("enable.auto.offset.store"), Some("false"));
        assert_eq!(config.get("auto.offset.reset"), Some("earliest"));
        assert_eq!(config.get("fetch.min.bytes"), Some("10"));
        assert_eq!(config.get("client.id"), Some("eventgate-source-fleet"));
        o.probe("fleet").unwrap();
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
                .and_then(|o| o.probe("s"))
                .expect_err(text)
                .to_string();
            assert!(error.contains(expected), "{text}: {error}");
        }
    }
}
