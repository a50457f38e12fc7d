# Strategy: confluent-kafka's (librdkafka's) run of one feature case (tests/compat/_cases.py):
# AdminClient creates the topics, one idempotent acks=all Producer per topic with its codec
# and limits reports each delivery, then a Consumer assigned every partition from the
# beginning reads up to the high watermarks listed after producing.
#
#   python -m tests.compat._case_confluent --bootstrap B --case C --topic BASE --run-id R
"""confluent-kafka's case program."""

from __future__ import annotations

import functools
import sys
import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.compat._case_program import arguments, case_topics, emit, record_headers
from tests.compat._cases import LARGE_LIMIT_BYTES


def _delivered(
    failures: list[str],
    headers: list[tuple[str, bytes]] | None,
    err: KafkaError | None,
    msg: Message,
) -> None:
    """A delivery report. Its msg.headers() is not always the record's (librdkafka leaves it
    out), so the record's own headers are reported with its slot."""
    if err is not None:
        failures.append(str(err))
        return
    emit("produced", msg.topic() or "", msg.partition() or 0, msg.offset() or 0,
         msg.key(), msg.value(), headers)  # fmt: skip


def main(argv: list[str]) -> int:
    args = arguments(argv)
    deadline = time.monotonic() + args.deadline_s
    topics = case_topics(args)
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    new = [NewTopic(t.name, t.partitions, 1, config=t.configs) for t in topics]
    for name, future in admin.create_topics(new).items():
        future.result(timeout=60)
        emit("created", name)
    for t in topics:
        settings: dict[str, Any] = {
            "bootstrap.servers": args.bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "compression.type": t.compression or "none",
        }
        if "max.message.bytes" in t.configs:
            settings["message.max.bytes"] = LARGE_LIMIT_BYTES
        producer = Producer(settings)
        failures: list[str] = []
        for r in t.records:
            extra: dict[str, Any] = {"partition": r.partition} if r.partition >= 0 else {}
            headers = record_headers(r) or None
            report = functools.partial(_delivered, failures, headers)
            producer.produce(t.name, value=r.value, key=r.key.encode(), headers=headers,
                             on_delivery=report, **extra)  # fmt: skip
            producer.poll(0)
        left = producer.flush(max(1.0, deadline - time.monotonic()))
        if left or failures:
            print(f"produce failed: {left} undelivered, {failures[:3]}", file=sys.stderr)
            return 1
    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": f"{args.topic}-unused",  # required by the client; nothing is committed
            "enable.auto.commit": False,
            "fetch.message.max.bytes": LARGE_LIMIT_BYTES,
        }
    )
    try:
        ends: dict[tuple[str, int], int] = {}
        assigned = []
        for t in topics:
            for p in range(t.partitions):
                _, high = consumer.get_watermark_offsets(TopicPartition(t.name, p), timeout=30)
                if high > 0:
                    ends[t.name, p] = high
                    assigned.append(TopicPartition(t.name, p, 0))
        consumer.assign(assigned)
        while ends:
            if time.monotonic() > deadline:
                print(f"consume failed: {len(ends)} partitions not at their end", file=sys.stderr)
                return 1
            for msg in consumer.consume(num_messages=500, timeout=0.5):
                if msg.error() is not None:
                    print(f"consume failed: {msg.error()}", file=sys.stderr)
                    return 1
                topic, partition, offset = (
                    msg.topic() or "",
                    msg.partition() or 0,
                    msg.offset() or 0,
                )
                emit("consumed", topic, partition, offset, msg.key(), msg.value(), msg.headers())
                if offset + 1 >= ends.get((topic, partition), 1 << 62):
                    del ends[topic, partition]
    finally:
        consumer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
