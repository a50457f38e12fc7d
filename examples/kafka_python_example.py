#!/usr/bin/env python3
# Strategy: the same round trip as aiokafka_example.py with kafka-python's blocking API: admin
# creates the topic, an acks=all idempotent producer sends every record, then waits for each
# RecordMetadata; a group consumer polls from the earliest offset until this run's records
# are back, then commits synchronously. Values carry a run id so records from earlier runs
# are told apart. TLS and SASL are flags; tests/compat runs this program as its kafka-python
# client and checks every line it prints against the broker.
"""kafka-python through purgatory-proxy: admin, acks=all producer, consumer group with commit.

    python examples/kafka_python_example.py --bootstrap 127.0.0.1:9092

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

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.admin import NewTopic
from kafka.errors import KafkaTimeoutError, TopicAlreadyExistsError


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092", help="the proxy's HOST:PORT")
    parser.add_argument("--topic", default="examples-kafka-python")
    parser.add_argument("--group", default="examples-kafka-python")
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


def security(args: argparse.Namespace) -> dict[str, Any]:
    """kafka-python's keyword arguments for TLS and SASL."""
    options: dict[str, Any] = {}
    tls = bool(args.tls or args.ca_file or args.cert_file)
    if tls:
        options |= {"ssl_cafile": args.ca_file, "ssl_check_hostname": not args.no_hostname_check}
        if args.cert_file:
            options |= {"ssl_certfile": args.cert_file, "ssl_keyfile": args.key_file}
    if args.sasl_mechanism:
        options |= {
            "sasl_mechanism": args.sasl_mechanism,
            "sasl_plain_username": args.sasl_username,
            "sasl_plain_password": args.sasl_password,
        }
    if options:
        sasl = bool(args.sasl_mechanism)
        options["security_protocol"] = ("SASL_" if sasl else "") + ("SSL" if tls else "PLAINTEXT")
    return options


def bootstrap(args: argparse.Namespace, deadline: float) -> dict[str, Any]:
    """Where to connect, and for how long to try: kafka-python's own bootstrap timeout is
    30 s whatever --timeout-s says, so each client gets what is left of it."""
    left_ms = max(1, int((deadline - time.monotonic()) * 1000))
    return {"bootstrap_servers": args.bootstrap, "bootstrap_timeout_ms": left_ms}


def create_topic(args: argparse.Namespace, deadline: float) -> None:
    admin = KafkaAdminClient(**bootstrap(args, deadline), **security(args))
    try:
        admin.create_topics([NewTopic(args.topic, args.partitions, 1)])
        print(f"topic {args.topic}: created", flush=True)
    except TopicAlreadyExistsError:
        print(f"topic {args.topic}: exists", flush=True)
    finally:
        admin.close()


def produce(args: argparse.Namespace, deadline: float) -> int:
    producer = KafkaProducer(
        **bootstrap(args, deadline),
        acks="all",
        enable_idempotence=True,
        linger_ms=5,
        **security(args),
    )
    keys = args.keys or args.count
    records = [(f"key-{i % keys}", f"{args.run_id} record {i}") for i in range(args.count)]
    try:
        # send() queues the record and returns a future of its RecordMetadata.
        futures = [producer.send(args.topic, v.encode(), key=k.encode()) for k, v in records]
        producer.flush(timeout=args.timeout_s)
        for (key, value), future in zip(records, futures, strict=True):
            md = future.get(timeout=args.timeout_s)
            print(f"produced partition={md.partition} offset={md.offset} key={key} value={value}")
    finally:
        producer.close()
    return len(records)


def consume(args: argparse.Namespace, expected: int, deadline: float) -> int:
    consumer = KafkaConsumer(
        args.topic,
        **bootstrap(args, deadline),
        group_id=args.group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=args.session_timeout_ms,
        heartbeat_interval_ms=args.session_timeout_ms // 4,
        **security(args),
    )
    seen = 0
    try:
        while seen < expected and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                for r in records:
                    key, value = text(r.key), text(r.value)
                    print(
                        f"consumed partition={r.partition} offset={r.offset} "
                        f"key={key} value={value}"
                    )
                    # An older run's record is shown but not counted.
                    seen += value.startswith(f"{args.run_id} ")
        consumer.commit()
        committed = {tp.partition: consumer.committed(tp) for tp in consumer.assignment()}
        print(f"committed offsets {dict(sorted(committed.items()))} for group {args.group}")
    finally:
        consumer.close()
    return seen


def text(raw: bytes | None) -> str:
    return "" if raw is None else raw.decode(errors="replace")


def main() -> int:
    args = arguments()
    deadline = time.monotonic() + args.timeout_s
    try:
        create_topic(args, deadline)
        sent = produce(args, deadline)
        seen = consume(args, sent, deadline)
    except KafkaTimeoutError as error:
        print(f"kafka-python: no answer from {args.bootstrap} within --timeout-s "
              f"{args.timeout_s:g}: {error}", file=sys.stderr)  # fmt: skip
        return 1
    print(
        f"kafka-python via {args.bootstrap}: produced {sent}, consumed {seen} (run {args.run_id})"
    )
    return 0 if sent == seen == args.count else 1


if __name__ == "__main__":
    raise SystemExit(main())
