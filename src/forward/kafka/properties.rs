//! `properties = { ... }`: librdkafka properties passed through as given, and the
//! rule that keeps secret ones out of logs, errors and `Debug` output.

use std::collections::BTreeMap;
use std::fmt;

use rdkafka::error::KafkaError;
use serde::Deserialize;

/// librdkafka properties from `properties = { ... }`, as the strings librdkafka takes.
#[derive(Default)]
pub(crate) struct Properties(BTreeMap<String, String>);

impl<'de> Deserialize<'de> for Properties {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let table = BTreeMap::<String, toml::Value>::deserialize(d)?;
        let mut out = BTreeMap::new();
        for (key, value) in table {
            let text = match value {
                toml::Value::String(s) => s,
                toml::Value::Integer(i) => i.to_string(),
                toml::Value::Float(f) => f.to_string(),
                toml::Value::Boolean(b) => b.to_string(),
                _ => {
                    return Err(serde::de::Error::custom(format!(
                        "`properties.{key}` must be a string, number or boolean"
                    )));
                }
            };
            out.insert(key, text);
        }
        Ok(Properties(out))
    }
}

impl fmt::Debug for Properties {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.iter().map(|(k, v)| {
                let shown = if is_secret(k) { "***" } else { v.as_str() };
                (k, shown)
            }))
            .finish()
    }
}

use crate::redact::is_secret;

impl Properties {
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// The values of the secret properties (non-empty ones).
    pub(crate) fn secrets(&self) -> Vec<String> {
        self.0
            .iter()
            .filter(|(k, v)| is_secret(k) && !v.is_empty())
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// `text` with the values of secret keys masked, by key (`sasl.password = ...`)
    /// and where a configured secret stands alone (see [`crate::redact`]).
    pub(crate) fn scrub(&self, text: &str) -> String {
        crate::redact::text(text, &self.secrets())
    }

    /// A librdkafka error made safe to show: config errors are rebuilt without the
    /// offending value (librdkafka quotes it), anything else has secrets masked.
    pub(crate) fn describe(&self, error: &KafkaError) -> String {
        match error {
            KafkaError::ClientConfig(_, description, key, _) => self.scrub(&format!(
                "invalid librdkafka property {key:?}: {description}"
            )),
            other => self.scrub(&other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::forward::kafka::KafkaOptions;

    fn options(text: &str) -> KafkaOptions {
        KafkaOptions::parse(&toml::from_str(text).unwrap()).unwrap()
    }

    #[test]
    fn secrets_stay_hidden() {
        let o = options(
            r#"
            brokers = "a:9092"
            topic = "events"
            properties = { "sasl.password" = "hunter2", "ssl.key.password" = "k3y", "sasl.username" = "me" }
            "#,
        );
        let debug = format!("{o:?}");
        assert!(
            !debug.contains("hunter2") && !debug.contains("k3y"),
            "{debug}"
        );
        assert!(debug.contains("sasl.username") && debug.contains("me"));
        // librdkafka quotes bad values in its errors; the shown error must not.
        let error = KafkaError::ClientConfig(
            rdkafka::types::RDKafkaConfRes::RD_KAFKA_CONF_INVALID,
            "Invalid value \"hunter2\" for configuration property \"sasl.password\"".into(),
            "sasl.password".into(),
            "hunter2".into(),
        );
        let shown = o.properties.describe(&error);
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("sasl.password"), "{shown}");
    }

    /// A one-character password used to mask that character everywhere.
    #[test]
    fn a_short_secret_leaves_other_words_alone() {
        let o = options(
            r#"
            brokers = "a:9092"
            topic = "events"
            properties = { "sasl.password" = "p" }
            "#,
        );
        let error = KafkaError::ClientConfig(
            rdkafka::types::RDKafkaConfRes::RD_KAFKA_CONF_INVALID,
            "Invalid value \"p\" for configuration property \"sasl.password\"".into(),
            "sasl.password".into(),
            "p".into(),
        );
        assert_eq!(
            o.properties.describe(&error),
            "invalid librdkafka property \"sasl.password\": Invalid value \"***\" for \
             configuration property \"sasl.password\""
        );
    }
}
