//! One `[[forwarder]]` table as the pipeline reads it: its own keys (name, kind, route
//! filters, queue, batch, retry, checkpoint, correlate) and the rest, the options its kind checks.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::settings::{BatchSettings, CheckpointSettings, QueueSettings, RetrySettings};
use crate::filter::Filter;
use crate::forward::Options;

/// One `[[forwarder]]` table: the pipeline's keys (`name`, `kind`, `filters`, `queue`,
/// `batch`, `retry`, `checkpoint`) and everything else, which belongs to the kind.
#[derive(Debug, Clone, PartialEq)]
pub struct ForwarderSpec {
    pub name: String,
    pub kind: String,
    /// Route filters in the Subscribe language; empty means every event.
    pub filters: Vec<String>,
    pub queue: QueueSettings,
    pub batch: BatchSettings,
    pub retry: RetrySettings,
    pub checkpoint: CheckpointSettings,
    /// The `correlate` stage; `None` (the default): every event goes through.
    pub correlate: Option<crate::correlate::CorrelateSettings>,
    pub options: Options,
}

impl ForwarderSpec {
    /// The forwarders `serve` runs with no `[[forwarder]]` in the config.
    pub fn embedded_default() -> Vec<Self> {
        let mut file = Options::new();
        file.insert("path".into(), "events.jsonl".into());
        let mut sqlite = Options::new();
        sqlite.insert("path".into(), "audit.db".into());
        vec![
            Self::new("log", "file", file),
            Self::new("audit", "sqlite", sqlite),
        ]
    }

    pub fn new(name: &str, kind: &str, options: Options) -> Self {
        Self {
            name: name.into(),
            kind: kind.into(),
            filters: Vec::new(),
            queue: QueueSettings::default(),
            batch: BatchSettings::default(),
            retry: RetrySettings::default(),
            checkpoint: CheckpointSettings::default(),
            correlate: None,
            options,
        }
    }

    /// The parsed route filter.
    pub fn filter(&self) -> Result<Filter, crate::filter::ParseError> {
        Filter::parse_all(&self.filters)
    }

    /// Pipeline-level checks; the kind's own options are checked by [`crate::config::Config::check_kinds`].
    pub(crate) fn validate(&self) -> Result<(), String> {
        check_name(&self.name)?;
        self.filter().map_err(|e| format!("`filters`: {e}"))?;
        self.queue.validate()?;
        self.batch.validate()?;
        self.retry.validate()?;
        self.checkpoint.validate()?;
        if let Some(correlate) = &self.correlate {
            correlate.validate()?;
        }
        Ok(())
    }
}

/// A configured part's `name` (a forwarder's, a source's): it labels metrics and
/// logs, and names files under the data directory.
pub(crate) fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(format!(
            "`name` {name:?} must be non-empty letters, digits, '-' or '_' (it labels metrics and logs)"
        ));
    }
    Ok(())
}

impl<'de> Deserialize<'de> for ForwarderSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let mut table = Options::deserialize(d)?;
        fn take<T: serde::de::DeserializeOwned, E: Error>(
            table: &mut Options,
            key: &str,
        ) -> Result<Option<T>, E> {
            table
                .remove(key)
                .map(|value| {
                    value.try_into().map_err(|e: toml::de::Error| {
                        E::custom(format!("`{key}`: {}", e.message()))
                    })
                })
                .transpose()
        }
        let name: String = take(&mut table, "name")?
            .ok_or_else(|| D::Error::custom("a [[forwarder]] needs a `name`"))?;
        let kind: String = take(&mut table, "kind")?.ok_or_else(|| {
            D::Error::custom(format!(
                "forwarder {name:?} needs a `kind` (file, sqlite or kafka)"
            ))
        })?;
        let in_forwarder = |e: D::Error| D::Error::custom(format!("forwarder {name:?}: {e}"));
        Ok(Self {
            filters: take(&mut table, "filters")
                .map_err(in_forwarder)?
                .unwrap_or_default(),
            queue: take(&mut table, "queue")
                .map_err(in_forwarder)?
                .unwrap_or_default(),
            batch: take(&mut table, "batch")
                .map_err(in_forwarder)?
                .unwrap_or_default(),
            retry: take(&mut table, "retry")
                .map_err(in_forwarder)?
                .unwrap_or_default(),
            checkpoint: take(&mut table, "checkpoint")
                .map_err(in_forwarder)?
                .unwrap_or_default(),
            correlate: take(&mut table, "correlate").map_err(in_forwarder)?,
            options: table,
            name,
            kind,
        })
    }
}

impl Serialize for ForwarderSpec {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("name", &self.name)?;
        map.serialize_entry("kind", &self.kind)?;
        map.serialize_entry("filters", &self.filters)?;
        for (key, value) in &self.options {
            map.serialize_entry(key, value)?;
        }
        map.serialize_entry("queue", &self.queue)?;
        map.serialize_entry("batch", &self.batch)?;
        map.serialize_entry("retry", &self.retry)?;
        map.serialize_entry("checkpoint", &self.checkpoint)?;
        if let Some(correlate) = &self.correlate {
            map.serialize_entry("correlate", correlate)?;
        }
        map.end()
    }
}
