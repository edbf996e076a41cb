//! One Kafka message, as a node gateway's `kafka` forwarder wrote it, back into the
//! event it was: the envelope from the value (whichever of the four formats), the
//! gateway's identity of the event (id, seq, node, origin, publisher, workload,
//! received time) from the headers the forwarder writes in every format.

use std::str::FromStr;
use std::sync::Arc;
use std::time::SystemTime;

use base64::Engine;
use prost::Message as _;
use prost_types::{Any, Timestamp};
use serde_json::{Map, Value};
use thiserror::Error;

use super::options::Format;
use crate::event::{Event, EventId, Identity, Origin, Source, Workload};
use crate::proto::Registry;
use crate::proto::containerd::types::Envelope;
use crate::publisher::Publisher;

/// A message as the consumer hands it over.
pub(crate) struct Message<'a> {
    pub(crate) topic: &'a str,
    pub(crate) partition: i32,
    pub(crate) offset: i64,
    pub(crate) headers: Vec<(&'a str, &'a [u8])>,
    pub(crate) value: Option<&'a [u8]>,
}

/// Why a message is not an event; each is counted by its `reason`.
#[derive(Debug, Error)]
pub(crate) enum DecodeError {
    #[error("the value is not a protobuf containerd Envelope: {0}")]
    Envelope(#[source] prost::DecodeError),
    #[error("the value is not a JSON object: {0}")]
    Json(#[source] serde_json::Error),
    #[error("{0}")]
    Field(String),
    #[error("header `{name}`: {problem}")]
    Header { name: &'static str, problem: String },
    #[error("the payload of type {type_url:?} cannot be encoded: {problem}")]
    Payload { type_url: String, problem: String },
}

impl DecodeError {
    pub(crate) fn reason(&self) -> &'static str {
        match self {
            DecodeError::Envelope(_) => "protobuf",
            DecodeError::Json(_) => "json",
            DecodeError::Field(_) => "field",
            DecodeError::Header { .. } => "header",
            DecodeError::Payload { .. } => "payload",
        }
    }
}

const STRUCTURED: &str = "application/cloudevents+json";

impl Message<'_> {
    fn header(&self, name: &'static str) -> Result<Option<&str>, DecodeError> {
        // The last one wins, as Kafka clients read a repeated header.
        match self.headers.iter().rev().find(|(key, _)| *key == name) {
            None => Ok(None),
            Some((_, value)) => {
                std::str::from_utf8(value)
                    .map(Some)
                    .map_err(|_| DecodeError::Header {
                        name,
                        problem: "not UTF-8".into(),
                    })
            }
        }
    }

    fn format(&self, configured: Format) -> Result<Format, DecodeError> {
        if configured != Format::Auto {
            return Ok(configured);
        }
        if self.header("ce_specversion")?.is_some() {
            return Ok(Format::CloudeventsBinary);
        }
        let content_type = self.header("content-type")?.unwrap_or_default();
        if content_type.starts_with(STRUCTURED) {
            return Ok(Format::CloudeventsStructured);
        }
        let first = self
            .value
            .and_then(|v| v.iter().find(|b| !b.is_ascii_whitespace()));
        Ok(match first {
            // A protobuf Envelope never starts with '{' (field 15, a group).
            Some(b'{') => Format::Json,
            _ => Format::Protobuf,
        })
    }

    /// An id for a message that carries none (not written by a gateway): derived from
    /// where it is in Kafka, so reading it again gives the same id and stores keep
    /// it once.
    fn position_id(&self) -> EventId {
        EventId::derived(format!("{}/{}/{}", self.topic, self.partition, self.offset).as_bytes())
    }
}

/// The longest node source kept (as the spool record keeps it): a source's
/// description is a short configured name behind `upstream:` or `kafka:`.
pub(crate) const MAX_NODE_SOURCE: usize = 255;

/// The event `message` carries, taken in by the source `source`.
pub(crate) fn decode(
    message: &Message<'_>,
    format: Format,
    source: &Arc<str>,
) -> Result<Event, DecodeError> {
    let resolved = message.format(format)?;
    let (envelope, body) = match resolved {
        Format::Protobuf => (protobuf(message)?, None),
        Format::CloudeventsBinary => (cloudevents_binary(message)?, None),
        Format::Json => {
            let body = object(message)?;
            (json_value(message, &body)?, Some(body))
        }
        Format::CloudeventsStructured | Format::Auto => {
            let body = object(message)?;
            (structured(message, &body)?, Some(body))
        }
    };
    let field = |name: &str| body.as_ref().and_then(|b| b.get(name));
    let id = match message
        .header("event_id")?
        .or_else(|| field("id")?.as_str())
    {
        Some(text) => EventId::from_str(text).map_err(|e| DecodeError::Header {
            name: "event_id",
            problem: format!("{text:?} is not a UUID: {e}"),
        })?,
        None => message.position_id(),
    };
    let node_seq = match message.header("node_seq")?.or(message.header("seq")?) {
        Some(text) => Some(text.parse::<u64>().map_err(|_| DecodeError::Header {
            name: "seq",
            problem: format!("{text:?} is not a sequence number"),
        })?),
        None => field("node_seq").or(field("seq")).and_then(Value::as_u64),
    }
    .filter(|seq| *seq != 0);
    // Cut as the spool cuts it, so the event is the same live and read back.
    let node = match message.header("node")? {
        Some(node) => Some(node),
        None => field("node").and_then(Value::as_str),
    }
    .map(|node| crate::node::cut(node).to_owned());
    // A relayed event says how it entered its node in `node_source`; a node's own
    // record in `source`. In a CloudEvents body `source` is the event's URI, not this.
    let node_source = match message.header("node_source")?.or(message.header("source")?) {
        Some(text) => Some(text),
        None if matches!(resolved, Format::Json) => field("node_source")
            .or(field("source"))
            .and_then(Value::as_str),
        None => None,
    }
    .map(|text| match text.len() <= MAX_NODE_SOURCE {
        true => Ok(Arc::from(text)),
        false => Err(DecodeError::Header {
            name: "source",
            problem: format!(
                "{} bytes, longer than the {MAX_NODE_SOURCE} a gateway's source name has",
                text.len()
            ),
        }),
    })
    .transpose()?;
    let origin = match message.header("origin")? {
        Some(origin) => {
            let clock = message.header("origin_clock")?;
            let from = message.header("reconciled_from")?;
            Origin::from_stored(origin, clock, from).map_err(|problem| DecodeError::Header {
                name: "origin",
                problem,
            })?
        }
        None => Origin::Live,
    };
    let publisher = match message.header("publisher")? {
        Some(text) => Some(publisher(text).map_err(|problem| DecodeError::Header {
            name: "publisher",
            problem,
        })?),
        None => None,
    };
    let received_at = match message.header("received_at")? {
        Some(text) => {
            let time = Timestamp::from_str(text)
                .ok()
                .and_then(|ts| SystemTime::try_from(ts).ok())
                .ok_or_else(|| DecodeError::Header {
                    name: "received_at",
                    problem: format!("{text:?} is not an RFC 3339 time"),
                })?;
            // The spool keeps it as nanoseconds in an i64: a time it cannot hold
            // would come back another after a restart. No gateway accepted an event
            // then.
            if !crate::spool::record::holds_time(time) {
                return Err(DecodeError::Header {
                    name: "received_at",
                    problem: format!(
                        "{text:?} is outside the years 1678 to 2261 that a gateway's clock gives"
                    ),
                });
            }
            time
        }
        None => SystemTime::now(),
    };
    let identity = Identity {
        id,
        received_at,
        source: Source::Kafka(Arc::clone(source)),
        publisher,
        origin,
        workload: workload(message)?.map(Arc::new),
        node: node.map(Arc::from),
        node_seq,
        node_source,
    };
    // Its seq here is the exchange's to give.
    Ok(Event::from_identity(0, identity, envelope))
}

fn protobuf(message: &Message<'_>) -> Result<Envelope, DecodeError> {
    Envelope::decode(message.value.unwrap_or_default()).map_err(DecodeError::Envelope)
}

fn object(message: &Message<'_>) -> Result<Map<String, Value>, DecodeError> {
    serde_json::from_slice(message.value.unwrap_or_default()).map_err(DecodeError::Json)
}

fn text_of<'b>(body: &'b Map<String, Value>, key: &str) -> Result<Option<&'b str>, DecodeError> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text)),
        Some(_) => Err(DecodeError::Field(format!("`{key}` is not a string"))),
    }
}

fn required<'b>(
    message: &'b Message<'_>,
    header: &'static str,
    value: Option<&'b str>,
) -> Result<String, DecodeError> {
    value
        .or(message.header(header)?)
        .map(str::to_owned)
        .ok_or_else(|| DecodeError::Field(format!("no `{header}` in the message")))
}

fn timestamp(text: Option<&str>) -> Result<Option<Timestamp>, DecodeError> {
    text.map(|text| {
        Timestamp::from_str(text)
            .map_err(|e| DecodeError::Field(format!("time {text:?} is not RFC 3339: {e}")))
    })
    .transpose()
}

/// The payload from its JSON form, through the registry (lossless for the types it
/// knows, which are the only ones a gateway writes as JSON).
fn from_json(type_url: &str, json: &Value) -> Result<Any, DecodeError> {
    let problem = |problem: String| DecodeError::Payload {
        type_url: type_url.to_owned(),
        problem,
    };
    let desc = Registry::global()
        .message(type_url)
        .ok_or_else(|| problem("a type this gateway does not know, written as JSON".into()))?;
    let value = crate::proto::encode_json_value(desc, json).map_err(|e| problem(e.to_string()))?;
    Ok(Any {
        type_url: type_url.to_owned(),
        value,
    })
}

fn from_base64(type_url: &str, text: &str) -> Result<Any, DecodeError> {
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .map(|value| Any {
            type_url: type_url.to_owned(),
            value,
        })
        .map_err(|e| DecodeError::Payload {
            type_url: type_url.to_owned(),
            problem: format!("not base64: {e}"),
        })
}

/// `render::write_event_json`'s object.
fn json_value(message: &Message<'_>, body: &Map<String, Value>) -> Result<Envelope, DecodeError> {
    let type_url = text_of(body, "type_url")?;
    let event = match (type_url, body.get("event"), text_of(body, "raw")?) {
        (None, ..) => None,
        (Some(type_url), _, Some(raw)) => Some(from_base64(type_url, raw)?),
        (Some(type_url), Some(json), None) if !json.is_null() => Some(from_json(type_url, json)?),
        (Some(type_url), ..) => Some(Any {
            type_url: type_url.to_owned(),
            value: Vec::new(),
        }),
    };
    Ok(Envelope {
        timestamp: timestamp(text_of(body, "timestamp")?)?,
        namespace: required(message, "namespace", text_of(body, "namespace")?)?,
        topic: required(message, "topic", text_of(body, "topic")?)?,
        event,
    })
}

/// The type_url of a CloudEvents message: the gateway's own header, else `type`
/// (the bare name, which is what containerd's type_urls are).
fn ce_type_url(
    message: &Message<'_>,
    ce_type: Option<&str>,
) -> Result<Option<String>, DecodeError> {
    Ok(match message.header("type_url")? {
        // Empty: the event had no payload.
        Some("") => None,
        Some(type_url) => Some(type_url.to_owned()),
        None => ce_type
            .filter(|t| *t != "eventgate.unknown")
            .map(str::to_owned),
    })
}

fn cloudevents_binary(message: &Message<'_>) -> Result<Envelope, DecodeError> {
    let type_url = ce_type_url(message, message.header("ce_type")?)?;
    let content_type = message.header("content-type")?.unwrap_or_default();
    let event = match (type_url, message.value) {
        (None, _) => None,
        (Some(type_url), None) => Some(Any {
            type_url,
            value: Vec::new(),
        }),
        (Some(type_url), Some(value)) if content_type.starts_with("application/json") => {
            let json: Value = serde_json::from_slice(value).map_err(DecodeError::Json)?;
            Some(from_json(&type_url, &json)?)
        }
        (Some(type_url), Some(value)) => Some(Any {
            type_url,
            value: value.to_vec(),
        }),
    };
    Ok(Envelope {
        timestamp: timestamp(message.header("ce_time")?)?,
        namespace: required(message, "namespace", message.header("ce_namespace")?)?,
        topic: required(message, "topic", message.header("ce_topic")?)?,
        event,
    })
}

fn structured(message: &Message<'_>, body: &Map<String, Value>) -> Result<Envelope, DecodeError> {
    let type_url = ce_type_url(message, text_of(body, "type")?)?;
    let event = match (type_url, body.get("data"), text_of(body, "data_base64")?) {
        (None, ..) => None,
        (Some(type_url), _, Some(data)) => Some(from_base64(&type_url, data)?),
        (Some(type_url), Some(json), None) => Some(from_json(&type_url, json)?),
        (Some(type_url), None, None) => Some(Any {
            type_url,
            value: Vec::new(),
        }),
    };
    Ok(Envelope {
        timestamp: timestamp(text_of(body, "time")?)?,
        namespace: required(message, "namespace", text_of(body, "namespace")?)?,
        topic: required(message, "topic", text_of(body, "topic")?)?,
        event,
    })
}

/// [`Publisher::write_json`]'s object back.
fn publisher(text: &str) -> Result<Publisher, String> {
    let object: Map<String, Value> =
        serde_json::from_str(text).map_err(|e| format!("not a JSON object: {e}"))?;
    if let Some(subject) = object.get("subject").and_then(Value::as_str) {
        return Ok(Publisher::Certificate {
            subject: Arc::from(subject),
        });
    }
    let id = |key: &str| -> Result<Option<u32>, String> {
        match object.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(value) => value
                .as_u64()
                .and_then(|v| u32::try_from(v).ok())
                .map(Some)
                .ok_or_else(|| format!("`{key}` is not a 32-bit id")),
        }
    };
    match (id("uid")?, id("gid")?) {
        (Some(uid), Some(gid)) => Ok(Publisher::Process {
            uid,
            gid,
            pid: id("pid")?,
        }),
        _ => Err("neither a `subject` nor a `uid` and `gid`".into()),
    }
}

/// What the container's record said, from the headers [`Workload::fields`] wrote.
fn workload(message: &Message<'_>) -> Result<Option<Workload>, DecodeError> {
    let text = |name| Ok::<_, DecodeError>(message.header(name)?.map(str::to_owned));
    let labels = match message.header("container_labels")? {
        None => Default::default(),
        Some(json) => serde_json::from_str(json).map_err(|e| DecodeError::Header {
            name: "container_labels",
            problem: format!("not a JSON object of strings: {e}"),
        })?,
    };
    let workload = Workload {
        kind: text("container_kind")?,
        pod_name: text("pod_name")?,
        pod_namespace: text("pod_namespace")?,
        pod_uid: text("pod_uid")?,
        container_name: text("container_name")?,
        image: text("image")?.unwrap_or_default(),
        labels,
        reason: text("reason")?,
    };
    Ok((workload != Workload::default()).then_some(workload))
}

#[cfg(test)]
#[path = "decode_tests.rs"]
mod tests;
