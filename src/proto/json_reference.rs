//! The JSON rendering as it was first written, through a `serde_json::Value` tree.
//! Kept only as the oracle the direct writer in `json.rs` is checked against.

use prost_reflect::{DynamicMessage, Kind, ReflectMessage, Value};
use serde_json::{Map, Number, Value as Json};

use super::declared_fields;
use super::json::{base64, map_key_string};
use super::registry::Registry;
use super::time::rfc3339_nanos;

/// Proto field names, all fields (absent messages as `null`), 64-bit integers as
/// numbers, bytes as base64, Timestamps as RFC 3339 with nine fraction digits, and
/// nested Anys expanded with `"@type"` when the registry knows the type.
pub fn to_json(msg: &DynamicMessage) -> Json {
    match msg.descriptor().full_name() {
        "google.protobuf.Timestamp" => Json::String(rfc3339_nanos(&timestamp(msg))),
        "google.protobuf.Any" => any_json(msg),
        _ => {
            let mut obj = Map::new();
            for field in declared_fields(&msg.descriptor()) {
                let is_message = matches!(field.kind(), Kind::Message(_));
                let value = if is_message
                    && !field.is_list()
                    && !field.is_map()
                    && !msg.has_field(&field)
                {
                    Json::Null
                } else {
                    value_json(&msg.get_field(&field), &field.kind())
                };
                obj.insert(field.name().to_owned(), value);
            }
            Json::Object(obj)
        }
    }
}

fn value_json(value: &Value, kind: &Kind) -> Json {
    match value {
        Value::Bool(b) => Json::Bool(*b),
        Value::I32(n) => Json::from(*n),
        Value::I64(n) => Json::from(*n),
        Value::U32(n) => Json::from(*n),
        Value::U64(n) => Json::from(*n),
        Value::F32(f) => float_json(f64::from(*f)),
        Value::F64(f) => float_json(*f),
        Value::String(s) => Json::String(s.clone()),
        Value::Bytes(b) => Json::String(base64(b)),
        Value::EnumNumber(n) => match kind.as_enum().and_then(|e| e.get_value(*n)) {
            Some(v) => Json::String(v.name().to_owned()),
            None => Json::from(*n),
        },
        Value::Message(m) => to_json(m),
        Value::List(items) => Json::Array(items.iter().map(|v| value_json(v, kind)).collect()),
        Value::Map(entries) => {
            let value_kind = kind
                .as_message()
                .map(|entry| entry.map_entry_value_field().kind());
            let obj = entries
                .iter()
                .map(|(k, v)| {
                    let v = match &value_kind {
                        Some(vk) => value_json(v, vk),
                        None => value_json(v, kind),
                    };
                    (map_key_string(k), v)
                })
                .collect();
            Json::Object(obj)
        }
    }
}

/// protojson's spelling for the floats JSON numbers cannot carry.
pub(crate) fn float_json(f: f64) -> Json {
    match Number::from_f64(f) {
        Some(n) => Json::Number(n),
        None if f.is_nan() => Json::String("NaN".into()),
        None if f > 0.0 => Json::String("Infinity".into()),
        None => Json::String("-Infinity".into()),
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
/// cannot decode keeps its raw bytes so nothing is lost.
fn any_json(msg: &DynamicMessage) -> Json {
    let any = prost_types::Any {
        type_url: msg
            .get_field_by_name("type_url")
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default(),
        value: msg
            .get_field_by_name("value")
            .and_then(|v| v.as_bytes().map(|b| b.to_vec()))
            .unwrap_or_default(),
    };
    let mut obj = Map::new();
    match Registry::global().decode(&any) {
        Ok(inner) => {
            obj.insert("@type".into(), inner.descriptor().full_name().into());
            match to_json(&inner) {
                Json::Object(fields) => obj.extend(fields),
                // Well-known types with a scalar JSON form nest under "value".
                other => {
                    obj.insert("value".into(), other);
                }
            }
        }
        Err(_) => {
            obj.insert("@type".into(), any.type_url.into());
            obj.insert("value".into(), base64(&any.value).into());
        }
    }
    Json::Object(obj)
}
