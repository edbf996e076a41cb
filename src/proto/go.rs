//! Byte-for-byte what `ctr events` (containerd 2.x) prints for an event: Go's
//! `encoding/json` applied to the protoc-gen-go struct. Those structs tag every field
//! `json:"<proto name>,omitempty"` and Timestamp/Any are plain structs there, so one
//! generic walk reproduces it, with `has_field` standing in for `omitempty`.

use std::fmt::Write as _;

use prost_reflect::{DynamicMessage, Kind, ReflectMessage, Value};

use super::declared_fields;
use super::json::{base64, map_key_string};

pub(crate) fn to_go_json(msg: &DynamicMessage) -> String {
    let mut out = String::new();
    write_message(&mut out, msg);
    out
}

fn write_message(out: &mut String, msg: &DynamicMessage) {
    out.push('{');
    let mut first = true;
    for field in declared_fields(&msg.descriptor()) {
        if !msg.has_field(&field) {
            continue;
        }
        let value = msg.get_field(&field);
        // Explicit-presence bytes are still a plain []byte in Go, so omitempty drops
        // them when empty even though they are "set".
        if matches!(&*value, Value::Bytes(b) if b.is_empty()) {
            continue;
        }
        if !first {
            out.push(',');
        }
        first = false;
        write_string(out, field.name());
        out.push(':');
        write_value(out, &value, &field.kind());
    }
    out.push('}');
}

fn write_value(out: &mut String, value: &Value, kind: &Kind) {
    match value {
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::I32(n) => push_display(out, n),
        Value::I64(n) => push_display(out, n),
        Value::U32(n) => push_display(out, n),
        Value::U64(n) => push_display(out, n),
        Value::F32(f) => write_float(out, f64::from(*f), format!("{f}"), format!("{f:e}")),
        Value::F64(f) => write_float(out, *f, format!("{f}"), format!("{f:e}")),
        Value::String(s) => write_string(out, s),
        Value::Bytes(b) => {
            out.push('"');
            out.push_str(&base64(b));
            out.push('"');
        }
        // Go enums are int32 types without a MarshalJSON, so they print as numbers.
        Value::EnumNumber(n) => push_display(out, n),
        Value::Message(m) => write_message(out, m),
        Value::List(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item, kind);
            }
            out.push(']');
        }
        Value::Map(entries) => {
            let value_kind = kind
                .as_message()
                .map(|entry| entry.map_entry_value_field().kind());
            // encoding/json sorts map keys by their string form, integers included.
            let mut sorted: Vec<_> = entries
                .iter()
                .map(|(k, v)| (map_key_string(k), v))
                .collect();
            sorted.sort_by(|a, b| a.0.cmp(&b.0));
            out.push('{');
            for (i, (key, v)) in sorted.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(out, key);
                out.push(':');
                write_value(out, v, value_kind.as_ref().unwrap_or(kind));
            }
            out.push('}');
        }
    }
}

fn push_display(out: &mut String, n: impl std::fmt::Display) {
    let _ = write!(out, "{n}");
}

/// Go's float encoder: shortest round-trip digits, plain notation unless the
/// magnitude is below 1e-6 or at least 1e21, and exponents as "e+21" / "e-7".
/// `plain` and `exp` are Rust's shortest renderings at the value's own width.
fn write_float(out: &mut String, f: f64, plain: String, exp: String) {
    if !f.is_finite() {
        // encoding/json refuses these; null is the closest thing that still parses.
        out.push_str("null");
        return;
    }
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        match exp.split_once('e') {
            Some((mantissa, e)) if !e.starts_with('-') => {
                let _ = write!(out, "{mantissa}e+{e}");
            }
            _ => out.push_str(&exp),
        }
    } else {
        out.push_str(&plain);
    }
}

/// Go's `encoding/json` string escaping with its default HTML-safe mode.
fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            // Go 1.22+ (every containerd 2.x build) uses the short forms for these two.
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
#[path = "go_tests.rs"]
mod tests;
