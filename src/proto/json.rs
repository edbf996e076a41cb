//! The canonical JSON of a decoded event (JSON lines, SQLite): every field present,
//! defaults included, so consumers never need the schema to tell "0" from "missing".

use prost_reflect::{DynamicMessage, Kind, MapKey, ReflectMessage, Value};
use serde_json::{Map, Number, Value as Json};

use super::declared_fields;
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
fn float_json(f: f64) -> Json {
    match Number::from_f64(f) {
        Some(n) => Json::Number(n),
        None if f.is_nan() => Json::String("NaN".into()),
        None if f > 0.0 => Json::String("Infinity".into()),
        None => Json::String("-Infinity".into()),
    }
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
mod tests {
    use super::*;
    use crate::proto::containerd::events::{ContainerCreate, TaskExit, container_create::Runtime};
    use crate::proto::containerd::runc::v1::Options;
    use prost::Message as _;
    use serde_json::json;

    fn decode(type_url: &str, msg: &impl prost::Message) -> DynamicMessage {
        let any = prost_types::Any {
            type_url: type_url.into(),
            value: msg.encode_to_vec(),
        };
        Registry::global().decode(&any).expect(type_url)
    }

    #[test]
    fn base64_matches_rfc4648_vectors() {
        let cases = [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ];
        for (input, want) in cases {
            assert_eq!(base64(input.as_bytes()), want);
        }
        assert_eq!(base64(&[0xff, 0xfe]), "//4=");
    }

    #[test]
    fn defaults_are_present_and_timestamps_are_rfc3339() {
        let exit = TaskExit {
            container_id: "c1".into(),
            exited_at: Some(prost_types::Timestamp {
                seconds: 1_714_557_600,
                nanos: 123_456_789,
            }),
            ..Default::default()
        };
        let got = to_json(&decode("containerd.events.TaskExit", &exit));
        let want = json!({
            "container_id": "c1", "id": "", "pid": 0, "exit_status": 0,
            "exited_at": "2024-05-01T10:00:00.123456789Z",
        });
        assert_eq!(got, want);

        let unset = to_json(&decode("containerd.events.TaskExit", &TaskExit::default()));
        assert_eq!(unset["exited_at"], Json::Null);
        assert_eq!(unset["exit_status"], json!(0));
    }

    #[test]
    fn nested_any_known_type_is_expanded() {
        let options = Options {
            binary_name: "runc".into(),
            systemd_cgroup: true,
            ..Default::default()
        };
        let create = ContainerCreate {
            id: "c1".into(),
            image: String::new(),
            runtime: Some(Runtime {
                name: "io.containerd.runc.v2".into(),
                options: Some(prost_types::Any {
                    type_url: "type.googleapis.com/containerd.runc.v1.Options".into(),
                    value: options.encode_to_vec(),
                }),
            }),
        };
        let got = to_json(&decode("containerd.events.ContainerCreate", &create));
        let opts = &got["runtime"]["options"];
        assert_eq!(opts["@type"], "containerd.runc.v1.Options");
        assert_eq!(opts["binary_name"], "runc");
        assert_eq!(opts["systemd_cgroup"], true);
        assert_eq!(opts["io_uid"], 0);
        assert_eq!(got["image"], "");
    }

    #[test]
    fn nested_any_unknown_type_keeps_bytes() {
        let create = ContainerCreate {
            id: "c1".into(),
            runtime: Some(Runtime {
                name: "io.example.v1".into(),
                options: Some(prost_types::Any {
                    type_url: "example.com/Opaque".into(),
                    value: b"foo".to_vec(),
                }),
            }),
            ..Default::default()
        };
        let got = to_json(&decode("containerd.events.ContainerCreate", &create));
        assert_eq!(
            got["runtime"]["options"],
            json!({"@type": "example.com/Opaque", "value": "Zm9v"})
        );
        let no_runtime = ContainerCreate::default();
        let got = to_json(&decode("containerd.events.ContainerCreate", &no_runtime));
        assert_eq!(got["runtime"], Json::Null);
    }

    #[test]
    fn maps_repeated_and_64_bit_numbers() {
        let reg = Registry::global();
        let any = reg
            .encode_json(
                "containerd.events.ContainerUpdate",
                r#"{"id":"c1","labels":{"b":"2","a":""}}"#,
            )
            .unwrap();
        let got = to_json(&reg.decode(&any).unwrap());
        assert_eq!(got["labels"], json!({"a": "", "b": "2"}));
        assert_eq!(got["snapshot_key"], "");

        let any = reg
            .encode_json(
                "containerd.events.ContentCreate",
                r#"{"size":"9007199254740993"}"#,
            )
            .unwrap();
        let got = to_json(&reg.decode(&any).unwrap());
        assert_eq!(got["size"], json!(9_007_199_254_740_993_i64));
        assert_eq!(got["mediaType"], "");

        let any = reg
            .encode_json(
                "containerd.events.TaskCreate",
                r#"{"rootfs":[{"type":"overlay","options":["ro"]}]}"#,
            )
            .unwrap();
        let got = to_json(&reg.decode(&any).unwrap());
        assert_eq!(
            got["rootfs"],
            json!([{"type": "overlay", "source": "", "target": "", "options": ["ro"]}])
        );
        assert_eq!(got["io"], Json::Null);
    }

    #[test]
    fn non_finite_floats_use_protojson_strings() {
        assert_eq!(float_json(f64::NAN), json!("NaN"));
        assert_eq!(float_json(f64::INFINITY), json!("Infinity"));
        assert_eq!(float_json(f64::NEG_INFINITY), json!("-Infinity"));
        assert_eq!(float_json(1.5), json!(1.5));
    }
}
