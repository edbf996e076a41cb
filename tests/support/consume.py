#!/usr/bin/env python3
"""Reads a Kafka topic from the beginning with kafka-python, the way a consumer
written without eventgate's code or protos would, and prints one JSON line per
message: partition, offset, key, headers and value, every byte string as base64
(null when absent).

Waits until at least --count messages arrived and every partition was read to its
end (so extra messages are seen too), or fails at --deadline seconds. Connection
security settings are passed through to KafkaConsumer when given.

The last line counts the record batches read by compression codec
({"codecs": {"zstd": 2}}), so a test can see what the producer actually sent.
"""

import argparse
import base64
import json
import sys
import time

from kafka import KafkaConsumer, TopicPartition
from kafka.record.default_records import DefaultRecordBatch

CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
codecs_seen = {}
_uncompress = DefaultRecordBatch._maybe_uncompress


def _counting_uncompress(batch):
    # Called as each batch's records are first read; counts each batch once.
    if not batch._decompressed:
        name = CODECS.get(batch.compression_type, str(batch.compression_type))
        codecs_seen[name] = codecs_seen.get(name, 0) + 1
    _uncompress(batch)


DefaultRecordBatch._maybe_uncompress = _counting_uncompress
SETTINGS = (
    "security_protocol",
    "ssl_cafile",
    "ssl_certfile",
    "ssl_keyfile",
    "sasl_mechanism",
    "sasl_plain_username",
    "sasl_plain_password",
)


def b64(data):
    return None if data is None else base64.b64encode(data).decode("ascii")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--deadline", type=float, default=20.0)
    for setting in SETTINGS:
        parser.add_argument("--" + setting.replace("_", "-"), dest=setting)
    args = parser.parse_args()
    end = time.monotonic() + args.deadline

    settings = {
        name: getattr(args, name)
        for name in SETTINGS
        if getattr(args, name) is not None
    }
    consumer = KafkaConsumer(
        bootstrap_servers=args.bootstrap.split(","),
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        **settings,
    )

    # The topic may not exist yet: the gateway creates it on its first event.
    partitions = None
    while not partitions:
        if time.monotonic() > end:
            sys.exit(f"topic {args.topic} never showed up with partitions")
        partitions = consumer.partitions_for_topic(args.topic)
        if not partitions:
            consumer._client.cluster.request_update()
            time.sleep(0.1)
    assigned = [TopicPartition(args.topic, p) for p in sorted(partitions)]
    consumer.assign(assigned)
    consumer.seek_to_beginning(*assigned)

    messages = []
    while True:
        for batch in consumer.poll(timeout_ms=200).values():
            messages.extend(batch)
        if len(messages) >= args.count:
            ends = consumer.end_offsets(assigned)
            if all(consumer.position(tp) >= ends[tp] for tp in assigned):
                break
        if time.monotonic() > end:
            sys.exit(
                f"{len(messages)} of {args.count} messages in {args.topic} "
                f"after {args.deadline}s"
            )
    consumer.close()

    messages.sort(key=lambda m: (m.partition, m.offset))
    for m in messages:
        print(
            json.dumps(
                {
                    "partition": m.partition,
                    "offset": m.offset,
                    "key": b64(m.key),
                    "headers": [[k, b64(v)] for k, v in m.headers],
                    "value": b64(m.value),
                }
            )
        )
    print(json.dumps({"codecs": codecs_seen}))


if __name__ == "__main__":
    main()
