#!/usr/bin/env python3
# Strategy: the smallest complete aiokafka application, pointed at the proxy and nothing else.
# It creates the topic (admin), produces with acks=all, then reads everything back in a consumer
# group from the earliest offset and commits. Every value carries a run id, so the consumer
# can tell this run's records from older ones when the topic already exists.
"""aiokafka through purgatory-proxy: admin, acks=all producer, consumer group with commit.

    python examples/aiokafka_example.py --bootstrap 127.0.0.1:9092

Prints one line per record produced and consumed, then a summary; exits 0 when every record
came back, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092", help="the proxy's HOST:PORT")
    parser.add_argument("--topic", default="examples-aiokafka")
    parser.add_argument("--group", default="examples-aiokafka")
    parser.add_argument("--count", type=int, default=10, help="records to produce")
    parser.add_argument("--partitions", type=int, default=3, help="when the topic is created")
    # Apache Kafka's group.min.session.timeout.ms is 6000; the embedded Tansu broker holds a
    # JoinGroup for about half the session timeout, so shorter is quicker there.
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    parser.add_argument("--timeout-s", type=float, default=60.0, help="give up after this")
    return parser.parse_args()


async def create_topic(args: argparse.Namespace) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=args.bootstrap)
    await admin.start()
    try:
        response = await admin.create_topics([NewTopic(args.topic, args.partitions, 1)])
    finally:
        await admin.close()
    for topic, code, *_ in response.topic_errors:
        # 36 = TOPIC_ALREADY_EXISTS: fine, we reuse it.
        state = "created" if code == 0 else "exists" if code == 36 else f"error {code}"
        print(f"topic {topic}: {state}")
        if code not in (0, 36):
            raise SystemExit(1)


async def produce(args: argparse.Namespace, run_id: str) -> dict[str, str]:
    # Idempotence off: aiokafka's InitProducerId fails against the embedded Tansu broker.
    producer = AIOKafkaProducer(
        bootstrap_servers=args.bootstrap, acks="all", enable_idempotence=False
    )
    await producer.start()
    sent: dict[str, str] = {}
    try:
        for i in range(args.count):
            key, value = f"key-{i}", f"{run_id} record {i}"
            md = await producer.send_and_wait(args.topic, value.encode(), key=key.encode())
            print(f"produced partition={md.partition} offset={md.offset} key={key} value={value}")
            sent[key] = value
    finally:
        await producer.stop()
    return sent


async def consume(args: argparse.Namespace, run_id: str, expected: int, deadline: float) -> int:
    consumer = AIOKafkaConsumer(
        args.topic,
        bootstrap_servers=args.bootstrap,
        group_id=args.group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=args.session_timeout_ms,
        heartbeat_interval_ms=args.session_timeout_ms // 4,
    )
    await consumer.start()
    seen = 0
    try:
        while seen < expected and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=500)
            for records in batches.values():
                for r in records:
                    value = r.value.decode()
                    if not value.startswith(run_id):
                        continue  # an older run's record
                    seen += 1
                    print(
                        f"consumed partition={r.partition} offset={r.offset} "
                        f"key={r.key.decode()} value={value}"
                    )
        await consumer.commit()
        committed = {tp.partition: await consumer.committed(tp) for tp in consumer.assignment()}
        print(f"committed offsets {dict(sorted(committed.items()))} for group {args.group}")
    finally:
        await consumer.stop()
    return seen


async def main() -> int:
    args = arguments()
    deadline = time.monotonic() + args.timeout_s
    run_id = uuid.uuid4().hex[:8]
    await create_topic(args)
    sent = await produce(args, run_id)
    seen = await consume(args, run_id, len(sent), deadline)
    print(f"aiokafka via {args.bootstrap}: produced {len(sent)}, consumed {seen} (run {run_id})")
    return 0 if seen == len(sent) else 1


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
