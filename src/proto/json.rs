//! The canonical JSON of a decoded event (JSON lines, SQLite, Kafka): every field
//! present, defaults included, so consumers never need the schema to tell "0" from
//! "missing".
//!
//! Written straight into a byte buffer. Every forwarder renders every event, so an
//! intermediate `serde_json::Value` tree (a map and a string per field) was the
//! largest per-event cost of the forwarders. The output is byte for byte what
//! serializing that tree gave: object keys in byte order (serde_json's default map),
//! serde_json's string escaping and number formatting.

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::Write as _;
use std::sync::LazyLock;

use prost::Message as _;
use prost_reflect::{
    DynamicMessage, FieldDescriptor, Kind, MapKey, MessageDescriptor, ReflectMessage, Value,
};

use super::limits::Depth;
#[cfg(doc)]
use super::limits::{MAX_ANY_NESTING, MAX_DEPTH};
use super::registry::Registry;
use super::time::rfc3339_nanos;

/// Proto field names, all fields (absent messages as `null`), 64-bit integers as
/// numbers, bytes as base64, Timestamps as RFC 3339 with nine fraction digits, and
/// nested Anys expanded with `"@type"` when the registry knows the type.
///
/// Publishers choose every byte of a payload, so the walk is bounded (see
/// `super::limits`): Anys are expanded [`MAX_ANY_NESTING`] deep and messages are
/// written [`MAX_DEPTH`] levels deep; beyond either, the inner bytes are kept as
/// base64 under `"@type"`/`"value"`, the form unknown types already take.
pub(crate) fn write_json(out: &mut Vec<u8>, msg: &DynamicMessage) {
    write_message(out, msg, Depth::default());
}

fn write_message(out: &mut Vec<u8>, msg: &DynamicMessage, depth: Depth) {
    let desc = msg.descriptor();
    let Some(depth) = depth.enter() else {
        return write_raw(out, desc.full_name(), &msg.encode_to_vec());
    };
    match desc.full_name() {
        "google.protobuf.Timestamp" => write_plain_string(out, &rfc3339_nanos(&timestamp(msg))),
        "google.protobuf.Any" => write_any(out, msg, depth),
        _ => write_fields(out, msg, None, depth),
    }
}

/// [`write_json`] as a string.
pub(crate) fn to_json_string(msg: &DynamicMessage) -> String {
    let mut out = Vec::with_capacity(256);
    write_json(&mut out, msg);
    // Everything written is either ASCII punctuation or serde_json's (UTF-8) output.
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// Every message type of the registry with its fields sorted by name, the order the
/// keys are written in; computed once instead of per rendered message.
static SORTED_FIELDS: LazyLock<HashMap<String, Vec<FieldDescriptor>>> = LazyLock::new(|| {
    Registry::global()
        .pool()
        .all_messages()
        .map(|desc| (desc.full_name().to_owned(), sort_fields(&desc)))
        .collect()
});

fn sort_fields(desc: &MessageDescriptor) -> Vec<FieldDescriptor> {
    let mut fields: Vec<_> = desc.fields().collect();
    fields.sort_by(|a, b| a.name().cmp(b.name()));
    fields
}

fn sorted_fields(desc: &MessageDescriptor) -> Cow<'static, [FieldDescriptor]> {
    match SORTED_FIELDS.get(desc.full_name()) {
        // A descriptor from another pool may share a name but not the fields.
        Some(fields) if fields.first().is_none_or(|f| f.parent_message() == desc) => {
            Cow::Borrowed(fields.as_slice())
        }
        _ => Cow::Owned(sort_fields(desc)),
    }
}

/// The message's fields as an object; `type_name` first as `"@type"` for an expanded
/// Any (`@` sorts before every field name).
fn write_fields(out: &mut Vec<u8>, msg: &DynamicMessage, type_name: Option<&str>, depth: Depth) {
    out.push(b'{');
    let mut first = true;
    if let Some(name) = type_name {
        out.extend_from_slice(b"\"@type\":");
        write_string(out, name);
        first = false;
    }
    for field in sorted_fields(&msg.descriptor()).iter() {
        if !first {
            out.push(b',');
        }
        first = false;
        write_string(out, field.name());
        out.push(b':');
        let is_message = matches!(field.kind(), Kind::Message(_));
        if is_message && !field.is_list() && !field.is_map() && !msg.has_field(field) {
            out.extend_from_slice(b"null");
        } else {
            write_value(out, &msg.get_field(field), &field.kind(), depth);
        }
    }
    out.push(b'}');
}

fn write_value(out: &mut Vec<u8>, value: &Value, kind: &Kind, depth: Depth) {
    match value {
        Value::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::I32(n) => write_number(out, n),
        Value::I64(n) => write_number(out, n),
        Value::U32(n) => write_number(out, n),
        Value::U64(n) => write_number(out, n),
        Value::F32(f) => write_float(out, f64::from(*f)),
        Value::F64(f) => write_float(out, *f),
        Value::String(s) => write_string(out, s),
        Value::Bytes(b) => write_plain_string(out, &base64(b)),
        Value::EnumNumber(n) => match kind.as_enum().and_then(|e| e.get_value(*n)) {
            Some(v) => write_string(out, v.name()),
            None => write_number(out, n),
        },
        Value::Message(m) => write_message(out, m, depth),
        Value::List(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value(out, item, kind, depth);
            }
            out.push(b']');
        }
        Value::Map(entries) => {
            let value_kind = kind
                .as_message()
                .map(|entry| entry.map_entry_value_field().kind());
            let mut sorted: Vec<_> = entries
                .iter()
                .map(|(k, v)| (map_key_string(k), v))
                .collect();
            sorted.sort_by(|a, b| a.0.cmp(&b.0));
            out.push(b'{');
            for (i, (key, v)) in sorted.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_string(out, key);
                out.push(b':');
                write_value(out, v, value_kind.as_ref().unwrap_or(kind), depth);
            }
            out.push(b'}');
        }
    }
}

fn write_number(out: &mut Vec<u8>, n: impl std::fmt::Display) {
    // Writing into a Vec cannot fail.
    let _ = write!(out, "{n}");
}

/// Finite floats as serde_json prints them (shortest round trip); protojson's
/// spelling for the ones JSON numbers cannot carry.
pub(super) fn write_float(out: &mut Vec<u8>, f: f64) {
    if f.is_finite() {
        let _ = serde_json::to_writer(&mut *out, &f);
    } else if f.is_nan() {
        out.extend_from_slice(b"\"NaN\"");
    } else if f > 0.0 {
        out.extend_from_slice(b"\"Infinity\"");
    } else {
        out.extend_from_slice(b"\"-Infinity\"");
    }
}

/// A JSON string with serde_json's escaping.
fn write_string(out: &mut Vec<u8>, s: &str) {
    let _ = serde_json::to_writer(&mut *out, s);
}

/// A string known to need no escaping (base64, RFC 3339 times).
fn write_plain_string(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    out.extend_from_slice(s.as_bytes());
    out.push(b'"');
}

pub(super) fn map_key_string(key: &MapKey) -> String {
    match key {
        MapKey::Bool(b) => b.to_string(),
        MapKey::I32(n) => n.to_string(),
        MapKey::I64(n) => n.to_string(),
        MapKey::U32(n) => n.to_string(),
        MapKey::U64(n) => n.to_string(),
        MapKey::String(s) => s.clone(),
    }
}

fn timestamp(msg: &DynamicMessage) -> prost_types::Timestamp {
    let field = |name| msg.get_field_by_name(name);
    prost_types::Timestamp {
        seconds: field("seconds").and_then(|v| v.as_i64()).unwrap_or(0),
        nanos: field("nanos").and_then(|v| v.as_i32()).unwrap_or(0),
    }
}

/// Expands a nested Any the way protojson does, but never fails: a type the registry
/// cannot decode, or an Any nested deeper than [`MAX_ANY_NESTING`], keeps its raw
/// bytes so nothing is lost.
fn write_any(out: &mut Vec<u8>, msg: &DynamicMessage, depth: Depth) {
    let type_url = msg
        .get_field_by_name("type_url")
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    // The inner message is decoded from a view of the outer buffer, not a copy, so an
    // Any nested n deep costs its bytes once rather than n times.
    let value = msg
        .get_field_by_name("value")
        .and_then(|v| v.as_bytes().cloned())
        .unwrap_or_default();
    let decoded = match depth.enter_any() {
        Some(inner_depth) => Registry::global()
            .decode_bytes(&type_url, value.clone())
            .ok()
            .map(|inner| (inner, inner_depth)),
        None => None,
    };
    match decoded {
        Some((inner, depth)) => match inner.descriptor().full_name() {
            // Well-known types with a scalar JSON form nest under "value".
            "google.protobuf.Timestamp" => {
                out.extend_from_slice(b"{\"@type\":\"google.protobuf.Timestamp\",\"value\":");
                write_message(out, &inner, depth);
                out.push(b'}');
            }
            // The inner Any's own "@type" replaces the outer one.
            "google.protobuf.Any" => write_any(out, &inner, depth),
            name => write_fields(out, &inner, Some(name), depth),
        },
        None => write_raw(out, &type_url, &value),
    }
}

/// `{"@type":...,"value":<base64>}`: a payload kept as bytes.
fn write_raw(out: &mut Vec<u8>, type_url: &str, value: &[u8]) {
    out.extend_from_slice(b"{\"@type\":");
    write_string(out, type_url);
    out.extend_from_slice(b",\"value\":");
    write_plain_string(out, &base64(value));
    out.push(b'}');
}

/// Standard, padded base64, as both protojson and Go's `encoding/json` use for bytes.
pub(super) fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
#[path = "json_tests.rs"]
mod tests;
