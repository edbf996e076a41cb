//! The envelopes eventgate emits about itself, in its own namespace `eventgate`: where
//! the record of an upstream breaks, resumes and was reconciled, and where a full spool
//! discarded records a forwarder had not delivered. They travel the pipeline like any
//! other event, so a user reading the audit store sees the holes among the events
//! themselves. One home, so that the exchange and the upstreams, which both write
//! markers, need not import each other for them.

use std::time::SystemTime;

use prost::Message;
use prost_types::{Any, Timestamp};

use crate::proto::containerd::types::Envelope;
use crate::proto::eventgate::events::v1::{
    AuditCheckpoint, SpoolDropped, UpstreamConnected, UpstreamDisconnected, UpstreamReconciled,
};
use crate::spool::Dropped;

/// The gateway's own namespace.
pub(crate) const NAMESPACE: &str = "eventgate";
/// The root of the gateway's own topics: itself and everything under `/eventgate/`.
pub(crate) const TOPIC_ROOT: &str = "/eventgate";
pub(crate) const CONNECTED_TOPIC: &str = "/eventgate/upstream/connected";
pub(crate) const DISCONNECTED_TOPIC: &str = "/eventgate/upstream/disconnected";
pub(crate) const RECONCILED_TOPIC: &str = "/eventgate/upstream/reconciled";
pub(crate) const CONNECTED_TYPE: &str = "eventgate.events.v1.UpstreamConnected";
pub(crate) const RECONCILED_TYPE: &str = "eventgate.events.v1.UpstreamReconciled";
pub(crate) const DISCONNECTED_TYPE: &str = "eventgate.events.v1.UpstreamDisconnected";
pub(crate) const SPOOL_DROPPED_TOPIC: &str = "/eventgate/spool/dropped";
pub(crate) const SPOOL_DROPPED_TYPE: &str = "eventgate.events.v1.SpoolDropped";

/// What the connected marker says; `gap_started_at` is when the record broke.
pub(crate) struct Connected<'a> {
    pub upstream: &'a str,
    pub address: &'a str,
    pub filters: &'a [String],
    pub connected_at: SystemTime,
    pub gap_started_at: SystemTime,
    pub attempts: u64,
}

pub(crate) struct Disconnected<'a> {
    pub upstream: &'a str,
    pub address: &'a str,
    pub reason: &'a str,
    pub connected_at: SystemTime,
    pub disconnected_at: SystemTime,
    pub events_received: u64,
}

pub(crate) fn connected(marker: &Connected<'_>) -> Envelope {
    let payload = UpstreamConnected {
        upstream: marker.upstream.to_owned(),
        address: marker.address.to_owned(),
        connected_at: Some(Timestamp::from(marker.connected_at)),
        gap_started_at: Some(Timestamp::from(marker.gap_started_at)),
        attempts: marker.attempts,
        filters: marker.filters.to_vec(),
    };
    envelope(
        marker.connected_at,
        CONNECTED_TOPIC,
        CONNECTED_TYPE,
        payload.encode_to_vec(),
    )
}

pub(crate) fn disconnected(marker: &Disconnected<'_>) -> Envelope {
    let payload = UpstreamDisconnected {
        upstream: marker.upstream.to_owned(),
        address: marker.address.to_owned(),
        disconnected_at: Some(Timestamp::from(marker.disconnected_at)),
        reason: marker.reason.to_owned(),
        events_received: marker.events_received,
        connected_at: Some(Timestamp::from(marker.connected_at)),
    };
    envelope(
        marker.disconnected_at,
        DISCONNECTED_TOPIC,
        DISCONNECTED_TYPE,
        payload.encode_to_vec(),
    )
}

/// The reconciled marker, stamped with the time the daemon was listed.
pub(crate) fn reconciled(marker: UpstreamReconciled, listed_at: SystemTime) -> Envelope {
    envelope(
        listed_at,
        RECONCILED_TOPIC,
        RECONCILED_TYPE,
        marker.encode_to_vec(),
    )
}

/// What a forwarder lost to a full spool under `drop_oldest`, stamped now.
pub(crate) fn spool_dropped(lost: &Dropped) -> Envelope {
    let now = SystemTime::now();
    let payload = SpoolDropped {
        forwarder: lost.forwarder.clone(),
        first_seq: lost.first_seq,
        last_seq: lost.last_seq,
        count: lost.count,
        dropped_at: Some(Timestamp::from(now)),
    };
    envelope(
        now,
        SPOOL_DROPPED_TOPIC,
        SPOOL_DROPPED_TYPE,
        payload.encode_to_vec(),
    )
}

/// A signed checkpoint of `forwarder`'s audit store, as the event that ships it.
pub(crate) fn audit_checkpoint(
    checkpoint: &crate::store::checkpoint::Checkpoint,
    note: &str,
    forwarder: &str,
) -> Envelope {
    use crate::store::chain::hex;
    use crate::store::checkpoint::{TOPIC, TYPE};
    let payload = AuditCheckpoint {
        note: note.to_owned(),
        node: checkpoint.node.clone(),
        store: checkpoint.store.clone(),
        forwarder: forwarder.to_owned(),
        row_id: u64::try_from(checkpoint.row_id).unwrap_or_default(),
        seq: checkpoint
            .seq
            .and_then(|s| u64::try_from(s).ok())
            .unwrap_or_default(),
        hash: checkpoint.hash.map(|h| hex(&h)).unwrap_or_default(),
        pruned_rows: u64::try_from(checkpoint.pruned_rows).unwrap_or_default(),
        time: Some(Timestamp::from(checkpoint.time)),
        prev: checkpoint.prev.map(|h| hex(&h)).unwrap_or_default(),
        origin: checkpoint
            .tree
            .as_ref()
            .map(|_| crate::store::checkpoint::origin(&checkpoint.node, &checkpoint.store))
            .unwrap_or_default(),
        tree_size: checkpoint.tree.as_ref().map_or(0, |t| t.size),
        root: checkpoint
            .tree
            .as_ref()
            .map(|t| crate::tlog::tree_head::encode_hash(&t.root))
            .unwrap_or_default(),
    };
    envelope(checkpoint.time, TOPIC, TYPE, payload.encode_to_vec())
}

/// Whether `topic` is one of the gateway's own: `/eventgate` or under `/eventgate/`
/// (`/eventgateway` is not).
pub(crate) fn is_own_topic(topic: &str) -> bool {
    topic
        .strip_prefix(TOPIC_ROOT)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// Whether an envelope with this namespace and topic could only have been made by a
/// gateway: Publish and Forward refuse them, so that a record's markers and signed
/// checkpoints are the gateways' own.
pub(crate) fn is_own(namespace: &str, topic: &str) -> bool {
    namespace == NAMESPACE || is_own_topic(topic)
}

fn envelope(at: SystemTime, topic: &str, type_url: &str, value: Vec<u8>) -> Envelope {
    Envelope {
        timestamp: Some(Timestamp::from(at)),
        namespace: NAMESPACE.into(),
        topic: topic.into(),
        event: Some(Any {
            type_url: type_url.into(),
            value,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exchange::{Exchange, ExchangeParts, ExchangeSettings};
    use crate::proto::{Registry, to_json_string};

    #[test]
    fn markers_are_valid_envelopes_that_decode_by_name() {
        let t0 = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_800_000_000);
        let t1 = t0 + std::time::Duration::from_millis(1500);
        let down = disconnected(&Disconnected {
            upstream: "node",
            address: "/run/containerd/containerd.sock",
            reason: "the upstream closed the connection",
            connected_at: t0,
            disconnected_at: t1,
            events_received: 7,
        });
        let up = connected(&Connected {
            upstream: "node",
            address: "/run/containerd/containerd.sock",
            filters: &["topic~=\"^/tasks/\"".to_owned()],
            connected_at: t1,
            gap_started_at: t0,
            attempts: 3,
        });
        let exchange = Exchange::new(ExchangeSettings::default(), ExchangeParts::default());
        for envelope in [&down, &up] {
            exchange.check_envelope(envelope).unwrap();
            assert_eq!(envelope.namespace, "eventgate");
        }
        let json = |e: &Envelope| {
            let msg = Registry::global()
                .decode(e.event.as_ref().unwrap())
                .unwrap();
            serde_json::from_str::<serde_json::Value>(&to_json_string(&msg)).unwrap()
        };
        let down = json(&down);
        assert_eq!(down["upstream"], "node");
        assert_eq!(down["reason"], "the upstream closed the connection");
        assert_eq!(down["events_received"], 7);
        assert_eq!(down["disconnected_at"], "2027-01-15T08:00:01.500000000Z");
        let up = json(&up);
        assert_eq!(up["attempts"], 3);
        assert_eq!(up["gap_started_at"], "2027-01-15T08:00:00.000000000Z");
        assert_eq!(up["filters"][0], "topic~=\"^/tasks/\"");
    }

    #[test]
    fn own_topics_are_the_root_and_what_is_under_it() {
        for own in [
            "/eventgate",
            "/eventgate/audit/checkpoint",
            CONNECTED_TOPIC,
            "/eventgate/correlated",
        ] {
            assert!(is_own_topic(own), "{own}");
            assert!(is_own("default", own), "{own}");
        }
        for other in [
            "/eventgateway",
            "/eventgateway/x",
            "/tasks/eventgate",
            "/",
            "",
        ] {
            assert!(!is_own_topic(other), "{other}");
            assert!(!is_own("default", other), "{other}");
        }
        assert!(is_own(NAMESPACE, "/tasks/exit"));
        assert!(!is_own("Eventgate", "/tasks/exit"));
    }
}
