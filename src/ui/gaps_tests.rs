//! Gaps paired from real markers in a real store.

use std::time::{Duration, Instant, SystemTime};

use super::*;
use crate::markers::{self, Connected, Disconnected};
use crate::proto::containerd::types::Envelope;
use crate::testing::{self, T0, TempStore};

fn at(secs: i64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs((T0 + secs) as u64)
}

fn connected(upstream: &str, gap_started_at: i64, connected_at: i64) -> Envelope {
    markers::connected(&Connected {
        upstream,
        address: "/run/containerd/containerd.sock",
        filters: &[],
        connected_at: at(connected_at),
        gap_started_at: at(gap_started_at),
        attempts: 1,
    })
}

fn disconnected(upstream: &str, disconnected_at: i64) -> Envelope {
    markers::disconnected(&Disconnected {
        upstream,
        address: "/run/containerd/containerd.sock",
        reason: "eventgate is stopping",
        connected_at: at(0),
        disconnected_at: at(disconnected_at),
        events_received: 7,
    })
}

/// A store holding `markers`, in this order, each stored by its node.
fn stored<const N: usize>(markers: [(&str, Envelope); N]) -> TempStore {
    let events: Vec<_> = markers
        .into_iter()
        .enumerate()
        .map(|(n, (node, marker))| {
            testing::event(n as u64 + 1)
                .envelope(marker)
                .node(node)
                .build()
        })
        .collect();
    TempStore::with(&events)
}

fn gap(node: &str, upstream: &str, from: i64, to: Option<i64>) -> Gap {
    Gap {
        node: node.into(),
        upstream: upstream.into(),
        from: at(from),
        to: to.map(at),
    }
}

#[test]
fn a_gap_runs_from_the_break_its_upstream_recorded_or_from_the_restart_after_a_crash() {
    // (node, marker), stored in this order, each stamped with its own time.
    let markers = [
        ("node-a", connected("containerd", 0, 1)),
        // A stop, and the restart's connect: the gap is the whole outage.
        ("node-a", disconnected("containerd", 10)),
        // A second break before any connect does not move the outage's start.
        ("node-a", disconnected("containerd", 12)),
        ("node-b", disconnected("containerd", 11)),
        ("node-a", connected("containerd", 14, 15)),
        // A crash (no disconnected marker): from the new process's start.
        ("node-a", connected("containerd", 29, 30)),
        // Another node's upstream of the same name is its own.
        ("node-b", connected("containerd", 12, 13)),
        // A break never followed by a connect is still open.
        ("node-a", disconnected("docker", 40)),
    ];
    let store = stored(markers);
    let reader = Reader::open(store.path()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    assert_eq!(
        read(&reader, at(0), deadline).unwrap(),
        [
            gap("node-a", "containerd", 0, Some(1)),
            gap("node-a", "containerd", 10, Some(15)),
            gap("node-a", "containerd", 29, Some(30)),
            gap("node-b", "containerd", 11, Some(13)),
            gap("node-a", "docker", 40, None),
        ]
    );
    // A gap that ends inside the range keeps the break recorded before it.
    assert_eq!(
        read(&reader, at(14), deadline).unwrap(),
        [
            gap("node-a", "containerd", 10, Some(15)),
            gap("node-a", "containerd", 29, Some(30)),
            gap("node-a", "docker", 40, None),
        ]
    );
    assert!(matches!(
        read(&reader, at(0), Instant::now() - Duration::from_secs(1)),
        Err(GapsError::Deadline)
    ));
}

#[test]
fn an_upstream_removed_from_the_configuration_ends_its_open_gap_and_starts_none() {
    let removed = |upstream: &str, secs: i64| {
        markers::disconnected(&Disconnected {
            upstream,
            address: "",
            reason: crate::upstream::roster::REMOVED,
            connected_at: at(secs),
            disconnected_at: at(secs),
            events_received: 0,
        })
    };
    let store = stored([
        ("n", connected("docker", 0, 1)),
        // Stopped, then started again without it.
        ("n", disconnected("docker", 10)),
        ("n", removed("docker", 20)),
        // Added back later: the gap is from that start, not from the removal.
        ("n", connected("docker", 50, 51)),
        // A removal with nothing open changes nothing.
        ("n", removed("containerd", 60)),
    ]);
    let reader = Reader::open(store.path()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    assert_eq!(
        read(&reader, at(0), deadline).unwrap(),
        [
            gap("n", "docker", 0, Some(1)),
            gap("n", "docker", 10, Some(20)),
            gap("n", "docker", 50, Some(51)),
        ]
    );
}
