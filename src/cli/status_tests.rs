use super::*;
use crate::admin::status::{ForwarderStatus, SpoolStatus, UpstreamStatus};

fn forwarder(name: &str, delivered: u64) -> ForwarderStatus {
    ForwarderStatus {
        name: name.into(),
        state: "delivering".into(),
        ready: true,
        queue_events: 2,
        queue_bytes: 200,
        queue_limit_events: 100_000,
        backlog_events: Some(2),
        oldest_pending_seconds: Some(0.25),
        delivered,
        retries: 0,
        dropped: 0,
        dead_lettered: 0,
        failing_attempts: None,
        last_error: None,
    }
}

fn status(uptime: f64, delivered: u64) -> Status {
    Status {
        version: "0.1.0".into(),
        uptime_seconds: uptime,
        ready: true,
        problems: vec![],
        next_seq: 43,
        subscribers: 1,
        spool: Some(SpoolStatus {
            bytes: 3 << 20,
            max_bytes: 1 << 30,
            high_water_bytes: 966_367_641,
            segments: 1,
            disk_free_bytes: None,
            min_free_bytes: None,
        }),
        forwarders: vec![forwarder("audit", delivered)],
        upstreams: vec![],
        sources: vec![],
    }
}

#[test]
fn rates_come_from_two_samples() {
    let before = status(10.0, 100);
    let after = status(12.0, 300);
    let text = render(&after, Some(&before));
    let expected = "\
eventgate 0.1.0 | up 12s | ready | next seq 43 | 1 subscriber(s)
spool: 3.0MiB of 1.0GiB (0%; not ready from 921.6MiB), 1 segment(s)

FORWARDER  STATE       EVENTS/S  QUEUE     BACKLOG  OLDEST  DELIVERED  RETRIES  DROPPED  DEAD
audit      delivering  100.0     2/100000  2        250ms   300        0        0        0
";
    assert_eq!(text, expected);
    assert!(render(&after, None).contains("audit      delivering  -  "));
}

#[test]
fn problems_errors_and_upstreams_are_shown() {
    let mut s = status(5.0, 0);
    s.ready = false;
    s.forwarders[0].state = "retrying".into();
    s.forwarders[0].ready = false;
    s.forwarders[0].failing_attempts = Some(3);
    s.forwarders[0].last_error = Some("Message timed out".into());
    s.upstreams.push(UpstreamStatus {
        name: "node".into(),
        address: "/run/containerd/containerd.sock".into(),
        connected: true,
        detail: "upstream node (/run/containerd/containerd.sock): connected for 4s".into(),
    });
    s.problems
        .push("forwarder audit: retrying (attempt 3 failed; ...)".into());
    let text = render(&s, None);
    assert!(text.contains("| NOT READY |"), "{text}");
    assert!(text.contains("audit      retrying (!)"), "{text}");
    assert!(
        text.contains("  audit: attempt 3 failed: Message timed out\n"),
        "{text}"
    );
    assert!(
        text.contains("node (/run/containerd/containerd.sock)  connected for 4s\n"),
        "{text}"
    );
    assert!(
        text.ends_with("not ready:\n  forwarder audit: retrying (attempt 3 failed; ...)\n"),
        "{text}"
    );
}

#[test]
fn sources_show_the_partitions_they_hold() {
    use crate::admin::status::{PartitionRef, SourceStatus};
    let source = |name: &str, partitions: &[(&str, i32)], unassigned: Option<f64>| SourceStatus {
        name: name.into(),
        topics: vec!["fleet".into(), "audit".into()],
        group: "central".into(),
        state: "reading".into(),
        ready: true,
        taken_in: 7,
        skipped: 0,
        restarts: 0,
        last_error: None,
        partitions: partitions
            .iter()
            .map(|(topic, partition)| PartitionRef {
                topic: (*topic).into(),
                partition: *partition,
            })
            .collect(),
        unassigned_seconds: unassigned,
        generation: Some(3),
        member_id: None,
        instance_id: Some("central-1-kafka".into()),
    };
    let mut s = status(5.0, 0);
    s.sources = vec![
        source("kafka", &[("audit", 2), ("fleet", 0), ("fleet", 1)], None),
        source("idle", &[], Some(12.0)),
        // A document from a version that did not say.
        source("old", &[], None),
    ];
    s.sources[1].state = "starved".into();
    s.sources[1].ready = false;
    let text = render(&s, None);
    let rows: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("SOURCE"))
        .collect();
    assert_eq!(
        rows[..4],
        [
            "SOURCE  STATE        TOPICS       GROUP    PARTITIONS         TAKEN IN  SKIPPED  RESTARTS",
            "kafka   reading      fleet,audit  central  audit:2 fleet:0,1  7         0        0",
            "idle    starved (!)  fleet,audit  central  none (for 12s)     7         0        0",
            "old     reading      fleet,audit  central  -                  7         0        0",
        ],
        "{text}"
    );
}
