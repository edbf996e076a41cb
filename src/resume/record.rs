//! An event as the resumable Subscribe sends it ([`Record`]), and back (for the CLI,
//! which prints it in the shapes `eventgate events` always printed).

use std::str::FromStr;
use std::sync::Arc;
use std::time::SystemTime;

use crate::event::{Event, EventId, Identity, Origin, Source, Workload};
use crate::proto::eventgate::services::events::v1 as wire;
use crate::publisher::Publisher;

/// The record of `event`, with everything eventgate keeps about it.
pub(crate) fn to_record(event: &Event) -> wire::Record {
    let Identity {
        id,
        // Neither is in the record (whose fields predate them): a resumed subscriber
        // orders and deduplicates by seq and event id.
        received_at: _,
        node_seq: _,
        node_source: _,
        source,
        publisher,
        origin,
        workload,
        node,
    } = &event.identity;
    wire::Record {
        seq: event.seq,
        event_id: id.to_string(),
        envelope: Some(event.envelope.clone()),
        source: source.describe().into_owned(),
        origin: origin.label().to_owned(),
        origin_clock: origin
            .clock()
            .map(|c| c.label().to_owned())
            .unwrap_or_default(),
        publisher: publisher.as_ref().map(publisher_to_wire),
        workload: workload.as_deref().map(workload_to_wire),
        node: node.as_deref().unwrap_or_default().to_owned(),
        reconciled_from: origin
            .witness()
            .map(|w| w.label().to_owned())
            .unwrap_or_default(),
    }
}

/// The event a record describes; `Err` names what does not fit (a record from
/// something that is not eventgate).
pub(crate) fn from_record(record: wire::Record) -> Result<Event, String> {
    let id = EventId::from_str(&record.event_id)
        .map_err(|e| format!("event_id {:?}: {e}", record.event_id))?;
    let clock = Some(record.origin_clock.as_str()).filter(|c| !c.is_empty());
    let from = Some(record.reconciled_from.as_str()).filter(|f| !f.is_empty());
    let origin = match record.origin.as_str() {
        // An empty origin is a live one (proto3's default).
        "" => Origin::Live,
        label => Origin::from_stored(label, clock, from)?,
    };
    let envelope = record.envelope.unwrap_or_default();
    let identity = Identity {
        id,
        // Not in the record: when this end read it.
        received_at: SystemTime::now(),
        source: Source::parse(&record.source),
        publisher: record.publisher.and_then(publisher_from_wire),
        origin,
        workload: record.workload.map(|w| Arc::new(workload_from_wire(w))),
        // Empty is proto3's default: a record of an event of unknown node.
        node: Some(record.node).filter(|n| !n.is_empty()).map(Arc::from),
        // Not in the record.
        node_seq: None,
        node_source: None,
    };
    Ok(Event::from_identity(record.seq, identity, envelope))
}

fn publisher_to_wire(publisher: &Publisher) -> wire::Publisher {
    let identity = match publisher {
        Publisher::Process { uid, gid, pid } => wire::publisher::Identity::Process(wire::Process {
            uid: *uid,
            gid: *gid,
            pid: *pid,
        }),
        Publisher::Certificate { subject } => {
            wire::publisher::Identity::CertificateSubject(subject.to_string())
        }
    };
    wire::Publisher {
        identity: Some(identity),
    }
}

fn publisher_from_wire(publisher: wire::Publisher) -> Option<Publisher> {
    Some(match publisher.identity? {
        wire::publisher::Identity::Process(p) => Publisher::Process {
            uid: p.uid,
            gid: p.gid,
            pid: p.pid,
        },
        wire::publisher::Identity::CertificateSubject(subject) => Publisher::Certificate {
            subject: subject.into(),
        },
    })
}

fn workload_to_wire(w: &Workload) -> wire::Workload {
    wire::Workload {
        kind: w.kind.clone(),
        pod_name: w.pod_name.clone(),
        pod_namespace: w.pod_namespace.clone(),
        pod_uid: w.pod_uid.clone(),
        container_name: w.container_name.clone(),
        image: w.image.clone(),
        labels: w.labels.clone().into_iter().collect(),
        reason: w.reason.clone(),
    }
}

fn workload_from_wire(w: wire::Workload) -> Workload {
    Workload {
        kind: w.kind,
        pod_name: w.pod_name,
        pod_namespace: w.pod_namespace,
        pod_uid: w.pod_uid,
        container_name: w.container_name,
        image: w.image,
        labels: w.labels.into_iter().collect(),
        reason: w.reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Clock, Witness};
    use crate::testing;

    #[test]
    fn a_record_carries_what_eventgate_keeps_and_comes_back_the_same() {
        let event = testing::event(7)
            .upstream("node")
            .at(testing::T0)
            .json("containerd.events.TaskExit", r#"{"container_id":"c1"}"#)
            .origin(Origin::reconciled(Clock::Daemon))
            .publisher(Some(Publisher::Process {
                uid: 1,
                gid: 2,
                pid: Some(3),
            }))
            .workload(testing::workload(
                "busybox",
                &[("io.kubernetes.pod.name", "web"), ("team", "a")],
            ))
            .node("web-1")
            .build();
        let record = to_record(&event);
        assert_eq!(record.seq, 7);
        assert_eq!(record.node, "web-1");
        assert_eq!(record.origin, "reconciled");
        assert_eq!(record.origin_clock, "daemon");
        assert_eq!(record.reconciled_from, "containerd");
        let back = from_record(record).unwrap();
        assert_eq!(back.seq, event.seq);
        assert_eq!(back.identity.id, event.identity.id);
        assert_eq!(back.identity.origin, event.identity.origin);
        assert_eq!(back.identity.publisher, event.identity.publisher);
        assert_eq!(back.identity.workload, event.identity.workload);
        assert_eq!(back.envelope, event.envelope);
        assert_eq!(back.identity.source, event.identity.source);
        assert_eq!(back.node(), Some("web-1"));
    }

    /// Whose record a reconciled event came from and the manager's reason go along;
    /// a live event has no witness, and an older gateway's reconciled record without
    /// one is containerd's.
    #[test]
    fn witness_and_reason_come_back_the_same() {
        let mut workload =
            (*testing::workload("nginx", &[("io.kubernetes.pod.name", "web")]).unwrap()).clone();
        workload.reason = Some("OOMKilled".into());
        let event = testing::event(3)
            .json("containerd.events.TaskExit", "{}")
            .origin(Origin::Reconciled {
                clock: Clock::Daemon,
                from: Witness::Cri,
            })
            .workload(Some(Arc::new(workload)))
            .build();
        let record = to_record(&event);
        assert_eq!(record.reconciled_from, "cri");
        assert_eq!(
            record.workload.as_ref().and_then(|w| w.reason.as_deref()),
            Some("OOMKilled")
        );
        let back = from_record(record.clone()).unwrap();
        assert_eq!(back.identity.origin, event.identity.origin);
        assert_eq!(back.identity.workload, event.identity.workload);

        let older = wire::Record {
            reconciled_from: String::new(),
            ..record.clone()
        };
        assert_eq!(
            from_record(older).unwrap().identity.origin,
            Origin::reconciled(Clock::Daemon)
        );
        let live = to_record(
            &testing::event(4)
                .json("containerd.events.TaskExit", "{}")
                .build(),
        );
        assert_eq!(live.reconciled_from, "");
        let bad = wire::Record {
            reconciled_from: "kubelet".into(),
            ..record
        };
        assert!(from_record(bad).unwrap_err().contains("kubelet"));
    }

    /// An event of unknown node goes as an empty `node` and comes back unknown, not
    /// as a node named "".
    #[test]
    fn an_unknown_node_stays_unknown() {
        let event = testing::event(1)
            .json("containerd.events.TaskExit", "{}")
            .build();
        let record = to_record(&event);
        assert_eq!(record.node, "");
        assert_eq!(from_record(record).unwrap().node(), None);
    }
}
