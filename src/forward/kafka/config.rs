//! The options of a `kafka` forwarder and the librdkafka configuration made from them.

use std::time::Duration;

use rdkafka::ClientConfig;
use serde::Deserialize;

use super::properties::Properties;
use super::record::{KeyMode, TopicTemplate, ValueFormat};
use super::security::{self, Mechanism, Sasl, Security, Tls};
use crate::forward::{BuildError, Options, parse_options};

/// `[[forwarder]]` keys of kind `kafka`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct KafkaOptions {
    /// `"host:port,host:port"` or a list of `host:port`.
    pub brokers: Brokers,
    /// A topic name, or a template using `{namespace}` and `{topic}`.
    pub topic: String,
    #[serde(default)]
    pub create_topic: bool,
    /// For topics this forwarder creates; -1 means the broker's default.
    #[serde(default = "default_partitions")]
    pub partitions: i32,
    #[serde(default = "default_replication_factor")]
    pub replication_factor: i32,
    #[serde(default)]
    pub acks: Acks,
    #[serde(default = "default_true")]
    pub idempotence: bool,
    #[serde(default)]
    pub value_format: ValueFormat,
    #[serde(default)]
    pub key: KeyMode,
    /// The CloudEvents `source` authority; this machine's hostname by default.
    #[serde(default = "super::cloudevents::default_node")]
    pub node: String,
    /// How long librdkafka may try to deliver one message (`message.timeout.ms`).
    #[serde(
        default = "default_message_timeout",
        with = "crate::units::duration_text"
    )]
    pub message_timeout: Duration,
    /// TLS to the brokers (see `Tls`).
    pub tls: Option<Tls>,
    /// SASL authentication (see `Sasl`).
    pub sasl: Option<Sasl>,
    /// Any librdkafka property, passed through.
    #[serde(default)]
    pub properties: Properties,
    /// What `tls` and `sasl` set, files read.
    #[serde(skip)]
    pub security: Security,
}

fn default_partitions() -> i32 {
    3
}

fn default_replication_factor() -> i32 {
    -1
}

fn default_true() -> bool {
    true
}

/// Below the pipeline's default per-attempt `retry.timeout` (30s), so librdkafka
/// reports a verdict on every message before the pipeline abandons the attempt.
fn default_message_timeout() -> Duration {
    Duration::from_secs(20)
}

#[derive(Debug)]
pub(crate) enum Brokers {
    List(Vec<String>),
    Text(String),
}

impl<'de> Deserialize<'de> for Brokers {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let problem = || {
            serde::de::Error::custom("must be \"host:port,host:port\" or a list of \"host:port\"")
        };
        match toml::Value::deserialize(d)? {
            toml::Value::String(text) => Ok(Brokers::Text(text)),
            toml::Value::Array(items) => items
                .into_iter()
                .map(|item| match item {
                    toml::Value::String(s) => Ok(s),
                    _ => Err(problem()),
                })
                .collect::<Result<_, _>>()
                .map(Brokers::List),
            _ => Err(problem()),
        }
    }
}

impl Brokers {
    pub(crate) fn joined(&self) -> String {
        match self {
            Brokers::Text(text) => text.trim().to_owned(),
            Brokers::List(list) => list.iter().map(|b| b.trim()).collect::<Vec<_>>().join(","),
        }
    }
}

/// `acks`: "all" (or -1), 1 or 0, as text or number.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Acks {
    #[default]
    All,
    Leader,
    None,
}

impl Acks {
    fn as_property(self) -> &'static str {
        match self {
            Acks::All => "all",
            Acks::Leader => "1",
            Acks::None => "0",
        }
    }
}

impl<'de> Deserialize<'de> for Acks {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Number(i64),
            Text(String),
        }
        let text = match Raw::deserialize(d)? {
            Raw::Number(n) => n.to_string(),
            Raw::Text(t) => t,
        };
        match text.as_str() {
            "all" | "-1" => Ok(Acks::All),
            "1" => Ok(Acks::Leader),
            "0" => Ok(Acks::None),
            other => Err(serde::de::Error::custom(format!(
                "`acks` {other:?} must be \"all\", 1 or 0"
            ))),
        }
    }
}

/// librdkafka properties a typed key owns, with their librdkafka aliases: a
/// passthrough property naming one of them is dropped in favour of the typed key.
const OWNED: &[(&str, &str, &[&str])] = &[
    ("brokers", "bootstrap.servers", &["metadata.broker.list"]),
    ("acks", "acks", &["request.required.acks"]),
    ("idempotence", "enable.idempotence", &[]),
    (
        "message_timeout",
        "message.timeout.ms",
        &["delivery.timeout.ms"],
    ),
];

/// The error of one key on its own: a type error from the whole struct does not
/// say which key it is about.
fn field_error(key: &str, value: &toml::Value) -> Option<String> {
    fn check<T: serde::de::DeserializeOwned>(value: &toml::Value) -> Result<(), String> {
        value
            .clone()
            .try_into::<T>()
            .map(drop)
            .map_err(|e| e.message().to_owned())
    }
    let result = match key {
        "brokers" => check::<Brokers>(value),
        "topic" => check::<String>(value),
        "create_topic" | "idempotence" => check::<bool>(value),
        "partitions" | "replication_factor" => check::<i32>(value),
        "acks" => check::<Acks>(value),
        "value_format" => check::<ValueFormat>(value),
        "key" => check::<KeyMode>(value),
        "node" => check::<String>(value),
        "message_timeout" => value
            .as_str()
            .ok_or_else(|| "must be a duration like \"20s\"".to_owned())
            .and_then(|text| crate::units::parse_duration(text).map(drop)),
        "properties" => check::<Properties>(value),
        "tls" => check::<Tls>(value),
        "sasl" => match value.get("mechanism") {
            Some(m) if m.clone().try_into::<Mechanism>().is_err() => {
                Err(format!("`mechanism` {m} must be {}", Mechanism::NAMES))
            }
            _ => check::<Sasl>(value),
        },
        _ => return None,
    };
    result.err().map(|problem| format!("`{key}`: {problem}"))
}

impl KafkaOptions {
    pub(crate) fn parse(options: &Options) -> Result<Self, BuildError> {
        let mut parsed: KafkaOptions = parse_options(options).map_err(|error| {
            options
                .iter()
                .find_map(|(key, value)| field_error(key, value))
                .map_or(error, BuildError::Options)
        })?;
        parsed.validate()?;
        parsed.security = Security::resolve(parsed.tls.as_ref(), parsed.sasl.as_ref())?;
        Ok(parsed)
    }

    fn validate(&self) -> Result<(), BuildError> {
        let bad = |message: String| Err(BuildError::Options(message));
        if self.brokers.joined().is_empty() {
            return bad("`brokers` must name at least one host:port".into());
        }
        TopicTemplate::parse(&self.topic)?;
        if self.node.trim().is_empty() {
            return bad(
                "`node` is empty (the default is the hostname, which could not be read): set `node` to name this machine in the CloudEvents `source`".into(),
            );
        }
        if self.partitions == 0 || self.partitions < -1 {
            return bad(format!(
                "`partitions` {} must be positive, or -1 for the broker's default",
                self.partitions
            ));
        }
        if self.replication_factor == 0 || self.replication_factor < -1 {
            return bad(format!(
                "`replication_factor` {} must be positive, or -1 for the broker's default",
                self.replication_factor
            ));
        }
        if self.idempotence && self.acks != Acks::All {
            return bad(format!(
                "`acks = {:?}` needs `idempotence = false` (an idempotent producer always waits for all replicas)",
                self.acks.as_property()
            ));
        }
        let ms = self.message_timeout.as_millis();
        if ms == 0 || ms > i32::MAX as u128 {
            return bad(format!(
                "`message_timeout` {:?} must be between 1ms and about 24 days",
                self.message_timeout
            ));
        }
        for (key, _) in self.properties.iter() {
            if key.trim().is_empty() {
                return bad("`properties` has an empty property name".into());
            }
        }
        Ok(())
    }

    /// The producer's librdkafka configuration: passthrough properties first, then
    /// the typed keys over them (each override logged at warn, without values).
    pub(crate) fn client_config(&self, forwarder: &str) -> ClientConfig {
        let mut config = ClientConfig::new();
        // One client id per forwarder makes broker-side quotas and logs attributable.
        config.set("client.id", format!("eventgate-{forwarder}"));
        // librdkafka producers ask brokers to auto-create unknown topics on every
        // metadata lookup; the topic check must see a missing topic as missing.
        config.set("allow.auto.create.topics", "false");
        // Without idempotence, more than one in-flight request lets librdkafka's own
        // retries reorder messages of one key; keep the per-key order promise.
        if !self.idempotence {
            config.set("max.in.flight.requests.per.connection", "1");
        }
        // The pipeline already hands over whole batches and waits for every report of
        // one before the next, so librdkafka's own wait for more messages (5 ms by
        // default) only added that much to every batch. `properties` may set it back
        // (under either name: with both set, librdkafka's pick would be arbitrary).
        let linger_set = self
            .properties
            .iter()
            .any(|(key, _)| key == "linger.ms" || key == "queue.buffering.max.ms");
        if !linger_set {
            config.set("linger.ms", "0");
        }
        for (key, value) in self.properties.iter() {
            let owner = OWNED
                .iter()
                .find(|(_, property, aliases)| *property == key || aliases.contains(&key))
                .map(|(typed, _, _)| *typed)
                .or_else(|| {
                    (self.security.is_set() && security::OWNED.contains(&key)).then_some("tls/sasl")
                });
            if let Some(typed) = owner {
                tracing::warn!(
                    forwarder,
                    property = %key,
                    typed_key = typed,
                    "kafka property overridden by the forwarder's typed key"
                );
                continue;
            }
            config.set(key, value);
        }
        for (key, value) in &self.security.properties {
            config.set(*key, value);
        }
        config.set("bootstrap.servers", self.brokers.joined());
        config.set("acks", self.acks.as_property());
        config.set("enable.idempotence", self.idempotence.to_string());
        config.set(
            "message.timeout.ms",
            self.message_timeout.as_millis().to_string(),
        );
        config
    }

    /// Builds the real librdkafka client from this configuration without connecting
    /// (no bootstrap servers): everything librdkafka would refuse when `serve` starts
    /// the forwarder (an unknown or invalid property, a mechanism or codec the build
    /// lacks, a CA file OpenSSL cannot load) is refused here, with the property named.
    pub(crate) fn probe(&self) -> Result<(), BuildError> {
        probe::<rdkafka::producer::BaseProducer>(self.client_config("check"), |error| {
            self.describe(error)
        })
    }

    /// A librdkafka error made safe to show (see `Properties::describe`).
    pub(crate) fn describe(&self, error: &rdkafka::error::KafkaError) -> String {
        describe(&self.properties, &self.security, error)
    }

    /// Every configured secret value (passthrough and typed), for the log scrubber.
    pub(crate) fn secrets(&self) -> Vec<String> {
        secrets(&self.properties, &self.security)
    }
}

/// Builds the real librdkafka client of `config` without brokers (without
/// connecting): what librdkafka would refuse when the client starts for real (an
/// unknown or invalid property, a mechanism or codec the build lacks, a CA file
/// OpenSSL cannot load) is refused now, named by `describe`.
pub(crate) fn probe<C: rdkafka::config::FromClientConfig>(
    mut config: ClientConfig,
    describe: impl Fn(&rdkafka::error::KafkaError) -> String,
) -> Result<(), BuildError> {
    config.remove("bootstrap.servers");
    config.set_log_level(rdkafka::config::RDKafkaLogLevel::Error);
    // librdkafka warns about the missing brokers on its own log; nothing to see.
    config.set("log_level", "3");
    match config.create::<C>() {
        Ok(client) => {
            drop(client);
            Ok(())
        }
        Err(error) => Err(BuildError::Options(format!(
            "librdkafka refuses this configuration: {}",
            describe(&error)
        ))),
    }
}

/// A librdkafka error with no configured secret in it.
pub(crate) fn describe(
    properties: &Properties,
    security: &Security,
    error: &rdkafka::error::KafkaError,
) -> String {
    crate::redact::text(&properties.describe(error), security.secrets())
}

/// Every configured secret value (passthrough and typed).
pub(crate) fn secrets(properties: &Properties, security: &Security) -> Vec<String> {
    let mut all = properties.secrets();
    all.extend(security.secrets().iter().cloned());
    all
}

#[cfg(test)]
mod tests;
