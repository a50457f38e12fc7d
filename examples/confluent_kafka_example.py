#!/usr/bin/env python3
# Strategy: the round trip with confluent-kafka (librdkafka): AdminClient creates the topic, an
# idempotent acks=all producer reports each delivery from its callback, a group consumer reads
# from the earliest offset until this run's records are back and commits synchronously.
# Values carry a run id so records from earlier runs are told apart.
"""confluent-kafka through purgatory-proxy: admin, idempotent producer, consumer group.

    python examples/confluent_kafka_example.py --bootstrap 127.0.0.1:9092

Prints one line per record produced and consumed, then a summary; exits 0 when every record
came back, 1 otherwise.
"""

from __future__ import annotations

import argparse
import time
import uuid

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092", help="the proxy's HOST:PORT")
    parser.add_argument("--topic", default="examples-confluent-kafka")
    parser.add_argument("--group", default="examples-confluent-kafka")
    parser.add_argument("--count", type=int, default=10, help="records to produce")
    parser.add_argument("--partitions", type=int, default=3, help="when the topic is created")
    # Apache Kafka's group.min.session.timeout.ms is 6000; the embedded Tansu broker holds a
    # JoinGroup for about half the session timeout, so shorter is quicker there.
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    parser.add_argument("--timeout-s", type=float, default=60.0, help="give up after this")
    return parser.parse_args()


def create_topic(args: argparse.Namespace) -> None:
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    future = admin.create_topics([NewTopic(args.topic, args.partitions, 1)])[args.topic]
    try:
        future.result(timeout=30)
        print(f"topic {args.topic}: created")
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise
        print(f"topic {args.topic}: exists")


def produce(args: argparse.Namespace, run_id: str) -> dict[str, str]:
    producer = Producer(
        {"bootstrap.servers": args.bootstrap, "acks": "all", "enable.idempotence": True}
    )
    sent: dict[str, str] = {}

    def delivered(error: KafkaError | None, msg: Message) -> None:
        if error is not None:
            print(f"delivery failed: {error}")
            return
        key, value = msg.key().decode(), msg.value().decode()
        print(f"produced partition={msg.partition()} offset={msg.offset()} key={key} value={value}")
        sent[key] = value

    for i in range(args.count):
        producer.produce(args.topic, f"{run_id} record {i}", f"key-{i}", on_delivery=delivered)
    remaining = producer.flush(30)
    if remaining:
        print(f"{remaining} records still undelivered after 30 s")
    return sent


def consume(args: argparse.Namespace, run_id: str, expected: int, deadline: float) -> int:
    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": args.group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": args.session_timeout_ms,
            "heartbeat.interval.ms": args.session_timeout_ms // 4,
        }
    )
    consumer.subscribe([args.topic])
    seen = 0
    try:
        while seen < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                print(f"consumer error: {msg.error()}")
                continue
            value = msg.value().decode()
            if not value.startswith(run_id):
                continue  # an older run's record
            seen += 1
            print(
                f"consumed partition={msg.partition()} offset={msg.offset()} "
                f"key={msg.key().decode()} value={value}"
            )
        if seen:
            committed = consumer.commit(asynchronous=False)
            offsets = {tp.partition: tp.offset for tp in committed or []}
            print(f"committed offsets {dict(sorted(offsets.items()))} for group {args.group}")
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
        f"confluent-kafka via {args.bootstrap}: produced {len(sent)}, consumed {seen} "
        f"(run {run_id})"
    )
    return 0 if sent and seen == len(sent) == args.count else 1


if __name__ == "__main__":
    raise SystemExit(main())
