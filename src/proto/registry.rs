//! Resolves type_urls to message descriptors, so any event can be decoded, rendered
//! and filtered by name without per-type Rust code.

use std::sync::LazyLock;

use bytes::{Buf, Bytes};
use prost::Message as _;
use prost_reflect::{DescriptorPool, DynamicMessage, MessageDescriptor};
use prost_types::Any;

use super::DESCRIPTOR_SET;
use super::limits::within_value_budget;

/// containerd's standard topics and the bare type_url each carries (spec 3.2).
pub(crate) const STANDARD_EVENTS: &[(&str, &str)] = &[
    ("/tasks/create", "containerd.events.TaskCreate"),
    ("/tasks/start", "containerd.events.TaskStart"),
    ("/tasks/delete", "containerd.events.TaskDelete"),
    ("/tasks/exit", "containerd.events.TaskExit"),
    ("/tasks/oom", "containerd.events.TaskOOM"),
    ("/tasks/exec-added", "containerd.events.TaskExecAdded"),
    ("/tasks/exec-started", "containerd.events.TaskExecStarted"),
    ("/tasks/paused", "containerd.events.TaskPaused"),
    ("/tasks/resumed", "containerd.events.TaskResumed"),
    ("/tasks/checkpointed", "containerd.events.TaskCheckpointed"),
    ("/containers/create", "containerd.events.ContainerCreate"),
    ("/containers/update", "containerd.events.ContainerUpdate"),
    ("/containers/delete", "containerd.events.ContainerDelete"),
    (
        "/images/create",
        "containerd.services.images.v1.ImageCreate",
    ),
    (
        "/images/update",
        "containerd.services.images.v1.ImageUpdate",
    ),
    (
        "/images/delete",
        "containerd.services.images.v1.ImageDelete",
    ),
    ("/namespaces/create", "containerd.events.NamespaceCreate"),
    ("/namespaces/update", "containerd.events.NamespaceUpdate"),
    ("/namespaces/delete", "containerd.events.NamespaceDelete"),
    ("/content/create", "containerd.events.ContentCreate"),
    ("/content/delete", "containerd.events.ContentDelete"),
    ("/snapshot/prepare", "containerd.events.SnapshotPrepare"),
    ("/snapshot/commit", "containerd.events.SnapshotCommit"),
    ("/snapshot/remove", "containerd.events.SnapshotRemove"),
    ("/sandboxes/create", "containerd.events.SandboxCreate"),
    ("/sandboxes/start", "containerd.events.SandboxStart"),
    ("/sandboxes/exit", "containerd.events.SandboxExit"),
];

#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("unknown event type {type_url:?}")]
    UnknownType { type_url: String },
    #[error(
        "{type_url} payload of {bytes} bytes holds more values than the {per} bytes per value (plus {allowed}) eventgate decodes; kept as raw bytes",
        per = super::limits::BYTES_PER_VALUE,
        allowed = super::limits::VALUES_ALLOWED
    )]
    TooManyValues { type_url: String, bytes: usize },
    #[error("malformed {type_url} payload")]
    Malformed {
        type_url: String,
        #[source]
        source: prost::DecodeError,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum EncodeError {
    /// `suggestion` is a ready-made " (did you mean ...?)" or empty; `known` lists the
    /// standard event types, since the caller has no other way to discover them.
    #[error("unknown message type {type_name:?}{suggestion}; known event types: {known}")]
    UnknownType {
        type_name: String,
        suggestion: String,
        known: String,
    },
    #[error("invalid JSON for {type_name}")]
    Json {
        type_name: String,
        #[source]
        source: serde_json::Error,
    },
}

pub struct Registry {
    pool: DescriptorPool,
}

static GLOBAL: LazyLock<Registry> = LazyLock::new(|| Registry {
    pool: DescriptorPool::decode(DESCRIPTOR_SET)
        .expect("build.rs wrote an invalid descriptor set; rebuild eventgate"),
});

impl Registry {
    pub fn global() -> &'static Registry {
        &GLOBAL
    }

    pub fn pool(&self) -> &DescriptorPool {
        &self.pool
    }

    /// Resolves like Go's `protoregistry.FindMessageByURL` (containerd 2.x): anything
    /// up to the last `/` is ignored, so prefixed and bare type_urls both resolve.
    pub fn message(&self, type_url: &str) -> Option<MessageDescriptor> {
        let name = type_url.rsplit_once('/').map_or(type_url, |(_, name)| name);
        self.pool.get_message_by_name(name)
    }

    pub fn decode(&self, any: &Any) -> Result<DynamicMessage, DecodeError> {
        self.decode_from(&any.type_url, any.value.as_slice())
    }

    /// [`Registry::decode`] for a payload held as [`Bytes`]: its `bytes` fields (an
    /// inner Any's value among them) are views of `value`, not copies.
    pub fn decode_bytes(
        &self,
        type_url: &str,
        value: Bytes,
    ) -> Result<DynamicMessage, DecodeError> {
        self.decode_from(type_url, value)
    }

    fn decode_from(
        &self,
        type_url: &str,
        value: impl Buf + AsRef<[u8]>,
    ) -> Result<DynamicMessage, DecodeError> {
        let desc = self
            .message(type_url)
            .ok_or_else(|| DecodeError::UnknownType {
                type_url: type_url.to_owned(),
            })?;
        if !within_value_budget(&desc, value.as_ref()) {
            return Err(DecodeError::TooManyValues {
                type_url: type_url.to_owned(),
                bytes: value.as_ref().len(),
            });
        }
        DynamicMessage::decode(desc, value).map_err(|source| DecodeError::Malformed {
            type_url: type_url.to_owned(),
            source,
        })
    }

    /// Builds an event payload from protobuf JSON (proto or lowerCamel field names).
    /// The type_url is always the bare name, because containerd 1.6 peers cannot
    /// resolve prefixed ones (spec 3.1).
    pub fn encode_json(&self, type_name: &str, json: &str) -> Result<Any, EncodeError> {
        let desc = self
            .message(type_name)
            .ok_or_else(|| unknown_type(type_name))?;
        let full_name = desc.full_name().to_owned();
        let mut de = serde_json::Deserializer::from_str(json);
        let msg = DynamicMessage::deserialize(desc, &mut de)
            .and_then(|msg| de.end().map(|()| msg))
            .map_err(|source| EncodeError::Json {
                type_name: full_name.clone(),
                source,
            })?;
        Ok(Any {
            type_url: full_name,
            value: msg.encode_to_vec(),
        })
    }

    pub fn event_types(&self) -> Vec<&'static str> {
        STANDARD_EVENTS
            .iter()
            .map(|&(_, type_url)| type_url)
            .collect()
    }
}

fn unknown_type(type_name: &str) -> EncodeError {
    let short = type_name.rsplit(['/', '.']).next().unwrap_or(type_name);
    let suggestion = STANDARD_EVENTS
        .iter()
        .find(|(_, t)| t.rsplit('.').next() == Some(short))
        .map(|(_, t)| format!(" (did you mean {t:?}?)"))
        .unwrap_or_default();
    EncodeError::UnknownType {
        type_name: type_name.to_owned(),
        suggestion,
        known: Registry::global().event_types().join(", "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::containerd::events::TaskExit;
    use prost_reflect::ReflectMessage;
    use std::error::Error as _;

    fn task_exit_any(type_url: &str) -> Any {
        let exit = TaskExit {
            container_id: "c1".into(),
            id: "c1".into(),
            pid: 1234,
            exit_status: 137,
            exited_at: Some(prost_types::Timestamp {
                seconds: 1_714_557_600,
                nanos: 123_456_789,
            }),
        };
        Any {
            type_url: type_url.into(),
            value: exit.encode_to_vec(),
        }
    }

    #[test]
    fn every_standard_event_resolves() {
        let reg = Registry::global();
        for (topic, type_url) in STANDARD_EVENTS {
            let desc = reg.message(type_url);
            assert!(desc.is_some(), "{topic}: {type_url} is not in the registry");
        }
        assert_eq!(reg.event_types().len(), STANDARD_EVENTS.len());
    }

    #[test]
    fn decodes_bare_and_prefixed_type_urls() {
        let reg = Registry::global();
        for url in [
            "containerd.events.TaskExit",
            "type.googleapis.com/containerd.events.TaskExit",
            "a/b/containerd.events.TaskExit",
        ] {
            let msg = reg.decode(&task_exit_any(url)).expect(url);
            assert_eq!(msg.descriptor().full_name(), "containerd.events.TaskExit");
            let pid = msg.get_field_by_name("pid").and_then(|v| v.as_u32());
            assert_eq!(pid, Some(1234));
        }
    }

    #[test]
    fn runc_options_and_envelope_types_resolve() {
        let reg = Registry::global();
        assert!(reg.message("containerd.runc.v1.Options").is_some());
        assert!(reg.message("containerd.types.Envelope").is_some());
        assert!(reg.message("").is_none());
        assert!(reg.message("type.googleapis.com/").is_none());
    }

    #[test]
    fn unknown_type_is_reported_with_its_url() {
        let any = Any {
            type_url: "example.com/Custom".into(),
            value: vec![1, 2, 3],
        };
        match Registry::global().decode(&any) {
            Err(DecodeError::UnknownType { type_url }) => {
                assert_eq!(type_url, "example.com/Custom")
            }
            other => panic!("expected UnknownType, got {other:?}"),
        }
    }

    #[test]
    fn malformed_bytes_keep_the_prost_error() {
        let any = Any {
            type_url: "containerd.events.TaskExit".into(),
            // Field 1 (string) claims 100 bytes but only 1 follows.
            value: vec![0x0a, 100, b'x'],
        };
        let err = Registry::global().decode(&any).unwrap_err();
        assert!(matches!(err, DecodeError::Malformed { .. }), "{err:?}");
        assert!(err.source().is_some());
        assert!(err.to_string().contains("containerd.events.TaskExit"));
    }

    #[test]
    fn encode_json_round_trips_every_standard_event() {
        let reg = Registry::global();
        for (_, type_url) in STANDARD_EVENTS {
            let desc = reg.message(type_url).expect(type_url);
            // Fill every string field so the round trip checks each field's name.
            let mut json = serde_json::Map::new();
            for field in desc.fields() {
                if field.kind() == prost_reflect::Kind::String && !field.is_list() {
                    json.insert(field.name().into(), format!("v-{}", field.name()).into());
                }
            }
            let text = serde_json::Value::Object(json.clone()).to_string();
            let any = reg.encode_json(type_url, &text).expect(type_url);
            assert_eq!(&any.type_url, type_url);
            let back = reg.decode(&any).expect(type_url);
            for (name, value) in &json {
                let got = back.get_field_by_name(name).expect(name);
                assert_eq!(got.as_str(), value.as_str(), "{type_url}.{name}");
            }
        }
    }

    #[test]
    fn encode_json_accepts_both_name_styles_and_strips_prefixes() {
        let reg = Registry::global();
        let json = r#"{"containerId":"c1","id":"c1","pid":1234,"exit_status":137,
            "exitedAt":"2024-05-01T10:00:00.123456789Z"}"#;
        let any = reg
            .encode_json("type.googleapis.com/containerd.events.TaskExit", json)
            .unwrap();
        assert_eq!(any.type_url, "containerd.events.TaskExit");
        assert_eq!(any, task_exit_any("containerd.events.TaskExit"));
    }

    #[test]
    fn encode_json_errors() {
        let reg = Registry::global();
        let err = reg.encode_json("TaskExit", "{}").unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("\"TaskExit\" (did you mean \"containerd.events.TaskExit\"?); known"),
            "{text}"
        );
        assert!(
            text.contains("containerd.services.images.v1.ImageCreate"),
            "{text}"
        );

        let err = reg
            .encode_json("containerd.events.TaskExit", r#"{"pid":"x"}"#)
            .unwrap_err();
        assert!(matches!(err, EncodeError::Json { .. }));
        assert!(err.source().is_some_and(|s| !s.to_string().is_empty()));

        for bad in [r#"{"nope":1}"#, "{", r#"{"pid":1} trailing"#] {
            let err = reg.encode_json("containerd.events.TaskExit", bad);
            assert!(matches!(err, Err(EncodeError::Json { .. })), "{bad}");
        }
    }
}
