#!/usr/bin/env python3
# Strategy: the round trip with confluent-kafka (librdkafka): AdminClient creates the topic, an
# idempotent acks=all producer reports each delivery from its callback, a group consumer reads
# from the earliest offset until this run's records are back and commits synchronously.
# Values carry a run id so records from earlier runs are told apart. TLS and SASL are flags,
# translated to librdkafka's properties; tests/compat runs this program as its
# confluent-kafka client and checks every line it prints against the broker.
"""confluent-kafka through purgatory-proxy: admin, idempotent producer, consumer group.

    python examples/confluent_kafka_example.py --bootstrap 127.0.0.1:9092

Prints one line per record produced and consumed ("produced|consumed partition=P offset=O
key=K value=V"), then a summary; exits 0 when every record came back, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092", help="the proxy's HOST:PORT")
    parser.add_argument("--topic", default="examples-confluent-kafka")
    parser.add_argument("--group", default="examples-confluent-kafka")
    parser.add_argument("--count", type=int, default=10, help="records to produce")
    parser.add_argument("--keys", type=int, default=0, help="distinct keys (0: one per record)")
    parser.add_argument("--partitions", type=int, default=3, help="when the topic is created")
    # Apache Kafka's group.min.session.timeout.ms is 6000; the embedded Tansu broker holds a
    # JoinGroup for about half the session timeout, so shorter is quicker there.
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    parser.add_argument("--timeout-s", type=float, default=60.0, help="give up after this")
    parser.add_argument("--run-id", default=uuid.uuid4().hex[:8], help="prefix of every value")
    security = parser.add_argument_group("TLS and SASL (the proxy's listener decides)")
    security.add_argument("--tls", action="store_true", help="TLS, trusting the system's CAs")
    security.add_argument("--ca-file", help="TLS, trusting this CA (PEM)")
    security.add_argument("--cert-file", help="client certificate (PEM) for mutual TLS")
    security.add_argument("--key-file", help="its private key (PEM)")
    security.add_argument("--no-hostname-check", action="store_true")
    security.add_argument("--sasl-mechanism", help="PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
    security.add_argument("--sasl-username")
    security.add_argument(
        "--sasl-password",
        default=os.environ.get("KAFKA_SASL_PASSWORD"),
        help="or $KAFKA_SASL_PASSWORD",
    )
    return parser.parse_args(argv)


def config(args: argparse.Namespace, **settings: Any) -> dict[str, Any]:
    """librdkafka properties: bootstrap, TLS and SASL, then ``settings``."""
    conf: dict[str, Any] = {"bootstrap.servers": args.bootstrap}
    tls = bool(args.tls or args.ca_file or args.cert_file)
    if tls:
        check = "none" if args.no_hostname_check else "https"
        conf["ssl.endpoint.identification.algorithm"] = check
        if args.ca_file:
            conf["ssl.ca.location"] = args.ca_file
        if args.cert_file:
            conf |= {"ssl.certificate.location": args.cert_file, "ssl.key.location": args.key_file}
    if args.sasl_mechanism:
        conf |= {
            "sasl.mechanisms": args.sasl_mechanism,
            "sasl.username": args.sasl_username,
            "sasl.password": args.sasl_password,
        }
    if tls or args.sasl_mechanism:
        sasl = bool(args.sasl_mechanism)
        conf["security.protocol"] = ("sasl_" if sasl else "") + ("ssl" if tls else "plaintext")
    return conf | {k.replace("_", "."): v for k, v in settings.items()}


def create_topic(args: argparse.Namespace, deadline: float) -> None:
    admin = AdminClient(config(args))
    future = admin.create_topics([NewTopic(args.topic, args.partitions, 1)])[args.topic]
    try:
        future.result(timeout=max(0.1, deadline - time.monotonic()))
        print(f"topic {args.topic}: created", flush=True)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise
        print(f"topic {args.topic}: exists", flush=True)


def produce(args: argparse.Namespace) -> int:
    producer = Producer(config(args, acks="all", enable_idempotence=True, linger_ms=5))
    delivered = 0

    def on_delivery(error: KafkaError | None, msg: Message) -> None:
        nonlocal delivered
        if error is not None:
            print(f"delivery failed: {error}")
            return
        key, value = text(msg.key()), text(msg.value())
        print(f"produced partition={msg.partition()} offset={msg.offset()} key={key} value={value}")
        delivered += 1

    keys = args.keys or args.count
    for i in range(args.count):
        value = f"{args.run_id} record {i}"
        producer.produce(args.topic, value, f"key-{i % keys}", on_delivery=on_delivery)
        producer.poll(0)  # serve delivery callbacks while producing
    remaining = producer.flush(args.timeout_s)
    if remaining:
        print(f"{remaining} records still undelivered after {args.timeout_s} s")
    return delivered


def consume(args: argparse.Namespace, expected: int, deadline: float) -> int:
    consumer = Consumer(
        config(
            args,
            group_id=args.group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=args.session_timeout_ms,
            heartbeat_interval_ms=args.session_timeout_ms // 4,
        )
    )
    consumer.subscribe([args.topic])
    seen = 0
    try:
        while seen < expected and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=500, timeout=0.5):
                if msg.error() is not None:
                    print(f"consumer error: {msg.error()}")
                    continue
                key, value = text(msg.key()), text(msg.value())
                print(
                    f"consumed partition={msg.partition()} offset={msg.offset()} "
                    f"key={key} value={value}"
                )
                # An older run's record is shown but not counted.
                seen += value.startswith(f"{args.run_id} ")
        if seen:
            committed = consumer.commit(asynchronous=False)
            offsets = {tp.partition: tp.offset for tp in committed or []}
            print(f"committed offsets {dict(sorted(offsets.items()))} for group {args.group}")
    finally:
        consumer.close()
    return seen


def text(raw: str | bytes | None) -> str:
    if isinstance(raw, bytes):
        return raw.decode(errors="replace")
    return raw or ""


def main() -> int:
    args = arguments()
    deadline = time.monotonic() + args.timeout_s
    try:
        create_topic(args, deadline)
    except TimeoutError:  # librdkafka retries an unreachable bootstrap until then
        print(f"confluent-kafka: no answer from {args.bootstrap} within --timeout-s "
              f"{args.timeout_s:g}", file=sys.stderr)  # fmt: skip
        return 1
    sent = produce(args)
    seen = consume(args, sent, deadline)
    print(
        f"confluent-kafka via {args.bootstrap}: produced {sent}, consumed {seen} "
        f"(run {args.run_id})"
    )
    return 0 if sent == seen == args.count else 1


if __name__ == "__main__":
    raise SystemExit(main())
