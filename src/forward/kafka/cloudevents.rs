//! CloudEvents 1.0 in the two content modes of its Kafka protocol binding, so that
//! consumers in any language read events with a CloudEvents SDK and no containerd
//! protos.
//!
//! Attributes: `id` is the gateway's event id; `source` is
//! `eventgate://{node}/{publish|forward|internal}` or
//! `eventgate://{node}/upstream/{name}`, where `node` is the node the event was
//! captured on (the forwarder's `node` option only for an event whose node is
//! unknown: spooled before nodes were kept); `type` is the payload's message name
//! (`containerd.events.TaskExit`); `subject` is the record's object key
//! (`namespace/object id`, or the namespace alone); `time` is the envelope's
//! timestamp. Extensions: `namespace`, `topic` (`/tasks/exit`), `seq`, `origin`,
//! `node` when known and, for reconciled events, `originclock` and `reconciledfrom`
//! (`containerd`, `cri` or `docker`); for an event about a container, what
//! its record said: `podname`, `podnamespace`, `poduid`, `containername`,
//! `containerkind`, `image`, `containerlabels` (a JSON object), and the manager's
//! `reason`, each when set. Every extension is a string: `seq`
//! is a `u64`, and the CloudEvents Integer type stops at 2^31 - 1.
//!
//! Data: the payload's canonical JSON (the `json` format's and the file
//! forwarder's `event` object) as `application/json`; a payload the type registry
//! cannot decode is kept as its protobuf bytes, `application/protobuf`.

use std::fmt::Write as _;
use std::io::Write as _;

use crate::event::{Event, Identity, Source};
use crate::proto::rfc3339_nanos;

/// `content-type` of a structured message (the JSON event format's media type).
pub(super) const STRUCTURED_CONTENT_TYPE: &str = "application/cloudevents+json; charset=UTF-8";
pub(super) const JSON_CONTENT_TYPE: &str = "application/json";
pub(super) const PROTOBUF_CONTENT_TYPE: &str = "application/protobuf";

/// `type` for an envelope that carries no payload type at all: the attribute is
/// required and may not be empty.
const NO_TYPE: &str = "eventgate.unknown";

/// This machine's hostname, the default `node`; empty when it cannot be read (the
/// options then refuse to start without an explicit `node`).
pub(super) fn default_node() -> String {
    crate::node::host_name()
}

/// One attribute: its name in a structured object, its binary-mode header, value.
type Attribute = (&'static str, &'static str, String);

/// Every attribute but `datacontenttype` (the binary mode's `content-type`
/// header), in the order both modes write them.
fn attributes(event: &Event, node: &str, subject: &str) -> Vec<Attribute> {
    let Identity {
        id,
        // Not attributes: the record's own headers carry them in every format.
        received_at: _,
        publisher: _,
        node_seq: _,
        node_source: _,
        source,
        origin,
        workload,
        node: captured_on,
    } = &event.identity;
    let node = captured_on.as_deref().unwrap_or(node);
    let mut out = vec![
        ("specversion", "ce_specversion", "1.0".to_owned()),
        ("id", "ce_id", id.to_string()),
        ("source", "ce_source", self::source(node, source)),
        ("type", "ce_type", event_type(event.type_url()).to_owned()),
        ("subject", "ce_subject", subject.to_owned()),
    ];
    if let Some(time) = time(event) {
        out.push(("time", "ce_time", time));
    }
    out.extend([
        ("namespace", "ce_namespace", event.namespace().to_owned()),
        ("topic", "ce_topic", event.topic().to_owned()),
        ("seq", "ce_seq", event.seq.to_string()),
        ("origin", "ce_origin", origin.label().to_owned()),
    ]);
    if let Some(node) = captured_on {
        out.push(("node", "ce_node", node.to_string()));
    }
    if let Some(clock) = origin.clock() {
        out.push(("originclock", "ce_originclock", clock.label().to_owned()));
    }
    if let Some(from) = origin.witness() {
        out.push((
            "reconciledfrom",
            "ce_reconciledfrom",
            from.label().to_owned(),
        ));
    }
    if let Some(workload) = workload {
        for (name, value) in workload.fields() {
            let (attribute, header) = extension(name);
            out.push((attribute, header, value));
        }
    }
    out
}

/// A workload field's extension name (CloudEvents allows only `[a-z0-9]`) and its
/// binary-mode header.
fn extension(field: &str) -> (&'static str, &'static str) {
    match field {
        "pod_name" => ("podname", "ce_podname"),
        "pod_namespace" => ("podnamespace", "ce_podnamespace"),
        "pod_uid" => ("poduid", "ce_poduid"),
        "container_name" => ("containername", "ce_containername"),
        "container_kind" => ("containerkind", "ce_containerkind"),
        "image" => ("image", "ce_image"),
        "reason" => ("reason", "ce_reason"),
        _ => ("containerlabels", "ce_containerlabels"),
    }
}

/// `eventgate://{node}/{publish|forward|internal}` or `.../upstream/{name}`.
pub(super) fn source(node: &str, source: &Source) -> String {
    let mut out = String::from("eventgate://");
    percent_encode(&mut out, node);
    match source {
        Source::Publish => out.push_str("/publish"),
        Source::Forward => out.push_str("/forward"),
        Source::Internal => out.push_str("/internal"),
        Source::Upstream(name) => {
            out.push_str("/upstream/");
            percent_encode(&mut out, name);
        }
        Source::Kafka(name) => {
            out.push_str("/kafka/");
            percent_encode(&mut out, name);
        }
    }
    out
}

/// Keeps RFC 3986's unreserved characters and encodes every other byte, which
/// suits a host name and a path segment alike. A segment of dots alone is encoded
/// too, so that path normalization cannot take it for `.` or `..`.
fn percent_encode(out: &mut String, text: &str) {
    let dots_only = !text.is_empty() && text.bytes().all(|b| b == b'.');
    for byte in text.bytes() {
        let keep = byte.is_ascii_alphanumeric()
            || matches!(byte, b'-' | b'_' | b'~')
            || (byte == b'.' && !dots_only);
        if keep {
            out.push(char::from(byte));
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
    }
}

/// The message name of a type URL (`containerd.events.TaskExit`, also for a
/// `type.googleapis.com/...` URL).
pub(super) fn event_type(type_url: &str) -> &str {
    let bare = type_url.rsplit('/').next().unwrap_or(type_url);
    if bare.is_empty() { NO_TYPE } else { bare }
}

/// The envelope's timestamp in RFC 3339, which only has room for years 0000-9999:
/// a timestamp outside them (or none) leaves `time` out, as the spec allows.
fn time(event: &Event) -> Option<String> {
    let text = rfc3339_nanos(event.envelope.timestamp.as_ref()?);
    let year_digits = text.bytes().take_while(u8::is_ascii_digit).count();
    (year_digits == 4 && text.as_bytes().get(4) == Some(&b'-')).then_some(text)
}

enum Data<'a> {
    Json(&'a str),
    Protobuf(&'a [u8]),
    None,
}

fn data(event: &Event) -> Data<'_> {
    match (event.payload_json(), &event.envelope.event) {
        (Some(json), _) => Data::Json(json),
        (None, Some(any)) => Data::Protobuf(&any.value),
        (None, None) => Data::None,
    }
}

/// Binary mode: the attributes go to `headers` as `ce_*`, with `content-type`;
/// the value is the data alone (`None`, no value, for an envelope without payload).
pub(super) fn binary(
    event: &Event,
    node: &str,
    subject: &str,
    headers: &mut Vec<(&'static str, String)>,
) -> Option<Vec<u8>> {
    headers.extend(
        attributes(event, node, subject)
            .into_iter()
            .map(|(_, header, value)| (header, value)),
    );
    match data(event) {
        Data::Json(json) => {
            headers.push(("content-type", JSON_CONTENT_TYPE.to_owned()));
            Some(json.as_bytes().to_vec())
        }
        Data::Protobuf(bytes) => {
            headers.push(("content-type", PROTOBUF_CONTENT_TYPE.to_owned()));
            Some(bytes.to_vec())
        }
        Data::None => None,
    }
}

/// Structured mode: one JSON event format object as the value, its media type in
/// `content-type`. `data` is the payload's JSON itself, `data_base64` the bytes of
/// a payload that cannot be decoded.
pub(super) fn structured(
    event: &Event,
    node: &str,
    subject: &str,
    headers: &mut Vec<(&'static str, String)>,
) -> Vec<u8> {
    headers.push(("content-type", STRUCTURED_CONTENT_TYPE.to_owned()));
    let mut out = Vec::with_capacity(512);
    out.push(b'{');
    for (i, (name, _, value)) in attributes(event, node, subject).iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let _ = write!(out, "\"{name}\":");
        // Writing a string into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut out, value);
    }
    match data(event) {
        Data::Json(json) => {
            let _ = write!(
                out,
                ",\"datacontenttype\":\"{JSON_CONTENT_TYPE}\",\"data\":{json}"
            );
        }
        Data::Protobuf(bytes) => {
            use base64::Engine;
            let encoded = base64::engine::general_purpose::STANDARD.encode(bytes);
            let _ = write!(
                out,
                ",\"datacontenttype\":\"{PROTOBUF_CONTENT_TYPE}\",\"data_base64\":\"{encoded}\""
            );
        }
        Data::None => {}
    }
    out.push(b'}');
    out
}

#[cfg(test)]
#[path = "cloudevents_tests.rs"]
mod tests;
