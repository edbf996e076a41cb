//! The inverse of [`super::write_json`] for what it writes: a payload's JSON back
//! into the exact protobuf bytes, nested Anys included.
//!
//! Two forms `write_json` writes are not protojson as parsers take it: an expanded
//! Any's `"@type"` is the bare type name containerd uses (protojson wants a `/` in
//! it), and an Any of a type the registry does not know is `{"@type": T, "value":
//! <base64 of its bytes>}`. So each is renamed to a form the parser resolves (a
//! numbered placeholder host before the name; a raw one as a
//! `eventgate.events.v1.RawPayload`), parsed, and every Any put back to its own type
//! name and bytes, innermost first.

use prost::Message as _;
use prost_reflect::{DynamicMessage, MessageDescriptor, ReflectMessage, Value as Field};
use serde_json::Value;

use super::registry::Registry;

const BARE: &str = "eventgate-bare-";
const RAW: &str = "eventgate-raw-";
const HOST: &str = ".invalid/";
/// Parses `{"@type": ..., "value": <base64>}` as its one bytes field.
const RAW_CARRIER: &str = "eventgate.events.v1.RawPayload";

/// A problem with the JSON, said as the parser or the walk found it.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct FromJsonError(String);

/// `json` (what `write_json` wrote for a `desc` message) as that message's bytes.
pub(crate) fn encode_json_value(
    desc: MessageDescriptor,
    json: &Value,
) -> Result<Vec<u8>, FromJsonError> {
    let registry = Registry::global();
    let mut names = Vec::new();
    let mut json = json.clone();
    rename(&mut json, registry, &mut names);
    let mut message =
        DynamicMessage::deserialize(desc, json).map_err(|e| FromJsonError(e.to_string()))?;
    restore(&mut message, registry, &names)?;
    Ok(message.encode_to_vec())
}

/// Gives every Any object a `"@type"` the parser resolves, remembering the original.
fn rename(json: &mut Value, registry: &Registry, names: &mut Vec<String>) {
    match json {
        Value::Array(items) => items.iter_mut().for_each(|v| rename(v, registry, names)),
        Value::Object(object) => {
            if let Some(Value::String(type_url)) = object.get("@type") {
                let type_url = type_url.clone();
                // `{"@type", "value"}` is also how protojson writes the well-known
                // types (a Timestamp, a wrapper), and a message with a `value` field
                // could look the same; any other is bytes kept raw (a type unknown
                // here, or one whose bytes did not decode as it).
                let raw = object.len() == 2
                    && object.get("value").is_some_and(Value::is_string)
                    && match registry.message(&type_url) {
                        None => true,
                        Some(desc) => {
                            !desc.full_name().starts_with("google.protobuf.")
                                && desc.get_field_by_name("value").is_none()
                                && desc.get_field_by_json_name("value").is_none()
                        }
                    };
                let renamed = if raw {
                    Some(format!("{RAW}{}{HOST}{RAW_CARRIER}", names.len()))
                } else if !type_url.contains('/') {
                    Some(format!("{BARE}{}{HOST}{type_url}", names.len()))
                } else {
                    None
                };
                if let Some(renamed) = renamed {
                    names.push(type_url);
                    object.insert("@type".into(), Value::String(renamed));
                }
            }
            object.values_mut().for_each(|v| rename(v, registry, names));
        }
        _ => {}
    }
}

/// The original type name and bytes of every Any in `message`, innermost first.
fn restore(
    message: &mut DynamicMessage,
    registry: &Registry,
    names: &[String],
) -> Result<(), FromJsonError> {
    if message.descriptor().full_name() == "google.protobuf.Any" {
        return restore_any(message, registry, names);
    }
    for (_, value) in message.fields_mut() {
        restore_field(value, registry, names)?;
    }
    Ok(())
}

fn restore_field(
    value: &mut Field,
    registry: &Registry,
    names: &[String],
) -> Result<(), FromJsonError> {
    match value {
        Field::Message(inner) => restore(inner, registry, names),
        Field::List(items) => items
            .iter_mut()
            .try_for_each(|v| restore_field(v, registry, names)),
        Field::Map(entries) => entries
            .values_mut()
            .try_for_each(|v| restore_field(v, registry, names)),
        _ => Ok(()),
    }
}

fn restore_any(
    any: &mut DynamicMessage,
    registry: &Registry,
    names: &[String],
) -> Result<(), FromJsonError> {
    let type_url = any
        .get_field_by_name("type_url")
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    let bytes = any
        .get_field_by_name("value")
        .and_then(|v| v.as_bytes().cloned())
        .unwrap_or_default();
    let original = |rest: &str| -> Result<String, FromJsonError> {
        rest.split_once(HOST)
            .and_then(|(n, _)| n.parse::<usize>().ok())
            .and_then(|n| names.get(n).cloned())
            .ok_or_else(|| FromJsonError(format!("a placeholder type {type_url:?} was left")))
    };
    let (type_url, bytes) = if let Some(rest) = type_url.strip_prefix(RAW) {
        let name = original(rest)?;
        let raw = crate::proto::eventgate::events::v1::RawPayload::decode(bytes.as_ref())
            .map_err(|e| FromJsonError(format!("raw {name:?}: {e}")))?
            .value;
        (name, raw)
    } else {
        let name = match type_url.strip_prefix(BARE) {
            Some(rest) => original(rest)?,
            None => type_url.clone(),
        };
        // Its own Anys, renamed too, are inside its bytes.
        let bytes = match registry.message(&name) {
            Some(desc) => {
                let mut inner = DynamicMessage::decode(desc, bytes.as_ref())
                    .map_err(|e| FromJsonError(format!("{name:?}: {e}")))?;
                restore(&mut inner, registry, names)?;
                inner.encode_to_vec()
            }
            None => bytes.to_vec(),
        };
        (name, bytes)
    };
    any.set_field_by_name("type_url", Field::String(type_url));
    any.set_field_by_name("value", Field::Bytes(bytes.into()));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::json::to_json_string;

    /// A payload with a known nested Any and an unknown one, as
    /// `write_json` writes it, comes back byte for byte.
    #[test]
    fn nested_anys_come_back_byte_for_byte() {
        let registry = Registry::global();
        let options = prost_types::Any {
            type_url: "containerd.events.TaskExit".into(),
            value: registry
                .encode_json(
                    "containerd.events.TaskExit",
                    r#"{"containerId":"c","pid":3}"#,
                )
                .unwrap()
                .value,
        };
        let unknown = prost_types::Any {
            type_url: "io.containerd.runc.v1.Options".into(),
            value: vec![8, 1, 18, 3, 97, 98, 99],
        };
        let time = prost_types::Any {
            type_url: "google.protobuf.Timestamp".into(),
            value: prost_types::Timestamp {
                seconds: 1_714_557_600,
                nanos: 5,
            }
            .encode_to_vec(),
        };
        // Bytes that do not decode as their (known) type are written raw too.
        let broken = prost_types::Any {
            type_url: "containerd.events.TaskExit".into(),
            value: vec![0xff, 0xff, 0xff],
        };
        // (An Any directly holding an Any is written flattened, as protojson does:
        // it reads back as the inner one.)
        for inner in [options, unknown, time, broken] {
            let create = crate::proto::containerd::events::ContainerCreate {
                id: "c".into(),
                image: "busybox".into(),
                runtime: Some(
                    crate::proto::containerd::events::container_create::Runtime {
                        name: "io.containerd.runc.v2".into(),
                        options: Some(inner.clone()),
                    },
                ),
            };
            let any = prost_types::Any {
                type_url: "containerd.events.ContainerCreate".into(),
                value: create.encode_to_vec(),
            };
            let json: Value =
                serde_json::from_str(&to_json_string(&registry.decode(&any).unwrap())).unwrap();
            let desc = registry
                .message("containerd.events.ContainerCreate")
                .unwrap();
            let back = encode_json_value(desc, &json).unwrap_or_else(|e| panic!("{json}: {e}"));
            assert_eq!(back, any.value, "{json}");
        }
    }
}
