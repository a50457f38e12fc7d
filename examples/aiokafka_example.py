#!/usr/bin/env python3
# Strategy: the smallest complete aiokafka application, pointed at the proxy and nothing else.
# It creates the topic (admin), produces with acks=all (every record sent at once, then every
# acknowledgement awaited), then reads everything back in a consumer group from the earliest
# offset and commits. Every value carries a run id, so the consumer can tell this run's
# records from older ones when the topic already exists. TLS and SASL are flags, so the same
# program talks to a proxy listener that needs them; tests/compat runs it as its aiokafka
# client and checks every line it prints against the broker.
"""aiokafka through purgatory-proxy: admin, acks=all producer, consumer group with commit.

    python examples/aiokafka_example.py --bootstrap 127.0.0.1:9092

Prints one line per record produced and consumed ("produced|consumed partition=P offset=O
key=K value=V"), then a summary; exits 0 when every record came back, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import ssl
import sys
import time
import uuid
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaConnectionError


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092", help="the proxy's HOST:PORT")
    parser.add_argument("--topic", default="examples-aiokafka")
    parser.add_argument("--group", default="examples-aiokafka")
    parser.add_argument("--count", type=int, default=10, help="records to produce")
    parser.add_argument("--keys", type=int, default=0, help="distinct keys (0: one per record)")
    parser.add_argument("--partitions", type=int, default=3, help="when the topic is created")
    # Apache Kafka's group.min.session.timeout.ms is 6000; the embedded Tansu broker holds a
    # JoinGroup for about half the session timeout, so shorter is quicker there.
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    parser.add_argument("--timeout-s", type=float, default=60.0, help="give up after this")
    parser.add_argument("--run-id", default=uuid.uuid4().hex[:8], help="prefix of every value")
    parser.add_argument(
        "--no-idempotence",
        action="store_true",
        help="plain acks=all producer: only for the embedded Tansu broker of `make run`, "
        "which fails aiokafka's InitProducerId (Apache Kafka does not)",
    )
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
    """aiokafka's keyword arguments for TLS (an SSLContext) and SASL."""
    options: dict[str, Any] = {}
    if args.tls or args.ca_file or args.cert_file:
        context = ssl.create_default_context(cafile=args.ca_file)
        context.check_hostname = not args.no_hostname_check
        if args.cert_file:
            context.load_cert_chain(args.cert_file, args.key_file)
        options["ssl_context"] = context
    if args.sasl_mechanism:
        options |= {
            "sasl_mechanism": args.sasl_mechanism,
            "sasl_plain_username": args.sasl_username,
            "sasl_plain_password": args.sasl_password,
        }
    if options:
        tls, sasl = "ssl_context" in options, "sasl_mechanism" in options
        options["security_protocol"] = ("SASL_" if sasl else "") + ("SSL" if tls else "PLAINTEXT")
    return options


async def create_topic(args: argparse.Namespace) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=args.bootstrap, **security(args))
    await admin.start()
    try:
        response = await admin.create_topics([NewTopic(args.topic, args.partitions, 1)])
    finally:
        await admin.close()
    for topic, code, *_ in response.topic_errors:
        # 36 = TOPIC_ALREADY_EXISTS: fine, we reuse it.
        state = "created" if code == 0 else "exists" if code == 36 else f"error {code}"
        print(f"topic {topic}: {state}", flush=True)
        if code not in (0, 36):
            raise SystemExit(1)


async def produce(args: argparse.Namespace) -> int:
    producer = AIOKafkaProducer(
        bootstrap_servers=args.bootstrap,
        acks="all",
        enable_idempotence=not args.no_idempotence,
        linger_ms=5,
        **security(args),
    )
    await producer.start()
    keys = args.keys or args.count
    records = [(f"key-{i % keys}", f"{args.run_id} record {i}") for i in range(args.count)]
    try:
        # send() queues the record and returns a future of its RecordMetadata.
        futures = [await producer.send(args.topic, v.encode(), key=k.encode()) for k, v in records]
        for (key, value), md in zip(records, await asyncio.gather(*futures), strict=True):
            print(f"produced partition={md.partition} offset={md.offset} key={key} value={value}")
    finally:
        await producer.stop()
    return len(records)


async def consume(args: argparse.Namespace, expected: int, deadline: float) -> int:
    consumer = AIOKafkaConsumer(
        args.topic,
        bootstrap_servers=args.bootstrap,
        group_id=args.group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=args.session_timeout_ms,
        heartbeat_interval_ms=args.session_timeout_ms // 4,
        **security(args),
    )
    await consumer.start()
    seen = 0
    try:
        while seen < expected and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=500)
            for records in batches.values():
                for r in records:
                    key, value = text(r.key), text(r.value)
                    print(
                        f"consumed partition={r.partition} offset={r.offset} "
                        f"key={key} value={value}"
                    )
                    # An older run's record is shown but not counted.
                    seen += value.startswith(f"{args.run_id} ")
        await consumer.commit()
        committed = {tp.partition: await consumer.committed(tp) for tp in consumer.assignment()}
        print(f"committed offsets {dict(sorted(committed.items()))} for group {args.group}")
    finally:
        await consumer.stop()
    return seen


def text(raw: bytes | None) -> str:
    return "" if raw is None else raw.decode(errors="replace")


async def main() -> int:
    args = arguments()
    deadline = time.monotonic() + args.timeout_s
    try:
        await asyncio.wait_for(create_topic(args), args.timeout_s)
    except (KafkaConnectionError, TimeoutError) as error:
        print(f"aiokafka: no answer from {args.bootstrap} within --timeout-s "
              f"{args.timeout_s:g}: {error or 'timed out'}", file=sys.stderr)  # fmt: skip
        return 1
    sent = await produce(args)
    seen = await consume(args, args.count, deadline)
    print(
        f"aiokafka via {args.bootstrap}: produced {args.count}, consumed {seen} (run {args.run_id})"
    )
    return 0 if sent == seen == args.count else 1


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
