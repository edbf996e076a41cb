//! The text shapes events are printed and archived in: `ctr events` lines and JSON
//! lines. One place, so the CLI and the file forwarder cannot drift apart.

use std::io::Write as _;

use prost_reflect::DynamicMessage;
use serde_json::json;

use crate::event::{Event, EventId, Identity, Origin, Workload};
use crate::proto::containerd::types::Envelope;
use crate::proto::{Registry, go_time_string, rfc3339_nanos, to_go_json, to_json_string};
use crate::publisher::Publisher;

/// The line `ctr events` prints: `<time> <namespace> <topic> <json>`. `None` when the
/// payload cannot be decoded: ctr skips such events, and so does this shape.
pub fn ctr_line(envelope: &Envelope) -> Option<String> {
    let decoded = decode(envelope);
    ctr_line_with(envelope, decoded.as_ref())
}

/// [`ctr_line`] for an accepted event, reusing the payload it already decoded.
pub fn event_ctr_line(event: &Event) -> Option<String> {
    ctr_line_with(&event.envelope, event.decoded())
}

/// The `ctr events` shape for a payload that cannot be decoded, for archives that must
/// not drop it: the JSON part is `{"type_url":...,"raw":<base64 payload>}`, the same
/// names [`envelope_json`] uses for such payloads.
pub fn ctr_raw_line(envelope: &Envelope) -> String {
    let (type_url, raw) = match &envelope.event {
        Some(any) => (any.type_url.as_str(), base64_of(&any.value)),
        None => ("", String::new()),
    };
    format!(
        "{} {} {} {}",
        go_time_string(&envelope.timestamp.unwrap_or_default()),
        envelope.namespace,
        envelope.topic,
        json!({ "type_url": type_url, "raw": raw })
    )
}

fn ctr_line_with(envelope: &Envelope, decoded: Option<&DynamicMessage>) -> Option<String> {
    let time = go_time_string(&envelope.timestamp.unwrap_or_default());
    let json = match &envelope.event {
        None => String::new(),
        Some(_) => to_go_json(decoded?),
    };
    Some(format!(
        "{time} {} {} {json}",
        envelope.namespace, envelope.topic
    ))
}

/// One JSON object describing an envelope. The decoded event is under `event`
/// (null when the type is unknown; the raw bytes are then kept as base64 in `raw`),
/// so nothing is lost for types eventgate does not know. Keys are in byte order.
pub fn envelope_json(envelope: &Envelope) -> String {
    let payload = decode(envelope).map(|message| to_json_string(&message));
    let mut out = Vec::with_capacity(256);
    write_object(&mut out, envelope, payload.as_deref(), None);
    into_string(out)
}

/// [`envelope_json`] for an accepted event, plus the gateway's `id` and `seq`, written
/// into `out`. The payload's JSON is the one cached on the event, so every forwarder
/// shares one rendering.
pub(crate) fn write_event_json(out: &mut Vec<u8>, event: &Event) {
    let source = event.identity.source.describe();
    write_object(
        out,
        &event.envelope,
        event.payload_json(),
        Some(Known::of(event, Some(&source))),
    );
}

/// [`write_event_json`] for an event read back from the audit store, whose `source`
/// is NULL (written as `null`) in rows stored before the column existed.
pub(crate) fn stored_event_json(event: &Event, source: Option<&str>) -> String {
    let mut out = Vec::with_capacity(256);
    write_object(
        &mut out,
        &event.envelope,
        event.payload_json(),
        Some(Known::of(event, source)),
    );
    into_string(out)
}

/// What the gateway knows about an event beyond its envelope, as JSON lines carry it.
struct Known<'a> {
    id: EventId,
    seq: u64,
    source: Option<&'a str>,
    publisher: Option<&'a Publisher>,
    origin: Origin,
    workload: Option<&'a Workload>,
    node: Option<&'a str>,
    node_seq: Option<u64>,
    node_source: Option<&'a str>,
}

impl<'a> Known<'a> {
    fn of(event: &'a Event, source: Option<&'a str>) -> Self {
        let Identity {
            id,
            // Not a key of JSON lines: their shape predates it (Kafka records carry
            // it as a header).
            received_at: _,
            // Written as the caller describes it: the audit store's column as stored.
            source: _,
            publisher,
            origin,
            workload,
            node,
            node_seq,
            node_source,
        } = &event.identity;
        Self {
            id: *id,
            seq: event.seq,
            source,
            publisher: publisher.as_ref(),
            origin: *origin,
            workload: workload.as_deref(),
            node: node.as_deref(),
            node_seq: *node_seq,
            node_source: node_source.as_deref(),
        }
    }
}

/// `write_event_json` as a string.
pub fn event_json(event: &Event) -> String {
    let mut out = Vec::with_capacity(256);
    write_event_json(&mut out, event);
    into_string(out)
}

fn into_string(out: Vec<u8>) -> String {
    // Only serde_json's output and ASCII are ever written.
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

fn decode(envelope: &Envelope) -> Option<DynamicMessage> {
    Registry::global().decode(envelope.event.as_ref()?).ok()
}

fn base64_of(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The keys, in the byte order a sorted map would give them: `container`, `event`,
/// `id`, `namespace`, `node`, `node_seq`, `node_source`, `origin`, `origin_clock`, `pod`, `publisher`, `raw`,
/// `reason`, `reconciled_from`, `seq`, `source`, `timestamp`, `topic`, `type_url`. `container` (`image`, `kind`,
/// `labels`, `name`) and `pod` (`name`, `namespace`, `uid`) are what the
/// container's record said at capture ([`Workload`]), each there only when it says
/// something. `publisher` is [`Publisher::write_json`]'s
/// object, or `null` for events no client of ours sent (upstreams, eventgate's own,
/// TCP clients without a certificate, rows stored before publishers were kept).
/// `origin` is `live`, `reconciled` or `repeat`; `origin_clock` and `reconciled_from`
/// (`containerd`, `cri` or `docker`: whose record it was reconstructed from) are there
/// for reconciled events only, `reason` (the manager's reason for the container's
/// state, such as `OOMKilled`) only when set. `node` is where the event was captured, `null` when unknown (events
/// spooled, or rows stored, before nodes were kept); `node_seq`, the event's seq on
/// its node's gateway, and `node_source`, how it entered that gateway
/// (`upstream:containerd`), only for events taken in from another gateway. Without the gateway's identity
/// (a bare envelope) none of these is written.
fn write_object(
    out: &mut Vec<u8>,
    envelope: &Envelope,
    payload: Option<&str>,
    identity: Option<Known<'_>>,
) {
    // Writing into a Vec cannot fail.
    out.push(b'{');
    let workload = identity.as_ref().and_then(|i| i.workload);
    if let Some(workload) = workload {
        write_container(out, workload);
    }
    out.extend_from_slice(b"\"event\":");
    match (&envelope.event, payload) {
        (Some(_), Some(json)) => out.extend_from_slice(json.as_bytes()),
        _ => out.extend_from_slice(b"null"),
    }
    if let Some(identity) = &identity {
        let _ = write!(out, ",\"id\":\"{}\"", identity.id);
    }
    out.extend_from_slice(b",\"namespace\":");
    let _ = serde_json::to_writer(&mut *out, &envelope.namespace);
    if let Some(identity) = &identity {
        out.extend_from_slice(b",\"node\":");
        match identity.node {
            Some(node) => {
                let _ = serde_json::to_writer(&mut *out, node);
            }
            None => out.extend_from_slice(b"null"),
        }
        if let Some(node_seq) = identity.node_seq {
            let _ = write!(out, ",\"node_seq\":{node_seq}");
        }
        if let Some(node_source) = identity.node_source {
            out.extend_from_slice(b",\"node_source\":");
            let _ = serde_json::to_writer(&mut *out, node_source);
        }
        let _ = write!(out, ",\"origin\":\"{}\"", identity.origin.label());
        if let Some(clock) = identity.origin.clock() {
            let _ = write!(out, ",\"origin_clock\":\"{}\"", clock.label());
        }
        if let Some(workload) = workload {
            write_pod(out, workload);
        }
        out.extend_from_slice(b",\"publisher\":");
        match identity.publisher {
            Some(publisher) => publisher.write_json(out),
            None => out.extend_from_slice(b"null"),
        }
    }
    if let (Some(any), None) = (&envelope.event, payload) {
        let _ = write!(out, ",\"raw\":\"{}\"", base64_of(&any.value));
    }
    if let Some(identity) = &identity {
        if let Some(reason) = workload.and_then(|w| w.reason.as_deref()) {
            out.extend_from_slice(b",\"reason\":");
            let _ = serde_json::to_writer(&mut *out, reason);
        }
        if let Some(from) = identity.origin.witness() {
            let _ = write!(out, ",\"reconciled_from\":\"{}\"", from.label());
        }
    }
    if let Some(Known { seq, source, .. }) = identity {
        let _ = write!(out, ",\"seq\":{seq},\"source\":");
        match source {
            Some(source) => {
                let _ = serde_json::to_writer(&mut *out, source);
            }
            None => out.extend_from_slice(b"null"),
        }
    }
    out.extend_from_slice(b",\"timestamp\":");
    match &envelope.timestamp {
        Some(ts) => {
            let _ = write!(out, "\"{}\"", rfc3339_nanos(ts));
        }
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b",\"topic\":");
    let _ = serde_json::to_writer(&mut *out, &envelope.topic);
    out.extend_from_slice(b",\"type_url\":");
    match &envelope.event {
        Some(any) => {
            let _ = serde_json::to_writer(&mut *out, &any.type_url);
        }
        None => out.extend_from_slice(b"null"),
    }
    out.push(b'}');
}

/// `"container":{...},` with the keys the record has, sorted.
fn write_container(out: &mut Vec<u8>, workload: &Workload) {
    let mut fields: Vec<(&str, serde_json::Value)> = Vec::new();
    if !workload.image.is_empty() {
        fields.push(("image", workload.image.as_str().into()));
    }
    if let Some(kind) = &workload.kind {
        fields.push(("kind", kind.as_str().into()));
    }
    if !workload.labels.is_empty() {
        let labels = serde_json::to_value(&workload.labels).unwrap_or_default();
        fields.push(("labels", labels));
    }
    if let Some(name) = &workload.container_name {
        fields.push(("name", name.as_str().into()));
    }
    if fields.is_empty() {
        return;
    }
    out.extend_from_slice(b"\"container\":");
    let object: serde_json::Map<String, serde_json::Value> =
        fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
    let _ = serde_json::to_writer(&mut *out, &object);
    out.push(b',');
}

/// `,"pod":{...}` with the pod fields the record has.
fn write_pod(out: &mut Vec<u8>, workload: &Workload) {
    let fields = [
        ("name", &workload.pod_name),
        ("namespace", &workload.pod_namespace),
        ("uid", &workload.pod_uid),
    ];
    let object: serde_json::Map<String, serde_json::Value> = fields
        .into_iter()
        .filter_map(|(k, v)| Some((k.to_owned(), v.as_deref()?.into())))
        .collect();
    if !object.is_empty() {
        out.extend_from_slice(b",\"pod\":");
        let _ = serde_json::to_writer(&mut *out, &object);
    }
}

#[cfg(test)]
#[path = "render_tests.rs"]
mod tests;
