# Strategy: aiokafka's run of one feature case (tests/compat/_cases.py): AIOKafkaAdminClient
# creates the topics, one idempotent acks=all AIOKafkaProducer per topic with its codec and
# limits (every send awaited), then an AIOKafkaConsumer without a group, assigned every
# partition from the beginning, reads up to the end offsets listed after producing.
#
#   python -m tests.compat._case_aiokafka --bootstrap B --case C --topic BASE --run-id R
"""aiokafka's case program."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from tests.compat._case_program import (
    arguments,
    case_topics,
    emit,
    producer_settings,
    record_headers,
)
from tests.compat._cases import LARGE_LIMIT_BYTES, CaseRecord


async def _send(producer: AIOKafkaProducer, topic: str, r: CaseRecord) -> asyncio.Future[Any]:
    """Queue one record; the future resolves to its RecordMetadata."""
    partition = r.partition if r.partition >= 0 else None
    return await producer.send(
        topic, value=r.value, key=r.key.encode(), headers=record_headers(r), partition=partition
    )


async def run(args: argparse.Namespace) -> None:
    topics = case_topics(args)
    admin = AIOKafkaAdminClient(bootstrap_servers=args.bootstrap, client_id="compat-aiokafka")
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(t.name, t.partitions, 1, topic_configs=t.configs) for t in topics]
        )
    finally:
        await admin.close()
    for t in topics:
        emit("created", t.name)
    for t in topics:
        producer = AIOKafkaProducer(**producer_settings(args.bootstrap, t))
        await producer.start()
        try:
            sends = [(r, await _send(producer, t.name, r)) for r in t.records]
            for r, future in sends:
                meta = await future
                emit("produced", t.name, meta.partition, meta.offset, r.key.encode(), r.value,
                     record_headers(r))  # fmt: skip
        finally:
            await producer.stop()
    # From the earliest offset by the reset policy: a seek_to_beginning() right after
    # assign() can lose to the default "latest" reset, and the consumer then waits at the end.
    consumer = AIOKafkaConsumer(
        bootstrap_servers=args.bootstrap, group_id=None, enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=LARGE_LIMIT_BYTES, fetch_max_bytes=4 * LARGE_LIMIT_BYTES,
    )  # fmt: skip
    await consumer.start()
    try:
        assigned = [TopicPartition(t.name, p) for t in topics for p in range(t.partitions)]
        consumer.assign(assigned)
        ends = {tp: end for tp, end in (await consumer.end_offsets(assigned)).items() if end > 0}
        while ends:
            for tp, batch in (await consumer.getmany(timeout_ms=500)).items():
                for r in batch:
                    emit("consumed", r.topic, r.partition, r.offset, r.key, r.value, r.headers)
                    if r.offset + 1 >= ends.get(tp, 1 << 62):
                        del ends[tp]
    finally:
        await consumer.stop()


def main(argv: list[str]) -> int:
    args = arguments(argv)
    asyncio.run(asyncio.wait_for(run(args), args.deadline_s))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
