//! The direct JSON writer against the `serde_json::Value` rendering it replaced, on
//! every message type of the registry, filled with awkward values.

use prost::Message as _;
use prost_reflect::{DynamicMessage, Kind, MapKey, MessageDescriptor, Value};

use crate::proto::containerd::events::TaskExit;
use crate::proto::json::to_json_string;
use crate::proto::json_reference::to_json;
use crate::proto::registry::Registry;

fn any_value(type_url: &str, value: Vec<u8>) -> Value {
    let desc = Registry::global()
        .message("google.protobuf.Any")
        .expect("Any is in the registry");
    let mut any = DynamicMessage::new(desc);
    any.set_field_by_name("type_url", Value::String(type_url.into()));
    any.set_field_by_name("value", Value::Bytes(value.into()));
    Value::Message(any)
}

/// Nested Anys of every shape the writer treats differently.
fn sample_any(seed: u32) -> Value {
    let exit = TaskExit {
        container_id: "c<1>".into(),
        pid: seed,
        ..Default::default()
    };
    let timestamp = prost_types::Timestamp {
        seconds: -62_135_596_800,
        nanos: 5,
    };
    match seed % 6 {
        0 => any_value("containerd.events.TaskExit", exit.encode_to_vec()),
        1 => any_value("example.com/Opaque\"x", vec![0, 1, 2, 0xff]),
        2 => any_value(
            "type.googleapis.com/google.protobuf.Timestamp",
            timestamp.encode_to_vec(),
        ),
        3 => {
            let inner = prost_types::Any {
                type_url: "containerd.events.TaskExit".into(),
                value: exit.encode_to_vec(),
            };
            any_value("google.protobuf.Any", inner.encode_to_vec())
        }
        4 => any_value("containerd.events.TaskExit", vec![0x0a, 100]),
        _ => any_value("", Vec::new()),
    }
}

fn scalar(kind: &Kind, depth: usize, seed: u32) -> Option<Value> {
    let text = [
        "plain",
        "q\"b\\s/\n\r\t\u{1}\u{1f}\u{7f}",
        "<é>&\u{2028}😀",
        "",
    ];
    let doubles = [1.5, -0.0, 1e21, 1e-7, f64::NAN, f64::INFINITY, 0.1];
    Some(match kind {
        Kind::Double => Value::F64(doubles[seed as usize % doubles.len()]),
        Kind::Float => Value::F32([0.1, -3.25e-9, f32::NEG_INFINITY][seed as usize % 3]),
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => Value::I32(i32::MIN + seed as i32),
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => Value::I64(-9_007_199_254_740_993),
        Kind::Uint32 | Kind::Fixed32 => Value::U32(u32::MAX - seed),
        Kind::Uint64 | Kind::Fixed64 => Value::U64(u64::MAX - u64::from(seed)),
        Kind::Bool => Value::Bool(seed.is_multiple_of(2)),
        Kind::String => Value::String(text[seed as usize % text.len()].into()),
        Kind::Bytes => Value::Bytes(
            vec![seed as u8, 0xfb, 0xff][..(seed as usize % 4).min(3)]
                .to_vec()
                .into(),
        ),
        Kind::Enum(e) => match seed % 2 {
            0 => Value::EnumNumber(e.values().last().map_or(0, |v| v.number())),
            _ => Value::EnumNumber(99),
        },
        Kind::Message(m) if m.full_name() == "google.protobuf.Any" => sample_any(seed),
        Kind::Message(_) if depth == 0 => return None,
        Kind::Message(m) => Value::Message(filled(m, depth - 1, seed + 1)),
    })
}

fn map_key(kind: &Kind, i: u32) -> MapKey {
    match kind {
        Kind::String => MapKey::String(["b", "a", "", "B\"", "10", "9"][i as usize % 6].into()),
        Kind::Bool => MapKey::Bool(i.is_multiple_of(2)),
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => MapKey::I32(i as i32 * 7 - 10),
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => MapKey::I64(i64::from(i) * 7 - 10),
        Kind::Uint32 | Kind::Fixed32 => MapKey::U32(i * 7),
        _ => MapKey::U64(u64::from(i) * 7),
    }
}

fn filled(desc: &MessageDescriptor, depth: usize, seed: u32) -> DynamicMessage {
    let mut msg = DynamicMessage::new(desc.clone());
    for field in desc.fields() {
        let value = if field.is_map() {
            let Some(entry) = field.kind().as_message().cloned() else {
                continue;
            };
            let key_kind = entry.map_entry_key_field().kind();
            let value_kind = entry.map_entry_value_field().kind();
            let entries = (0..4)
                .filter_map(|i| {
                    Some((
                        map_key(&key_kind, seed + i),
                        scalar(&value_kind, depth, seed + i)?,
                    ))
                })
                .collect();
            Value::Map(entries)
        } else if field.is_list() {
            let items = (0..3)
                .filter_map(|i| scalar(&field.kind(), depth, seed + i))
                .collect();
            Value::List(items)
        } else {
            match scalar(&field.kind(), depth, seed) {
                Some(value) => value,
                None => continue,
            }
        };
        msg.set_field(&field, value);
    }
    msg
}

fn assert_same(msg: &DynamicMessage, what: &str) {
    let old = to_json(msg).to_string();
    let new = to_json_string(msg);
    assert_eq!(new, old, "{what}");
}

#[test]
fn every_registered_type_renders_as_before() {
    let pool = Registry::global().pool();
    let mut checked = 0;
    for desc in pool.all_messages().filter(|d| !d.is_map_entry()) {
        let name = desc.full_name().to_owned();
        assert_same(&DynamicMessage::new(desc.clone()), &format!("{name} empty"));
        for seed in 0..8 {
            let msg = filled(&desc, 3, seed);
            assert_same(&msg, &format!("{name} seed {seed}"));
            // As the gateway sees it: decoded from the wire.
            let wire = DynamicMessage::decode(desc.clone(), msg.encode_to_vec().as_slice())
                .expect("re-decodes");
            assert_same(&wire, &format!("{name} seed {seed} from the wire"));
        }
        checked += 1;
    }
    assert!(
        checked >= 40,
        "only {checked} message types in the registry"
    );
}

/// No registered type has a float field today; a library user's own types may.
#[test]
fn floats_render_as_before() {
    let values = [
        0.0,
        -0.0,
        1.5,
        0.1,
        f64::from(0.1f32),
        1e21,
        1e-7,
        123_456_789.125,
        f64::MAX,
        f64::MIN_POSITIVE,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
    ];
    for f in values {
        let mut new = Vec::new();
        crate::proto::json::write_float(&mut new, f);
        let old = crate::proto::json_reference::float_json(f).to_string();
        assert_eq!(String::from_utf8(new).unwrap(), old, "{f}");
    }
}
