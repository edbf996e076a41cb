//! containerd's `event.<path>` filter fields. containerd generates a `Field` method
//! per event type (protoc-gen-go-fieldpath); the rules those generated methods follow
//! are applied here to any descriptor, so new event types need no code.

use prost_reflect::{DynamicMessage, Kind, MapKey, MessageDescriptor, ReflectMessage, Value};

use super::limits::Depth;
use super::registry::Registry;

/// The value of `path` inside an event, or `None` when containerd would report the
/// field as not present. Only types that have containerd adaptors answer at all:
/// for any other payload the envelope adaptor finds no `Field` method.
pub(crate) fn event_field(msg: &DynamicMessage, path: &[String]) -> Option<String> {
    adapted_field(msg, path, Depth::default())
}

fn adapted_field(msg: &DynamicMessage, path: &[String], depth: Depth) -> Option<String> {
    if !has_adaptor(&msg.descriptor()) {
        return None;
    }
    field(msg, path, depth)
}

/// containerd generates adaptors for every message in api/events/*.proto, our
/// `containerd/events/`. Decided by file, not package: image.proto lives there in the
/// images package, which the images service's own messages (no adaptors) share.
pub(crate) fn has_adaptor(desc: &MessageDescriptor) -> bool {
    desc.parent_file().name().starts_with("containerd/events/")
}

/// A filter's path is as long as its text allows (kilobytes), so the walk it drives
/// through nested messages and Anys carries the same [`Depth`] budget as rendering:
/// past it the field is "not present".
fn field(msg: &DynamicMessage, path: &[String], depth: Depth) -> Option<String> {
    let depth = depth.enter()?;
    let (first, rest) = path.split_first()?;
    let fd = msg.descriptor().get_field_by_name(first)?;
    if fd.is_list() {
        return None;
    }
    let value = msg.get_field(&fd);
    if fd.is_map() {
        return labels(&value, &fd.kind(), rest);
    }
    match (fd.kind(), &*value) {
        // Further path components after a string are ignored, as in Go.
        (Kind::String, Value::String(s)) => (!s.is_empty()).then(|| s.clone()),
        (Kind::Bool, Value::Bool(b)) => Some(b.to_string()),
        (Kind::Message(desc), Value::Message(inner)) if msg.has_field(&fd) => {
            match desc.full_name() {
                "google.protobuf.Any" => any_field(inner, rest, depth),
                // Timestamps and other well-known types are "unhandled" in the generator.
                name if name.starts_with("google.protobuf.") => None,
                _ => field(inner, rest, depth),
            }
        }
        _ => None,
    }
}

/// Only `map<string,string>` is handled (containerd special-cases labels); the rest
/// of the path, joined with ".", is the key, so `labels.a.b` looks up "a.b".
fn labels(value: &Value, kind: &Kind, rest: &[String]) -> Option<String> {
    let entry = kind.as_message()?;
    let is_string = |k: Kind| k == Kind::String;
    if !is_string(entry.map_entry_key_field().kind())
        || !is_string(entry.map_entry_value_field().kind())
    {
        return None;
    }
    let map = value.as_map()?;
    if map.is_empty() {
        return None;
    }
    match map.get(&MapKey::String(rest.join(".")))? {
        Value::String(s) => Some(s.clone()),
        _ => None,
    }
}

/// containerd unmarshals a nested Any through the type registry and recurses only if
/// the decoded type has its own adaptor (e.g. runc options have none).
fn any_field(any: &DynamicMessage, rest: &[String], depth: Depth) -> Option<String> {
    let depth = depth.enter_any()?;
    let type_url = any.get_field_by_name("type_url")?;
    let value = any.get_field_by_name("value")?.as_bytes()?.clone();
    let decoded = Registry::global()
        .decode_bytes(type_url.as_str()?, value)
        .ok()?;
    adapted_field(&decoded, rest, depth)
}

#[cfg(test)]
#[path = "fieldpath_tests.rs"]
mod tests;
