//! `event.<path>` selectors as SQL. The fieldpath adaptor's rules depend only on the
//! event type's descriptor, so for each type with an adaptor the path is resolved once
//! here to a place in the stored `event` JSON (which holds every field, defaults
//! included, and `null` for unset messages) or to "never present".

use prost_reflect::{Kind, MessageDescriptor};

use crate::proto::{Registry, has_adaptor};

/// Where a resolved path's value lives in the `event` JSON.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    /// A string field: present when non-empty.
    String { json_path: String },
    /// A bool field: always present, as `true` or `false`.
    Bool { json_path: String },
    /// A `map<string,string>` entry: present when the key exists.
    Label { map_path: String, key: String },
}

/// The path crosses something whose value depends on more than the descriptor (a
/// nested `Any` is decoded through the registry by its own type_url).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Unsupported;

/// For each event type (full name) whose adaptor can find `path`, where it is.
/// Types not listed never have the field.
pub(crate) fn resolve_all(path: &[String]) -> Result<Vec<(String, Access)>, Unsupported> {
    let mut found = Vec::new();
    for desc in Registry::global().pool().all_messages() {
        if !has_adaptor(&desc) {
            continue;
        }
        if let Some(access) = resolve(&desc, path, "$".to_owned())? {
            found.push((desc.full_name().to_owned(), access));
        }
    }
    found.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(found)
}

/// Mirrors `proto::fieldpath::field`, case by case.
fn resolve(
    desc: &MessageDescriptor,
    path: &[String],
    parent: String,
) -> Result<Option<Access>, Unsupported> {
    let Some((first, rest)) = path.split_first() else {
        return Ok(None);
    };
    let Some(fd) = desc.get_field_by_name(first) else {
        return Ok(None);
    };
    // Proto field names are identifiers, so they need no quoting in a JSON path;
    // anything else is left to the in-memory matcher rather than guessed at.
    if !fd
        .name()
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_')
    {
        return Err(Unsupported);
    }
    if fd.is_list() {
        return Ok(None);
    }
    let json_path = format!("{parent}.{}", fd.name());
    if fd.is_map() {
        let Some(entry) = fd.kind().as_message().cloned() else {
            return Ok(None);
        };
        let strings = entry.map_entry_key_field().kind() == Kind::String
            && entry.map_entry_value_field().kind() == Kind::String;
        return Ok(strings.then(|| Access::Label {
            map_path: json_path,
            key: rest.join("."),
        }));
    }
    Ok(match fd.kind() {
        Kind::String => Some(Access::String { json_path }),
        Kind::Bool => Some(Access::Bool { json_path }),
        Kind::Message(inner) => match inner.full_name() {
            "google.protobuf.Any" => return Err(Unsupported),
            name if name.starts_with("google.protobuf.") => None,
            _ => resolve(&inner, rest, json_path)?,
        },
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(text: &str) -> Vec<String> {
        text.split('.').map(str::to_owned).collect()
    }

    #[test]
    fn container_id_is_a_string_in_task_events() {
        let found = resolve_all(&path("container_id")).unwrap();
        let exit = found
            .iter()
            .find(|(name, _)| name == "containerd.events.TaskExit")
            .map(|(_, access)| access.clone());
        assert_eq!(
            exit,
            Some(Access::String {
                json_path: "$.container_id".into()
            })
        );
    }

    #[test]
    fn labels_join_the_rest_of_the_path_into_one_key() {
        let found = resolve_all(&path("labels.io.k8s.pod")).unwrap();
        assert!(found.iter().any(|(_, a)| *a
            == Access::Label {
                map_path: "$.labels".into(),
                key: "io.k8s.pod".into()
            }));
    }

    #[test]
    fn numbers_and_unknown_fields_are_never_present() {
        assert_eq!(resolve_all(&path("exit_status")).unwrap(), []);
        assert_eq!(resolve_all(&path("no_such_field")).unwrap(), []);
    }
}
