#!/usr/bin/env python3
# Strategy: the same round trip as aiokafka_example.py with kafka-python's blocking API: admin
# creates the topic, an acks=all producer sends and waits for each RecordMetadata, a group
# consumer polls from the earliest offset until this run's records are back, then commits
# synchronously. Values carry a run id so records from earlier runs are told apart.
"""kafka-python through purgatory-proxy: admin, acks=all producer, consumer group with commit.

    python examples/kafka_python_example.py --bootstrap 127.0.0.1:9092

Prints one line per record produced and consumed, then a summary; exits 0 when every record
came back, 1 otherwise.
"""

from __future__ import annotations

import argparse
import time
import uuid

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.admin import NewTopic
from kafka.errors import TopicAlreadyExistsError


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092", help="the proxy's HOST:PORT")
    parser.add_argument("--topic", default="examples-kafka-python")
    parser.add_argument("--group", default="examples-kafka-python")
    parser.add_argument("--count", type=int, default=10, help="records to produce")
    parser.add_argument("--partitions", type=int, default=3, help="when the topic is created")
    # Apache Kafka's group.min.session.timeout.ms is 6000; the embedded Tansu broker holds a
    # JoinGroup for about half the session timeout, so shorter is quicker there.
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    parser.add_argument("--timeout-s", type=float, default=60.0, help="give up after this")
    return parser.parse_args()


def create_topic(args: argparse.Namespace) -> None:
    admin = KafkaAdminClient(bootstrap_servers=args.bootstrap)
    try:
        admin.create_topics([NewTopic(args.topic, args.partitions, 1)])
        print(f"topic {args.topic}: created")
    except TopicAlreadyExistsError:
        print(f"topic {args.topic}: exists")
    finally:
        admin.close()


def produce(args: argparse.Namespace, run_id: str) -> dict[str, str]:
    producer = KafkaProducer(bootstrap_servers=args.bootstrap, acks="all")
    sent: dict[str, str] = {}
    try:
        for i in range(args.count):
            key, value = f"key-{i}", f"{run_id} record {i}"
            md = producer.send(args.topic, value.encode(), key=key.encode()).get(timeout=30)
            print(f"produced partition={md.partition} offset={md.offset} key={key} value={value}")
            sent[key] = value
    finally:
        producer.close()
    return sent


def consume(args: argparse.Namespace, run_id: str, expected: int, deadline: float) -> int:
    consumer = KafkaConsumer(
        args.topic,
        bootstrap_servers=args.bootstrap,
        group_id=args.group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=args.session_timeout_ms,
        heartbeat_interval_ms=args.session_timeout_ms // 4,
    )
    seen = 0
    try:
        while seen < expected and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                for r in records:
                    value = r.value.decode()
                    if not value.startswith(run_id):
                        continue  # an older run's record
                    seen += 1
                    print(
                        f"consumed partition={r.partition} offset={r.offset} "
                        f"key={r.key.decode()} value={value}"
                    )
        consumer.commit()
        committed = {tp.partition: consumer.committed(tp) for tp in consumer.assignment()}
        print(f"committed offsets {dict(sorted(committed.items()))} for group {args.group}")
    finally:
        consumer.close()
    return seen


def main() -> int:
    args = arguments()
    deadline = time.monotonic() + args.timeout_s
    run_id = uuid.uuid4().hex[:8]
    create_topic(args)
    sent = produce(args, run_id)
    seen = consume(args, run_id, len(sent), deadline)
    print(
        f"kafka-python via {args.bootstrap}: produced {len(sent)}, consumed {seen} (run {run_id})"
    )
    return 0 if seen == len(sent) else 1


if __name__ == "__main__":
    raise SystemExit(main())
