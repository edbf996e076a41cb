#!/usr/bin/env python3
"""Drives a broker's consumer-group coordinator by hand (JoinGroup v5, SyncGroup v3,
Heartbeat v3 through kafka-python's protocol classes, with no client library
deciding when to rejoin), to show what the broker itself answers in the two
situations a central gateway's restart puts it in. Prints one JSON object.

  expired-leader: member A forms the group and goes silent (as a SIGKILLed
      process does); member B joins while A is still in the group, so A stays the
      leader and B a follower; once A's session timeout has passed, B sends its
      follower SyncGroup (no assignments), then heartbeats for two session
      timeouts. A coordinator that expires A must make B rejoin (an error on the
      SyncGroup or a heartbeat) so that B becomes leader and assigns the
      partitions; one that answers none of them leaves B without partitions.
      B first joins a third of a session timeout after A fell silent, so its
      SyncGroup comes when A's session has run out and B's has not.

  static-rejoin: member A joins with group.instance.id "node-1", forms the group
      with an assignment and goes silent; member B then joins with the same
      group.instance.id and no member id, as a restarted process does (KIP-345).
      Records the member id and leader B is given, the assignment its SyncGroup
      returns, how long each took, and what the old member id's heartbeat gets
      afterwards.

  static-expired: member A joins with group.instance.id "node-1" and forms the
      group, then sends nothing for longer than its session timeout (as a member
      whose JoinGroup and SyncGroup were held longer than that does); its next
      heartbeats, then a JoinGroup with the same group.instance.id and no member
      id (what librdkafka sends once told its member id is unknown), then three
      rounds of SyncGroup and JoinGroup. Records the errors, and the leader the
      new member id is given.
"""

import argparse
import json
import sys
import time

from kafka.client_async import KafkaClient
from kafka.protocol.group import (
    HeartbeatRequest_v3,
    JoinGroupRequest_v5,
    SyncGroupRequest_v3,
)

MEMBER_ID_REQUIRED = 79
JOIN_GROUP = 11


class Coordinator:
    def __init__(self, bootstrap, deadline):
        self.client = KafkaClient(bootstrap_servers=bootstrap, client_id="group-protocol")
        self.deadline = deadline
        future = self.client.cluster.request_update()
        self.client.poll(future=future, timeout_ms=deadline * 1000)
        # A single-broker cluster: its one broker coordinates every group.
        self.node = next(iter(self.client.cluster.brokers())).nodeId
        end = time.time() + deadline
        while not self.client.ready(self.node):
            if time.time() > end:
                sys.exit("the broker did not accept a connection")
            self.client.poll(timeout_ms=100)

    def call(self, request):
        future = self.client.send(self.node, request)
        self.client.poll(future=future, timeout_ms=self.deadline * 1000)
        if not future.succeeded():
            sys.exit(f"{type(request).__name__} failed: {future.exception}")
        return future.value

    def join(self, group, session_ms, member_id, instance_id):
        protocols = [("range", b"\x00\x03\x00\x00\x00\x01\x00\x05fleet\x00\x00\x00\x00")]
        return self.call(
            JoinGroupRequest_v5(
                group=group,
                session_timeout=session_ms,
                rebalance_timeout=session_ms,
                member_id=member_id,
                group_instance_id=instance_id,
                protocol_type="consumer",
                group_protocols=protocols,
            )
        )

    def join_fully(self, group, session_ms, instance_id=None):
        """JoinGroup, again with the member id the broker asks for (KIP-394)."""
        response = self.join(group, session_ms, "", instance_id)
        if response.error_code == MEMBER_ID_REQUIRED:
            response = self.join(group, session_ms, response.member_id, instance_id)
        return response

    def sync(self, group, generation, member_id, instance_id, assignments):
        return self.call(
            SyncGroupRequest_v3(
                group=group,
                generation_id=generation,
                member_id=member_id,
                group_instance_id=instance_id,
                group_assignment=assignments,
            )
        )

    def heartbeat(self, group, generation, member_id, instance_id=None):
        return self.call(
            HeartbeatRequest_v3(
                group=group,
                generation_id=generation,
                member_id=member_id,
                group_instance_id=instance_id,
            )
        ).error_code

    def join_group_max_version(self):
        versions = self.client.get_api_versions() or {}
        return versions.get(JOIN_GROUP, (None, None))[1]


def expired_leader(coordinator, group, session_ms):
    a = coordinator.join_fully(group, session_ms)
    assert a.error_code == 0, f"A's join: error {a.error_code}"
    assert a.leader_id == a.member_id, "A, alone, leads"
    synced = coordinator.sync(group, a.generation_id, a.member_id, None, [(a.member_id, b"A")])
    assert synced.error_code == 0, f"A's sync: error {synced.error_code}"
    # A's last word: from here on it is silent, as a killed process is.
    a_last_contact = time.time()
    # B first joins a third of a session timeout later (a restart taking its
    # time), so that there is a moment when A's session has run out and B's not.
    time.sleep(session_ms / 3000)
    b = coordinator.join_fully(group, session_ms)
    b_joined = time.time()
    # Past A's session timeout, with a margin, and within B's.
    wait = a_last_contact + session_ms / 1000 + 0.5 - time.time()
    if wait > 0:
        time.sleep(wait)
    b_sync = coordinator.sync(group, b.generation_id, b.member_id, None, [])
    b_synced = time.time()
    heartbeats = []
    end = time.time() + 2 * session_ms / 1000
    while time.time() < end:
        heartbeats.append(coordinator.heartbeat(group, b.generation_id, b.member_id))
        time.sleep(0.5)
    return {
        "a_member_id": a.member_id,
        "b_join_error": b.error_code,
        "b_member_id": b.member_id,
        "b_generation": b.generation_id,
        "leader_in_b_join": b.leader_id,
        "b_joined_after_a_silent_s": round(b_joined - a_last_contact, 3),
        "b_sync_after_a_silent_s": round(b_synced - a_last_contact, 3),
        "b_sync_error": b_sync.error_code,
        "b_assignment_bytes": len(b_sync.member_assignment or b""),
        "b_heartbeat_errors": heartbeats,
    }


def static_rejoin(coordinator, group, session_ms):
    instance = "node-1"
    started = time.time()
    a = coordinator.join_fully(group, session_ms, instance)
    a_join_s = time.time() - started
    assert a.error_code == 0, f"A's join: error {a.error_code}"
    synced = coordinator.sync(
        group, a.generation_id, a.member_id, instance, [(a.member_id, b"A's partitions")]
    )
    assert synced.error_code == 0, f"A's sync: error {synced.error_code}"

    started = time.time()
    b = coordinator.join_fully(group, session_ms, instance)
    b_join_s = time.time() - started
    started = time.time()
    b_sync = coordinator.sync(
        group, b.generation_id, b.member_id, instance, [(b.member_id, b"B's own plan")]
    )
    b_sync_s = time.time() - started
    b_heartbeats = [
        coordinator.heartbeat(group, b.generation_id, b.member_id, instance) for _ in range(3)
    ]
    return {
        "join_group_max_version": coordinator.join_group_max_version(),
        "a_member_id": a.member_id,
        "a_generation": a.generation_id,
        "a_join_s": round(a_join_s, 3),
        "b_join_error": b.error_code,
        "b_member_id": b.member_id,
        "b_generation": b.generation_id,
        "b_leader_id": b.leader_id,
        "b_join_s": round(b_join_s, 3),
        "b_sync_error": b_sync.error_code,
        "b_assignment": (b_sync.member_assignment or b"").decode(),
        "b_sync_s": round(b_sync_s, 3),
        "b_heartbeat_errors": b_heartbeats,
        # The old process's member id, as if it were still alive.
        "a_heartbeat_after_b_error": coordinator.heartbeat(
            group, a.generation_id, a.member_id, instance
        ),
    }


def static_expired(coordinator, group, session_ms):
    instance = "node-1"
    a = coordinator.join_fully(group, session_ms, instance)
    assert a.error_code == 0, f"A's join: error {a.error_code}"
    synced = coordinator.sync(
        group, a.generation_id, a.member_id, instance, [(a.member_id, b"A's partitions")]
    )
    assert synced.error_code == 0, f"A's sync: error {synced.error_code}"
    time.sleep(session_ms / 1000 + 0.5)
    heartbeats = [
        coordinator.heartbeat(group, a.generation_id, a.member_id, instance) for _ in range(2)
    ]
    b = coordinator.join_fully(group, session_ms, instance)
    syncs = []
    leaders = []
    for _ in range(3):
        leaders.append(b.leader_id)
        syncs.append(
            coordinator.sync(group, b.generation_id, b.member_id, instance, []).error_code
        )
        b = coordinator.join(group, session_ms, b.member_id, instance)
    return {
        "a_member_id": a.member_id,
        "a_heartbeat_errors": heartbeats,
        "b_join_error": b.error_code,
        "b_member_id": b.member_id,
        "leaders_in_b_joins": leaders,
        "b_sync_errors": syncs,
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "scenario", choices=["expired-leader", "static-rejoin", "static-expired"]
    )
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--session-ms", type=int, default=6000)
    parser.add_argument("--deadline", type=int, default=30)
    args = parser.parse_args()
    coordinator = Coordinator(args.bootstrap, args.deadline)
    run = {
        "expired-leader": expired_leader,
        "static-rejoin": static_rejoin,
        "static-expired": static_expired,
    }[args.scenario]
    print(json.dumps(run(coordinator, args.group, args.session_ms)))


if __name__ == "__main__":
    main()
