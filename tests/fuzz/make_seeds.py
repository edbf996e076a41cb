#!/usr/bin/env python3
"""Writes the committed seed corpora under tests/fuzz/seeds/<target>/.

Each seed is laid out as the target's entry point in src/fuzzing.rs reads its
input. Run again after changing a layout; the files are small and deterministic.
Needs only Python 3 and `cryptography` (for the signed notes).
"""

import base64
import hashlib
import json
import os
import re
import shutil
import struct
import warnings
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
SEEDS = HERE / "seeds"


# --- protobuf, by hand -------------------------------------------------------


def varint(n):
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field(tag, wire, payload):
    key = varint(tag << 3 | wire)
    if wire == 0:
        return key + varint(payload)
    if isinstance(payload, str):
        payload = payload.encode()
    return key + varint(len(payload)) + payload


def s(tag, text):
    return field(tag, 2, text)


def n(tag, value):
    return field(tag, 0, value)


def timestamp(seconds, nanos=0):
    return n(1, seconds) + (n(2, nanos) if nanos else b"")


def any_(type_url, value):
    return s(1, type_url) + s(2, value)


TASK_EXIT = s(1, "c1") + s(2, "c1") + n(3, 42) + n(4, 137) + s(5, timestamp(1714557600, 5))
CONTAINER_CREATE = s(1, "web") + s(2, "docker.io/library/busybox:latest") + s(3, s(1, "io.containerd.runc.v2"))


def envelope(namespace, topic, type_url, value, seconds=1714557600):
    return s(1, timestamp(seconds, 7)) + s(2, namespace) + s(3, topic) + s(4, any_(type_url, value))


def grpc_frame(message):
    return b"\0" + struct.pack(">I", len(message)) + message


# --- writing -----------------------------------------------------------------


def write(target, name, data):
    d = SEEDS / target
    d.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    (d / name).write_bytes(data)


def chunk(data):
    assert len(data) < 256
    return bytes([len(data)]) + data


# --- targets -----------------------------------------------------------------


def filters():
    literals = set()
    for path in sorted((ROOT / "src/filter/tests").glob("*.rs")):
        for m in re.finditer(r'"((?:[^"\\]|\\.)*)"', path.read_text()):
            text = m.group(1)
            if any(op in text for op in ("==", "!=", "~=")) and ">|" not in text and len(text) < 200:
                # Rust escapes, roughly: enough for seeds (the fuzzer does the rest).
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", DeprecationWarning)
                    literals.add(text.encode().decode("unicode_escape", errors="ignore"))
    hand = [
        "topic==/tasks/exit",
        'namespace==default,topic~="^/tasks/"',
        "event.exit_status==137",
        "labels.\"io.kubernetes.pod.name\"==web-0",
        "topic~=/containers/.*\0namespace!=k8s.io",
        "event.id~=c[0-9]+,event.pid==42",
        "origin==reconciled",
        "event.image~=busybox",
        "",
    ]
    for i, text in enumerate(hand + sorted(literals)[:60]):
        write("filter", f"f{i:03}", text.encode("utf-8", errors="ignore"))


def unary():
    publish = s(1, "/tasks/exit") + s(2, any_("containerd.events.TaskExit", TASK_EXIT))
    forward = s(1, envelope("default", "/tasks/exit", "containerd.events.TaskExit", TASK_EXIT))
    forward_other = s(1, envelope("k8s.io", "/containers/create", "containerd.events.ContainerCreate", CONTAINER_CREATE))
    # eventgate's own names, refused to clients.
    publish_own = s(1, "/eventgate/audit/checkpoint") + s(2, any_("containerd.events.TaskExit", TASK_EXIT))
    forward_own = s(1, envelope("eventgate", "/eventgate/upstream/connected", "containerd.events.TaskExit", TASK_EXIT))
    for i, (flags, ns, split, body) in enumerate(
        [
            (2, b"default", 0, grpc_frame(publish)),
            (2, b"default", 3, grpc_frame(publish)),
            (6, b"k8s.io", 0, grpc_frame(publish)),
            (0, b"", 0, grpc_frame(publish)),
            (2, b"bad ns!", 0, grpc_frame(publish)),
            (1, b"", 0, grpc_frame(forward)),
            (1, b"", 7, grpc_frame(forward_other)),
            (3, b"default", 0, grpc_frame(forward) + b"trailing"),
            (1, b"", 0, b"\x01" + grpc_frame(forward)[1:]),
            (2, b"default", 0, grpc_frame(publish)[:9]),
            (2, b"eventgate", 0, grpc_frame(publish)),
            (2, b"default", 0, grpc_frame(publish_own)),
            (1, b"", 0, grpc_frame(forward_own)),
        ]
    ):
        write("unary", f"u{i:03}", bytes([flags]) + chunk(ns) + bytes([split]) + body)


def render():
    payloads = [b"", TASK_EXIT, CONTAINER_CREATE, s(1, any_("containerd.events.TaskExit", TASK_EXIT)), b"\x0a\xff\xff"]
    i = 0
    for pick in range(0, 160, 4):
        payload = payloads[pick // 4 % len(payloads)]
        head = struct.pack("<H", pick) + bytes([pick % 4]) + struct.pack("<q", 1714557600) + b"\x02"
        write("render", f"r{i:03}", head + payload)
        i += 1


def record_body(seq, envelope_bytes, kind=0, name=b"", node=None, origin=None, publisher=None):
    body = struct.pack("<Q", seq) + bytes(range(16)) + struct.pack("<q", 1714557600 * 10**9)
    flags = kind
    extra = b""
    if publisher is not None:
        flags |= 0x80
        extra += publisher
    if origin is not None:
        flags |= 0x40
        extra += bytes([origin])
    if node is not None:
        flags |= 0x10
        extra += bytes([len(node)]) + node
        if kind == 4:
            extra += struct.pack("<Q", seq + 1000)
    body += bytes([flags]) + struct.pack("<H", len(name)) + name + extra + envelope_bytes
    return body


def record(body):
    return struct.pack("<II", len(body), zlib.crc32(body)) + body


def spool():
    env = envelope("default", "/tasks/exit", "containerd.events.TaskExit", TASK_EXIT)
    bodies = [
        record_body(1, env),
        record_body(2, env, kind=2, name=b"containerd", node=b"web-1"),
        record_body(3, env, kind=4, name=b"fleet", node=b"web-2", origin=0x11),
        record_body(4, env, kind=1, publisher=b"\x01" + struct.pack("<III", 0, 0, 42), node=b"n"),
        record_body(5, env, kind=0, publisher=b"\x02" + struct.pack("<H", 7) + b"CN=test"),
    ]
    for i, body in enumerate(bodies):
        write("spool_record", f"b{i:03}", body)
    # spool_segment: N intact records are written by the target; these are the tails.
    full = record(record_body(9, env))
    tails = [b"", full[:5], full[:-3], full, b"\0" * 16, full[:8] + b"\xff" * 20, record(record_body(1, env))]
    for i, tail in enumerate(tails):
        write("spool_segment", f"s{i:03}", bytes([i % 5]) + tail)


def config():
    example = (ROOT / "deploy/eventgate.example.toml").read_bytes()
    write("config", "example", example)
    write("config", "example-flags", example + b"\0--node\0web-1\0--subscriber-queue\x00128")
    write("config", "empty", b"")
    write("config", "flags", b"\0--upstream\0ctd=/run/containerd/containerd.sock\0--cri\0off\0--admin\0")
    write(
        "config",
        "forwarders",
        b'node = "n1"\n[spool]\nmax_bytes = "64MiB"\nfsync = "none"\n'
        b'[[forwarder]]\nname = "file"\nkind = "file"\nfilters = ["topic~=/tasks/"]\n'
        b'[forwarder.options]\npath = "/tmp/x.jsonl"\n'
        b'[exchange.limits]\nmax_event_bytes = "1MiB"\nmax_filters = 4\n',
    )


def kafka():
    env = envelope("default", "/tasks/exit", "containerd.events.TaskExit", TASK_EXIT)
    j = json.dumps(
        {
            "namespace": "default",
            "topic": "/tasks/exit",
            "type_url": "containerd.events.TaskExit",
            "timestamp": "2024-05-01T10:00:00.000000007Z",
            "event": {"containerId": "c1", "pid": 42, "exitStatus": 137},
            "id": "0190f0c2-7f4e-7a3b-8c1d-2e3f4a5b6c7d",
            "node": "web-1",
            "seq": 12,
        }
    ).encode()
    structured = json.dumps(
        {
            "specversion": "1.0",
            "id": "0190f0c2-7f4e-7a3b-8c1d-2e3f4a5b6c7d",
            "type": "containerd.events.TaskExit",
            "source": "eventgate://web-1",
            "time": "2024-05-01T10:00:00Z",
            "namespace": "default",
            "topic": "/tasks/exit",
            "datacontenttype": "application/json",
            "data": {"containerId": "c1", "exitStatus": 1},
        }
    ).encode()
    names = [
        "ce_specversion", "ce_namespace", "ce_topic", "ce_type", "ce_time", "content-type", "type_url",
        "event_id", "node", "node_seq", "seq", "origin", "origin_clock", "reconciled_from", "publisher",
        "received_at", "container_kind", "container_labels", "container_name", "pod_name", "pod_namespace",
        "pod_uid", "image", "x-other",
    ]

    def h(name, value):
        return bytes([names.index(name)]) + chunk(value.encode())

    cases = [
        (1, [h("event_id", "0190f0c2-7f4e-7a3b-8c1d-2e3f4a5b6c7d"), h("node", "web-1"), h("seq", "7")], env),
        (0, [], env),
        (2, [], j),
        (0, [h("origin", "reconciled"), h("origin_clock", "daemon"), h("reconciled_from", "cri")], j),
        (3, [h("ce_specversion", "1.0"), h("ce_type", "containerd.events.TaskExit"), h("ce_namespace", "default"),
             h("ce_topic", "/tasks/exit"), h("ce_time", "2024-05-01T10:00:00Z"), h("content-type", "application/protobuf")],
         any_("containerd.events.TaskExit", TASK_EXIT)[len(s(1, "containerd.events.TaskExit")) + 2:]),
        (3, [h("ce_specversion", "1.0"), h("ce_type", "containerd.events.TaskExit"), h("content-type", "application/json")],
         b'{"containerId":"c1"}'),
        (4, [h("content-type", "application/cloudevents+json")], structured),
        (0, [h("publisher", "uid=0,gid=0,pid=1"), h("received_at", "2024-05-01T10:00:00Z"),
             h("container_labels", '{"a":"b"}'), h("pod_name", "web-0"), h("image", "busybox")], env),
    ]
    for i, (fmt, headers, value) in enumerate(cases):
        write("kafka", f"k{i:03}", bytes([fmt, len(headers)]) + b"".join(headers) + b"\0" + value)


def resume():
    def head(which, now=1714557600, oldest=10, span=100, oldest_time=1714550000, first_since=None):
        out = bytes([which]) + struct.pack("<QQQ", now, oldest, span)
        out += b"\x01" + struct.pack("<Q", oldest_time)
        out += b"\x01" + struct.pack("<Q", first_since) if first_since is not None else b"\0"
        return out

    since = s(4, timestamp(1714550000))  # filters(1) until(2) after_seq(3) since(4)
    requests = [b"", n(3, 42), since, since + s(2, timestamp(1714540000)), s(1, "topic==/tasks/exit") + n(3, 5),
                s(4, timestamp(-62135596800)), s(4, timestamp(1714550000, 1_500_000_000))]
    i = 0
    for req in requests:
        write("resume", f"q{i:03}", head(0, first_since=12) + req)
        i += 1
    for text in ["15m", "2h", "7d", "2024-05-01T10:00:00Z", "2024-05-01T12:00:00+02:00", "100y", "999999999999d",
                 "0001-01-01T00:00:00Z", "9999-12-31T23:59:59.999999999Z"]:
        write("resume", f"t{i:03}", head(1) + text.encode())
        i += 1
    env = envelope("default", "/tasks/exit", "containerd.events.TaskExit", TASK_EXIT)
    rec = n(1, 12) + s(2, "0190f0c2-7f4e-7a3b-8c1d-2e3f4a5b6c7d") + s(3, env) + s(4, "publish") + s(5, "live")
    write("resume", f"r{i:03}", head(2) + rec)


def cri():
    def container(cid, state, created=1714557600 * 10**9):
        return s(1, cid) + s(2, "pod-" + cid) + s(3, s(1, "name-" + cid)) + s(4, s(1, "busybox")) + n(6, state) + n(7, created)

    def status(cid, state, exit_code=137, reason="OOMKilled"):
        st = s(1, cid) + n(3, state) + n(4, 1714557600 * 10**9) + n(5, 1714557601 * 10**9) + n(6, 1714557602 * 10**9)
        st += n(7, exit_code) + s(10, reason)
        return s(1, st)

    lists = [
        [container("a", 2), container("b", 1), container("c", 0)],
        [container("x", 2), container("y", 2)],
        [container("z", 3, created=0)],
    ]
    for i, cs in enumerate(lists):
        body = b"".join(s(1, c) for c in cs)
        statuses = b"".join(chunk(status("s", 2, 1 + j, "Error" if j else "")) for j in range(len(cs)))
        write("cri", f"c{i:03}", struct.pack("<H", len(body)) + body + statuses)


def docker():
    tests = (ROOT / "src/docker_tests.rs").read_text()
    listing = re.search(r'const LIST: &str = r#"(.*?)"#;', tests, re.S).group(1)
    inspects = re.findall(r'r#"(\{"Id".*?)"#', tests, re.S)
    write("docker", "list", listing.encode())
    for i, inspect in enumerate(inspects):
        write("docker", f"d{i:03}", listing.encode() + b"\0" + inspect.encode())
    write("docker", "empty", b"[]\0{}")
    log = re.search(r'const EVENT_LOG: &str = r#"(.*?)"#;', tests, re.S).group(1)
    write("docker", "log", listing.encode() + b"\0" + inspects[0].encode() + b"\0" + log.encode())


def note():
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives import serialization

    name = "fuzz.example/log"
    key = Ed25519PrivateKey.from_private_bytes(bytes([7] * 32))
    public = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    key_id = hashlib.sha256(name.encode() + b"\n\x01" + public).digest()[:4]

    def sign(text):
        sig = key.sign(text.encode())
        return f"{text}\n\u2014 {name} {base64.b64encode(key_id + sig).decode()}\n"

    def checkpoint(row, prev="-"):
        return (
            "eventgate audit checkpoint v1\nnode web-1\nstore 5f0c1b8e2d6a4c3f9e7b1a2d3c4e5f60\n"
            f"row {row}\nseq {row + 10}\n"
            "hash 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\n"
            f"pruned 0\ntime 2026-11-27T03:00:00.123456789Z\nprev {prev}\n"
        )

    first = sign(checkpoint(1))
    second = sign(checkpoint(2, hashlib.sha256(first.encode()).hexdigest()))
    write("note", "one", first)
    write("note", "two", first + "\n" + second)
    write("note", "unsigned", checkpoint(3) + "\n")
    line = json.dumps({"namespace": "eventgate", "topic": "/eventgate/audit/checkpoint",
                       "event": {"note": first}, "seq": 4})
    write("note", "jsonl", line + "\n" + json.dumps({"value": line}) + "\n")
    encoded = base64.b64encode(b"\x01" + public).decode()
    write("note", "verifier", f"{name}+{key_id.hex()}+{encoded}")


def witness():
    """add-checkpoint bodies (c2sp.org/tlog-witness) over a small RFC 6962 tree,
    and a witness's answers."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives import serialization

    def leaf(i):
        return hashlib.sha256(b"\0" + f"row {i}".encode()).digest()

    def node(l, r):
        return hashlib.sha256(b"\1" + l + r).digest()

    def split(n):
        k = 1
        while k * 2 < n:
            k *= 2
        return k

    def mth(d):
        if not d:
            return hashlib.sha256(b"").digest()
        if len(d) == 1:
            return d[0]
        k = split(len(d))
        return node(mth(d[:k]), mth(d[k:]))

    def subproof(m, d, b):
        n = len(d)
        if m == n:
            return [] if b else [mth(d)]
        k = split(n)
        if m <= k:
            return subproof(m, d[:k], b) + [mth(d[k:])]
        return subproof(m - k, d[k:], False) + [mth(d[:k])]

    name = "fuzz.example/log"
    key = Ed25519PrivateKey.from_private_bytes(bytes([7] * 32))
    public = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    key_id = hashlib.sha256(name.encode() + b"\n\x01" + public).digest()[:4]
    origin = "web-1/eventgate/5f0c1b8e2d6a4c3f9e7b1a2d3c4e5f60"
    leaves = [leaf(i) for i in range(13)]

    def checkpoint(n):
        text = f"{origin}\n{n}\n{base64.b64encode(mth(leaves[:n])).decode()}\nnode web-1\n"
        sig = key.sign(text.encode())
        return f"{text}\n\u2014 {name} {base64.b64encode(key_id + sig).decode()}\n"

    def body(old, new):
        proof = subproof(old, leaves[:new], True) if old else []
        lines = "".join(base64.b64encode(h).decode() + "\n" for h in proof)
        return f"old {old}\n{lines}\n{checkpoint(new)}"

    write("witness", "first", body(0, 5))
    write("witness", "proof", body(5, 13))
    write("witness", "same", body(13, 13))
    write("witness", "empty", f"old 0\n\n{origin}\n0\n{base64.b64encode(mth([])).decode()}\n\n\u2014 {name} AAAAAAA=\n")
    write("witness", "bad-old", body(5, 13).replace("old 5", "old 05", 1))
    write("witness", "conflict", "13\n")
    cosig = base64.b64encode(bytes(4) + (1700000000).to_bytes(8, "big") + bytes(64)).decode()
    write("witness", "cosignatures", f"\u2014 witness.example/w1 {cosig}\n\u2014 witness.example/w2 {cosig}\n")


def state_files():
    # The spool's cursors file and the file forwarder's checkpoint record, as the
    # gateway writes them (the target seals the text itself), and damaged ones.
    write("cursors", "two", "eventgate spool cursors 1\naudit 1042\nlog 1040\n")
    write("cursors", "none", "eventgate spool cursors 1\n")
    write("cursors", "bad-seq", "eventgate spool cursors 1\naudit -1\n")
    write("cursors", "sealed", "eventgate spool cursors 1\naudit 7\ncrc32 00000000\n")
    head = (1).to_bytes(8, "little") + (2).to_bytes(8, "little") + (10).to_bytes(8, "little") + (99).to_bytes(8, "little")
    for name, text in [
        ("active", "eventgate file checkpoint 1\nnext 42\nfile 1 2\nlen 10\nsealed 0\n"),
        ("sealed", "eventgate file checkpoint 1\nnext 42\nfile 3 3\nlen 10\nsealed 1\n"),
        ("past-end", "eventgate file checkpoint 1\nnext 100\nfile 1 2\nlen 10\nsealed 0\n"),
        ("longer", "eventgate file checkpoint 1\nnext 5\nfile 1 2\nlen 99\nsealed 0\n"),
    ]:
        write("file_checkpoint", name, head + text.encode())
    # A reconcile's saved snapshot, then NUL and a pending one.
    state = '{"namespaces":{"default":{"containers":{"c1":{"image":"busybox","labels":{}}},"tasks":{"c1":{"pid":42,"status":"running"}}}}}'
    write("snapshot", "saved", '{"version":1,"upstream":"node","next_seq":7,"state":%s}' % state)
    write("snapshot", "with-pending", ('{"version":1,"upstream":"node","next_seq":7,"state":%s}\0'
                                       '{"version":1,"upstream":"node","marker":"m","from_seq":7,"state":%s}') % (state, state))
    write("snapshot", "newer", '{"version":99}')
    write("snapshot", "torn", '{"version":1,"upstream":"node","next_')


def admin():
    # Raw HTTP requests to the admin listener: /ui's parameters and reads, the live
    # page's Last-Event-ID, /reload without the token, the other endpoints.
    def get(target, headers=""):
        return "GET %s HTTP/1.1\r\nHost: x\r\n%s\r\n" % (target, headers)
    for name, request in [
        ("events-filter", get("/ui/api/events?filter=topic%3D%3D%22%2Ftasks%2Fexit%22&limit=5&since=2024-01-01T00:00:00Z")),
        ("events-bad-params", get("/ui/api/events?filter=event.exit_status%3D%3D1&filter=namespace~%3D%22%5Bk%22&after=abc&limit=-1")),
        ("timeline-svg", get("/ui/api/timeline.svg?pod=web-0&ns=default&group=container&since=yesterday")),
        ("timeline-html-bad", get("/ui/api/timeline.html?group=%zz&until=2024-13-40T00:00:00Z")),
        ("export-csv", get("/ui/api/export?format=csv&filter=namespace%3D%3Ddefault")),
        ("fleet", get("/ui/api/fleet?since=1h")),
        ("live-last-event-id", get("/ui/api/live?filter=topic%3D%3D%22%2Ftasks%2Fexit%22", "Last-Event-ID: 3\r\n")),
        ("live-last-event-id-huge", get("/ui/api/live", "Last-Event-ID: 99999999999999999999999\r\n")),
        ("event-one", get("/ui/api/event/1")),
        ("event-bad", get("/ui/api/event/%2e%2e")),
        ("reload-wrong-token", "POST /reload HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer not-the-token-0000000000\r\nContent-Length: 0\r\n\r\n"),
        ("reload-get", get("/reload")),
        ("readyz-verbose", get("/readyz?verbose")),
        ("status", get("/status")),
        ("metrics-delete", "DELETE /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("bad-chunk", get("/ui", "Transfer-Encoding: chunked\r\n") + "zz\r\n"),
        # Found by the fuzzer: after it, one /healthz connection went unanswered once.
        ("http-0.1-chunked", "GET /ui HTTP/0.1\r\nHost: x\r\nTransfer,Encoding: chunked\r\n\r\nzz\r\n"),
    ]:
        write("admin", name, request)


def main():
    if SEEDS.exists():
        shutil.rmtree(SEEDS)
    for make in (filters, unary, render, spool, config, kafka, resume, cri, docker, note, witness, state_files, admin):
        make()
    total = sum(f.stat().st_size for f in SEEDS.rglob("*") if f.is_file())
    print(f"seeds: {sum(1 for f in SEEDS.rglob('*') if f.is_file())} files, {total} bytes")


if __name__ == "__main__":
    main()
