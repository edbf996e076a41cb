//! What tansu 0.6.0's group coordinator itself answers, with the group protocol
//! driven by hand (tests/support/group_protocol.py: JoinGroup v5, SyncGroup v3,
//! Heartbeat v3, no client library deciding when to rejoin). These are the grounds
//! for what docs/fleet.md says about a central's restart on tansu; a tansu release
//! that behaves otherwise fails them, and the documentation is then to be revised.

use crate::support;

use serde_json::Value;
use support::tansu::Tansu;

/// The group's session timeout in both scenarios.
const SESSION_MS: u64 = 6000;

fn run(scenario: &str, tansu: &Tansu, group: &str) -> Value {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/support/group_protocol.py"
    );
    let out = std::process::Command::new("python3")
        .arg(script)
        .arg(scenario)
        .args(["--bootstrap", &tansu.brokers(), "--group", group])
        .args(["--session-ms", &SESSION_MS.to_string()])
        .output()
        .expect("run python3 (tests/run.sh installs kafka-python)");
    assert!(
        out.status.success(),
        "group_protocol.py {scenario} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

/// The stall a restarted central hit without static membership. A member (the
/// killed central) forms the group and falls silent; a new member (its restart)
/// joins while the old one is still in the group, so it joins as a follower of
/// the old leader. Its follower SyncGroup, sent once the old leader's session has
/// run out, is taken as the group's assignment: it succeeds with no partitions,
/// and every heartbeat after it succeeds, for two session timeouts and for as
/// long as it goes on. Nothing tells the member to rejoin and become the leader
/// that assigns the partitions.
#[test]
fn tansu_leaves_a_follower_without_partitions_when_the_leader_expires_before_its_sync() {
    let tansu = Tansu::start();
    let seen = run("expired-leader", &tansu, "restart");
    assert_eq!(seen["b_join_error"], 0, "{seen}");
    assert_eq!(
        seen["leader_in_b_join"], seen["a_member_id"],
        "the silent member still led when the new one joined: {seen}"
    );
    let sync_after = seen["b_sync_after_a_silent_s"].as_f64().expect("seconds");
    assert!(
        sync_after > SESSION_MS as f64 / 1000.0,
        "the SyncGroup came after the leader's session ran out: {seen}"
    );
    assert_eq!(seen["b_sync_error"], 0, "the SyncGroup succeeded: {seen}");
    assert_eq!(seen["b_assignment_bytes"], 0, "with no partitions: {seen}");
    let heartbeats = seen["b_heartbeat_errors"].as_array().expect("heartbeats");
    assert!(heartbeats.len() >= 10, "{seen}");
    assert!(
        heartbeats.iter().all(|e| e == 0),
        "no heartbeat asked for a rejoin: {seen}"
    );
}

/// Static membership (KIP-345) as tansu 0.6.0 has it: it takes JoinGroup up to
/// v9, and a member joining with the group.instance.id of a silent one and no
/// member id is given that member's id, its place as leader, and, from its
/// SyncGroup, the assignment it had. Each JoinGroup and SyncGroup that carries a
/// group.instance.id is answered after about 3 s.
#[test]
fn tansu_gives_a_restarted_static_member_its_member_id_and_assignment_back() {
    let tansu = Tansu::start();
    let seen = run("static-rejoin", &tansu, "static");
    assert!(
        seen["join_group_max_version"].as_i64() >= Some(5),
        "JoinGroup v5 (group.instance.id) is there: {seen}"
    );
    assert_eq!(seen["b_join_error"], 0, "{seen}");
    assert_eq!(seen["b_member_id"], seen["a_member_id"], "{seen}");
    assert_eq!(seen["b_leader_id"], seen["b_member_id"], "{seen}");
    assert_eq!(
        seen["b_generation"], seen["a_generation"],
        "no new generation: {seen}"
    );
    assert_eq!(seen["b_sync_error"], 0, "{seen}");
    assert_eq!(seen["b_assignment"], "A's partitions", "{seen}");
    for key in ["b_join_s", "b_sync_s"] {
        let took = seen[key].as_f64().expect("seconds");
        assert!((2.9..6.0).contains(&took), "{key}: {seen}");
    }
}

/// Why static membership on tansu 0.6.0 needs a session timeout well above the
/// 6 s that tansu's holds of a JoinGroup and a SyncGroup add up to: a static
/// member silent for longer than its session timeout is dropped (its heartbeats
/// answered REBALANCE_IN_PROGRESS, then UNKNOWN_MEMBER_ID), and when it joins
/// again under a new member id, the group still names the dropped member id as
/// its leader: every SyncGroup is answered REBALANCE_IN_PROGRESS, for as long as
/// it tries.
#[test]
fn tansu_keeps_an_expired_static_member_as_the_leader_of_its_successor() {
    let tansu = Tansu::start();
    let seen = run("static-expired", &tansu, "expired");
    assert_eq!(
        seen["a_heartbeat_errors"],
        serde_json::json!([27, 25]),
        "{seen}"
    );
    assert_eq!(seen["b_join_error"], 0, "{seen}");
    assert_ne!(seen["b_member_id"], seen["a_member_id"], "{seen}");
    let leaders = seen["leaders_in_b_joins"].as_array().expect("leaders");
    assert!(
        leaders.iter().all(|leader| *leader == seen["a_member_id"]),
        "the dropped member id stays the leader: {seen}"
    );
    assert_eq!(
        seen["b_sync_errors"],
        serde_json::json!([27, 27, 27]),
        "{seen}"
    );
}
