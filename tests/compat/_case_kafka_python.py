# Strategy: kafka-python's run of one feature case (tests/compat/_cases.py): KafkaAdminClient
# creates the topics, one idempotent acks=all KafkaProducer per topic with its codec and
# limits (every send's future awaited), then a KafkaConsumer without a group, assigned every
# partition from the beginning, reads up to the end offsets listed after producing.
#
#   python -m tests.compat._case_kafka_python --bootstrap B --case C --topic BASE --run-id R
"""kafka-python's case program."""

from __future__ import annotations

import sys
import time

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

from tests.compat._case_program import (
    arguments,
    case_topics,
    emit,
    producer_settings,
    record_headers,
)
from tests.compat._cases import LARGE_LIMIT_BYTES, CaseRecord


def _partition(r: CaseRecord) -> int | None:
    return r.partition if r.partition >= 0 else None


def main(argv: list[str]) -> int:
    args = arguments(argv)
    deadline = time.monotonic() + args.deadline_s
    topics = case_topics(args)
    admin = KafkaAdminClient(bootstrap_servers=args.bootstrap, client_id="compat-kafka-python")
    try:
        admin.create_topics(
            [NewTopic(t.name, t.partitions, 1, topic_configs=t.configs) for t in topics]
        )
    finally:
        admin.close()
    for t in topics:
        emit("created", t.name)
    for t in topics:
        producer = KafkaProducer(**producer_settings(args.bootstrap, t))
        try:
            sends = [
                (r, producer.send(t.name, value=r.value, key=r.key.encode(),
                                  headers=record_headers(r), partition=_partition(r)))
                for r in t.records
            ]  # fmt: skip
            for r, future in sends:
                meta = future.get(timeout=max(1.0, deadline - time.monotonic()))
                emit("produced", t.name, meta.partition, meta.offset, r.key.encode(), r.value,
                     record_headers(r))  # fmt: skip
        finally:
            producer.close()
    consumer = KafkaConsumer(
        bootstrap_servers=args.bootstrap, group_id=None, enable_auto_commit=False,
        max_partition_fetch_bytes=LARGE_LIMIT_BYTES, fetch_max_bytes=4 * LARGE_LIMIT_BYTES,
    )  # fmt: skip
    try:
        assigned = [TopicPartition(t.name, p) for t in topics for p in range(t.partitions)]
        consumer.assign(assigned)
        ends = {tp: end for tp, end in consumer.end_offsets(assigned).items() if end > 0}
        consumer.seek_to_beginning()
        while ends:
            if time.monotonic() > deadline:
                print(f"consume failed: {len(ends)} partitions not at their end", file=sys.stderr)
                return 1
            for tp, batch in consumer.poll(timeout_ms=500).items():
                for r in batch:
                    emit("consumed", r.topic, r.partition, r.offset, r.key, r.value, r.headers)
                    if r.offset + 1 >= ends.get(tp, 1 << 62):
                        del ends[tp]
    finally:
        consumer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
