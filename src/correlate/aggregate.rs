//! A held-back group of events as the one event sent in their place.

use std::sync::Arc;

use prost::Message;
use prost_types::{Any, Timestamp};

use super::state::Held;
use crate::event::{Event, EventId, Source};
use crate::proto::containerd::types::Envelope;
use crate::proto::eventgate::events::v1::Correlated;

pub(crate) const TOPIC: &str = "/eventgate/correlated";
pub(crate) const TYPE: &str = "eventgate.events.v1.Correlated";

fn timestamp(nanos: i64) -> Timestamp {
    Timestamp {
        seconds: nanos.div_euclid(1_000_000_000),
        nanos: nanos.rem_euclid(1_000_000_000) as i32,
    }
}

/// The aggregate event: in the held events' namespace, at the time of the last one,
/// numbered as the last one (so a sink sees it after the events it follows), with an
/// id derived from what it stands for, so sending it again after a restart gives the
/// same id and sinks that drop repeats by id keep it once.
pub(crate) fn event(forwarder: &str, held: &Held) -> Event {
    let payload = Correlated {
        forwarder: forwarder.to_owned(),
        topic: held.topic.clone(),
        object: held.object.clone(),
        count: held.count(),
        duplicates: held.duplicates,
        similar: held.similar,
        rate_limited: held.rate_limited,
        first_at: Some(timestamp(held.first_at)),
        last_at: Some(timestamp(held.last_at)),
        first_seq: held.first_seq,
        last_seq: held.last_seq,
        last_event: held.type_url.as_ref().map(|type_url| Any {
            type_url: type_url.clone(),
            value: held.payload.clone(),
        }),
    };
    let id = EventId::derived(
        format!(
            "{forwarder}\0{}\0{}\0{}\0{}",
            held.namespace, held.object, held.topic, held.first_seq
        )
        .as_bytes(),
    );
    let envelope = Envelope {
        timestamp: Some(timestamp(held.last_at)),
        namespace: held.namespace.clone(),
        topic: TOPIC.to_owned(),
        event: Some(Any {
            type_url: TYPE.to_owned(),
            value: payload.encode_to_vec(),
        }),
    };
    Event::new(held.last_seq, id, Source::Internal, envelope)
        .with_node(held.node.as_deref().map(Arc::from))
}
