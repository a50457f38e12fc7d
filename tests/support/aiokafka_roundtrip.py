"""A real client's round trip for the command-line tests: aiokafka creates a topic, produces
ten keyed records (acks=all) and reads them back in a consumer group, committing."""

from __future__ import annotations

import asyncio
import uuid

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

__all__ = ["aiokafka_roundtrip"]


async def aiokafka_roundtrip(bootstrap: str) -> list[tuple[bytes | None, bytes | None]]:
    topic = f"cli-{uuid.uuid4().hex[:8]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        for i in range(10):
            await producer.send_and_wait(topic, key=b"k%d" % i, value=b"v%d" % i)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=f"{topic}-group",
        auto_offset_reset="earliest",
        session_timeout_ms=2000,
        heartbeat_interval_ms=500,
    )
    await consumer.start()
    try:
        got = []
        while len(got) < 10:
            batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 30)
            got += [(r.key, r.value) for records in batch.values() for r in records]
        await consumer.commit()
        return got
    finally:
        await consumer.stop()
