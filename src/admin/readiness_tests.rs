use std::time::{Duration, SystemTime};

use super::*;
use crate::pipeline::health::Failing;
use crate::upstream::UpstreamState;

fn now() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_714_557_600)
}

fn healthy() -> HealthSnapshot {
    HealthSnapshot {
        failing: None,
        spilling_since: None,
        closed: false,
        oldest_pending: None,
        delivered: 0,
        retries: 0,
        dropped: 0,
        dead_lettered: 0,
    }
}

fn upstream(name: &str, state: UpstreamState) -> UpstreamStatus {
    UpstreamStatus {
        name: name.into(),
        address: "/run/containerd/containerd.sock".into(),
        state,
        managers: Vec::new(),
    }
}

fn spool(bytes: u64) -> Option<SpoolUse> {
    Some(SpoolUse {
        bytes,
        max_bytes: 1000,
        high_water_bytes: 900,
    })
}

fn evaluate_with(
    upstreams: &[UpstreamStatus],
    forwarders: &[(String, HealthSnapshot)],
    spool: Option<SpoolUse>,
) -> Readiness {
    evaluate(&Inputs {
        upstreams,
        forwarders,
        spool,
        disk: None,
        spool_fault: None,
        rules: Rules {
            max_spill: Duration::from_secs(60),
            max_failing: Duration::from_secs(10),
        },
        now: now(),
    })
}

#[test]
fn all_well_is_ready_and_verbose_lists_every_part() {
    let upstreams = [upstream(
        "node",
        UpstreamState::Connected {
            since: SystemTime::now(),
        },
    )];
    let forwarders = [("audit".to_string(), healthy())];
    let readiness = evaluate_with(&upstreams, &forwarders, spool(10));
    assert!(readiness.ready());
    assert_eq!(readiness.render(false), "ready\n");
    let verbose = readiness.render(true);
    assert!(
        verbose.starts_with("ready\nok: upstream node ("),
        "{verbose}"
    );
    assert!(
        verbose.contains("ok: forwarder audit: delivering\n"),
        "{verbose}"
    );
    assert!(
        verbose.contains("ok: spool: 10B of 1000B used (1%)\n"),
        "{verbose}"
    );
}

#[test]
fn a_disconnected_upstream_is_named_with_its_last_error() {
    let upstreams = [upstream(
        "node",
        UpstreamState::Connecting {
            since: SystemTime::now(),
            attempts: 3,
            last_error: Some("connection refused".into()),
        },
    )];
    let readiness = evaluate_with(&upstreams, &[], None);
    assert!(!readiness.ready());
    let body = readiness.render(false);
    assert!(
        body.starts_with(
            "not ready\nupstream node (/run/containerd/containerd.sock): not connected for"
        ),
        "{body}"
    );
    assert!(
        body.contains("after 3 attempt(s); last error: connection refused"),
        "{body}"
    );
}

/// A forwarder whose current batch has been failing for `secs` seconds.
fn failing_for(secs: u64, attempts: u32, error: &str) -> HealthSnapshot {
    HealthSnapshot {
        failing: Some(Failing {
            since: now() - Duration::from_secs(secs),
            attempts,
            last_error: error.into(),
        }),
        ..healthy()
    }
}

#[test]
fn a_failing_forwarder_is_named_with_its_attempt_and_error() {
    let failing = failing_for(12, 4, "Message timed out");
    let forwarders = [("audit".into(), healthy()), ("kafka".into(), failing)];
    let readiness = evaluate_with(&[], &forwarders, spool(0));
    assert_eq!(
        readiness.problems(),
        [
            "forwarder kafka: retrying (attempt 4 failed; failing for 12s; last error: Message timed out)"
        ]
    );
}

#[test]
fn a_failing_streak_shorter_than_max_failing_is_ready_but_shown() {
    let forwarders = [(
        "kafka".into(),
        failing_for(3, 2, "Broker transport failure"),
    )];
    let readiness = evaluate_with(&[], &forwarders, spool(0));
    assert!(readiness.ready(), "{readiness:?}");
    assert!(
        readiness.render(true).contains(
            "forwarder kafka: retrying (attempt 2 failed; failing for 3s; last error: Broker transport failure) (admin.max_failing is 10s)"
        ),
        "{}",
        readiness.render(true)
    );
    // At the limit it counts.
    let long = failing_for(10, 5, "Broker transport failure");
    let readiness = evaluate_with(&[], &[("kafka".into(), long)], spool(0));
    assert!(!readiness.ready(), "{readiness:?}");
}

#[test]
fn spilling_is_fine_until_max_spill() {
    let spilling = |secs| HealthSnapshot {
        spilling_since: Some(now() - Duration::from_secs(secs)),
        ..healthy()
    };
    let short = [("log".to_string(), spilling(30))];
    assert!(evaluate_with(&[], &short, None).ready());
    let long = [("log".to_string(), spilling(61))];
    assert_eq!(
        evaluate_with(&[], &long, None).problems(),
        [
            "forwarder log: not keeping up: delivering from the spool for 1m 1s (admin.max_spill is 1m)"
        ]
    );
}

#[test]
fn a_stopped_forwarder_is_not_ready() {
    let closed = [(
        "log".to_string(),
        HealthSnapshot {
            closed: true,
            ..healthy()
        },
    )];
    assert_eq!(
        evaluate_with(&[], &closed, None).problems(),
        ["forwarder log: stopped"]
    );
}

#[test]
fn the_spool_high_water_mark_counts_from_its_value() {
    assert!(evaluate_with(&[], &[], spool(899)).ready());
    let full = evaluate_with(&[], &[], spool(900));
    assert_eq!(
        full.problems(),
        [
            "spool: 900B of 1000B used (90%), at or above spool.high_water (90%): forwarders are not keeping up"
        ]
    );
}

#[test]
fn a_disk_below_the_reserve_and_a_failed_spool_are_named_with_their_figures() {
    let disk = |free: u64, low: bool| DiskSnapshot {
        dir: "/var/lib/eventgate/spool".into(),
        min_free: crate::spool::MinFree::Percent(10.0),
        free,
        total: 100 << 20,
        required: 10 << 20,
        resume_at: 11 << 20,
        low,
        error: None,
    };
    let inputs = |disk, spool_fault| Inputs {
        upstreams: &[],
        forwarders: &[],
        spool: None,
        disk,
        spool_fault,
        rules: Rules {
            max_spill: Duration::from_secs(60),
            max_failing: Duration::from_secs(10),
        },
        now: now(),
    };
    let fine = evaluate(&inputs(Some(disk(50 << 20, false)), None));
    assert!(fine.ready());
    assert_eq!(
        fine.render(true),
        "ready\nok: spool disk: 50.0MiB free on the file system of /var/lib/eventgate/spool (spool.min_free 10% = 10.0MiB)\n"
    );
    let low = evaluate(&inputs(Some(disk(9 << 20, true)), None));
    assert_eq!(
        low.problems(),
        [
            "spool disk: 9.0MiB free on the file system of /var/lib/eventgate/spool (spool.min_free 10% = 10.0MiB): below the reserve, Publish and Forward are refused (RESOURCE_EXHAUSTED) and upstreams held until 11.0MiB are free; forwarders go on delivering what was accepted"
        ]
    );
    let failed = evaluate(&inputs(
        None,
        Some("cannot fdatasync /s/1.log: Input/output error (os error 5)".into()),
    ));
    assert_eq!(
        failed.problems(),
        [
            "spool: cannot fdatasync /s/1.log: Input/output error (os error 5); no event is accepted; eventgate is stopping (forwarders get pipeline.drain_timeout) and exits with status 1 for its supervisor to restart it"
        ]
    );
}

#[test]
fn a_manager_that_failed_is_named_on_its_upstream_s_line_and_keeps_the_gateway_ready() {
    use crate::upstream::{ManagerOutcome, ManagerReport};
    let mut node = upstream(
        "node",
        UpstreamState::Connected {
            since: SystemTime::now(),
        },
    );
    node.managers = vec![
        ManagerReport {
            name: "cri",
            address: "/run/containerd/containerd.sock".into(),
            outcome: ManagerOutcome::Failed("the CRI's ListContainers failed: deadline".into()),
            at: now(),
            log: None,
        },
        ManagerReport {
            name: "docker",
            address: "/var/run/docker.sock".into(),
            outcome: ManagerOutcome::Listed {
                sandboxes: 0,
                containers: 4,
                status_calls: 1,
            },
            at: now(),
            log: None,
        },
    ];
    let readiness = evaluate_with(&[node], &[], spool(10));
    assert!(readiness.ready());
    let verbose = readiness.render(true);
    assert!(
        verbose.contains(
            "; cri (/run/containerd/containerd.sock): failed: the CRI's ListContainers failed: deadline; \
             docker (/var/run/docker.sock): listed 4 containers, 1 status calls\n"
        ),
        "{verbose}"
    );
}

#[test]
fn a_signer_that_cannot_publish_is_not_ready_and_says_why() {
    use crate::signer::SignerStatus;
    let fine = signer(
        &SignerStatus {
            forwarder: "audit".into(),
            last: Some((now() - Duration::from_secs(30), 42)),
            failing: None,
            witnesses: Vec::new(),
            min_witnesses: 0,
        },
        now(),
    );
    assert_eq!(fine.problem, None);
    assert_eq!(
        fine.detail,
        "signer audit: last checkpoint 30s ago at row_id 42"
    );
    let failing = signer(
        &SignerStatus {
            forwarder: "audit".into(),
            last: None,
            failing: Some((now() - Duration::from_secs(5), "cannot sign: boom".into())),
            witnesses: Vec::new(),
            min_witnesses: 0,
        },
        now(),
    );
    assert_eq!(
        failing.problem.as_deref(),
        Some(
            "signer audit: cannot publish a signed checkpoint for 5s (no checkpoint signed yet); last error: cannot sign: boom"
        )
    );
}

#[test]
fn a_witness_that_gives_no_cosignature_is_not_ready_and_says_why() {
    use crate::signer::{SignerStatus, WitnessStatus};
    let witness = |cosigned, failing| WitnessStatus {
        name: "w.example/1".into(),
        url: "http://127.0.0.1:7380".into(),
        cosigned,
        failing,
    };
    let status = |w| SignerStatus {
        forwarder: "audit".into(),
        last: Some((now() - Duration::from_secs(30), 42)),
        failing: None,
        witnesses: vec![w],
        min_witnesses: 1,
    };
    let fine = signer(
        &status(witness(Some((now() - Duration::from_secs(30), 42)), None)),
        now(),
    );
    assert_eq!(fine.problem, None);
    assert_eq!(
        fine.detail,
        "signer audit: last checkpoint 30s ago at row_id 42; witness w.example/1 cosigned 30s ago (tree of 42)"
    );
    let down = signer(
        &status(witness(
            None,
            Some((now() - Duration::from_secs(7), "connection refused".into())),
        )),
        now(),
    );
    assert_eq!(
        down.problem.as_deref(),
        Some(
            "signer audit: witness w.example/1 at http://127.0.0.1:7380 has given no cosignature for 7s; last error: connection refused"
        )
    );
    // One of two down with one required (1 of 2): ready, the failing one named.
    let two = SignerStatus {
        witnesses: vec![
            witness(Some((now() - Duration::from_secs(3), 50)), None),
            witness(
                None,
                Some((now() - Duration::from_secs(7), "connection refused".into())),
            ),
        ],
        ..status(witness(None, None))
    };
    let one_of_two = signer(&two, now());
    assert_eq!(one_of_two.problem, None);
    assert!(
        one_of_two.detail.contains("1 of 2 cosigning, 1 required"),
        "{}",
        one_of_two.detail
    );
    let both = signer(
        &SignerStatus {
            min_witnesses: 2,
            ..two
        },
        now(),
    );
    assert!(both.problem.is_some());
}

fn kafka_source() -> crate::source::SourceStats {
    crate::source::SourceStats::new("fleet", &["events".to_owned()], "central", None)
}

fn source_rules() -> Rules {
    Rules {
        max_spill: Duration::from_secs(60),
        max_failing: Duration::from_secs(10),
    }
}

#[test]
fn a_source_reading_is_ready_and_verbose_counts_it() {
    let stats = kafka_source();
    stats.assignment_reset();
    stats.assigned(
        &[("events".to_owned(), 1), ("events".to_owned(), 0)],
        false,
        Some(4),
        Some("m-1".into()),
    );
    stats.read_one();
    stats.took_in();
    stats.skipped_one();
    let part = source(&stats, source_rules(), now());
    assert_eq!(part.problem, None);
    assert_eq!(
        part.detail,
        "source fleet (topics events; group central): reading; holds events/0, events/1 (generation 4) (taken in 1, skipped 1, restarts 0)"
    );
    assert!(
        Readiness { parts: vec![part] }
            .render(true)
            .contains("ok: source fleet")
    );
}

#[test]
fn a_source_failing_within_max_failing_is_ready_but_shown() {
    let stats = kafka_source();
    stats.consumer_failed_at("broker down".into(), now() - Duration::from_secs(5));
    stats.consumer_failed_at("broker down again".into(), now() - Duration::from_secs(1));
    let part = source(&stats, source_rules(), now());
    assert_eq!(part.problem, None);
    assert_eq!(
        part.detail,
        "source fleet (topics events; group central): consumer failing for 5s (2 error(s); last error: broker down again) (admin.max_failing is 10s); holds no partition; taken in 0, skipped 0, restarts 0"
    );
    // A message read ends the streak.
    stats.read_one();
    assert!(
        source(&stats, source_rules(), now())
            .detail
            .contains(": reading; holds no partition (")
    );
}

#[test]
fn a_source_failing_past_max_failing_is_not_ready() {
    let stats = kafka_source();
    stats.consumer_failed_at("all brokers down".into(), now() - Duration::from_secs(12));
    stats.consumer_failed_at("all brokers down".into(), now() - Duration::from_secs(2));
    let part = source(&stats, source_rules(), now());
    assert_eq!(
        part.problem.as_deref(),
        Some(
            "source fleet (topics events; group central): consumer failing for 12s (2 error(s); last error: all brokers down)"
        )
    );
    // No error for SOURCE_QUIET (a quiet topic once the broker is back): over.
    let later = now() + SOURCE_QUIET;
    assert_eq!(source(&stats, source_rules(), later).problem, None);
}

#[test]
fn a_source_restarting_past_max_failing_is_not_ready_until_it_runs_again() {
    let stats = kafka_source();
    stats.restarted("the consumer stopped; started again".into());
    let later = SystemTime::now() + Duration::from_secs(11);
    let problem = source(&stats, source_rules(), later)
        .problem
        .expect("not ready");
    assert!(
        problem.starts_with(
            "source fleet (topics events; group central): restarting its consumer; failing for 11s (1 error(s); last error: the consumer stopped; started again)"
        ),
        "{problem}"
    );
    // Within the threshold it is fine.
    assert_eq!(
        source(&stats, source_rules(), SystemTime::now()).problem,
        None
    );
    stats.running_again();
    stats.read_one();
    assert_eq!(source(&stats, source_rules(), later).problem, None);
}

#[test]
fn a_stopped_source_is_not_ready() {
    let stats = kafka_source();
    stats.stopped();
    let part = source(&stats, source_rules(), now());
    assert_eq!(
        part.problem.as_deref(),
        Some("source fleet (topics events; group central): stopped")
    );
}

#[test]
fn a_starved_source_is_not_ready_and_says_why() {
    let stats = kafka_source();
    stats.assignment_reset();
    let since = now() - Duration::from_secs(41);
    let stuck: Vec<(String, i32)> = (0..10).map(|p| ("events".to_owned(), p)).collect();
    stats.set_starved(Some(crate::source::Starved {
        since,
        session_timeout: Duration::from_secs(10),
        unread: 5310,
        stuck,
    }));
    let part = source(&stats, source_rules(), now());
    assert_eq!(
        part.problem.as_deref(),
        Some(
            "source fleet (topics events; group central): starved: holds no partition for 41s, longer than the group's session timeout (10s), while 5310 message(s) wait unread in events/0, events/1, events/2, events/3, events/4, events/5, events/6, events/7 and 2 more with the group's committed offsets standing still as long: no member reads them and the group gives this one none (see docs/fleet.md, \"A member without partitions\")"
        )
    );
    assert!(
        part.detail.contains(": starved; holds no partition for "),
        "{}",
        part.detail
    );
    let (state, _) = source_state(&stats.health(), true, now());
    assert_eq!(state, "starved");
    // A consumer failing says so first; a stopped one is stopped.
    stats.consumer_failed_at("broker down".into(), now() - Duration::from_secs(12));
    assert!(
        source(&stats, source_rules(), now())
            .problem
            .is_some_and(|p| p.contains("consumer failing for 12s"))
    );
    stats.stopped();
    assert_eq!(
        source(&stats, source_rules(), now()).problem.as_deref(),
        Some("source fleet (topics events; group central): stopped")
    );
}

#[test]
fn a_source_no_longer_starved_is_ready_again() {
    let stats = kafka_source();
    stats.set_starved(Some(crate::source::Starved {
        since: now(),
        session_timeout: Duration::from_secs(45),
        unread: 1,
        stuck: vec![("events".to_owned(), 0)],
    }));
    assert!(source(&stats, source_rules(), now()).problem.is_some());
    stats.set_starved(None);
    assert_eq!(source(&stats, source_rules(), now()).problem, None);
}
