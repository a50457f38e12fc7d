# Strategy: what the Python clients' programs share (the case programs _case_confluent.py,
# _case_kafka_python.py and _case_aiokafka.py, the admin programs _admin_confluent.py and
# _admin_kafka_python.py, _txn_confluent.py): their command line and the JSON lines they
# print, the same as the Go and Java programs (tests/compat/_cases.py defines both), and the
# admin round's step-and-wait. Each program only speaks its own client library.
"""The command line and output of the Python clients' case programs."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from tests.compat._cases import LARGE_LIMIT_BYTES, CaseRecord, CaseTopic, digest, topics

__all__ = [
    "arguments",
    "case_topics",
    "emit",
    "headers_of",
    "producer_settings",
    "record_headers",
    "sasl_from_environment",
    "step",
]


def arguments(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="one feature case (tests/compat/_cases.py)")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--case", required=True)
    parser.add_argument("--topic", required=True, help="base name of the case's topics")
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--deadline-s", type=float, default=120.0)
    return parser.parse_args(argv)


def case_topics(args: argparse.Namespace) -> list[CaseTopic]:
    return topics(args.case, args.topic, args.run_id)


def producer_settings(bootstrap: str, topic: CaseTopic) -> dict[str, Any]:
    """The producer of kafka-python and aiokafka (same keyword names) for one case topic:
    idempotent, acks=all, the topic's codec, and room for its records if they are large."""
    settings: dict[str, Any] = {
        "bootstrap_servers": bootstrap,
        "acks": "all",
        "enable_idempotence": True,
        "linger_ms": 5,
        "compression_type": topic.compression or None,
    }
    if "max.message.bytes" in topic.configs:
        settings["max_request_size"] = LARGE_LIMIT_BYTES
    return settings


def record_headers(record: CaseRecord) -> list[tuple[str, bytes]]:
    """A case record's headers as the Python clients take them."""
    return [(k, v.encode()) for k, v in record.headers]


def headers_of(headers: Sequence[tuple[str, bytes | None]] | None) -> list[list[str]]:
    return [[k, (v or b"").decode()] for k, v in headers or ()]


def emit(
    event: str,
    topic: str,
    partition: int = -1,
    offset: int = -1,
    key: bytes | None = None,
    value: bytes | None = None,
    headers: Sequence[tuple[str, bytes | None]] | None = None,
    detail: str | None = None,
) -> None:
    """One JSON line: "created", "produced", "consumed" (values shown by their digest), or
    another step with its ``detail``."""
    line: dict[str, object] = {
        "event": event,
        "topic": topic,
        "partition": partition,
        "offset": offset,
        "key": None if key is None else key.decode(),
        "value": digest(value),
        "headers": headers_of(headers),
    }
    if detail is not None:
        line["detail"] = detail
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


def step(event: str, topic: str, detail: str = "") -> None:
    """One admin step: its JSON line, then wait for the driver's "next" on stdin (the driver
    checks the step on the broker directly before the next one changes it)."""
    emit(event, topic, detail=detail)
    if not sys.stdin.readline():
        raise SystemExit("stdin ended before the driver said next")


def sasl_from_environment() -> tuple[str, str, str] | None:
    """(mechanism, user, password) from $COMPAT_SASL_* (tests/compat/_tls.go_environment)."""
    mechanism = os.environ.get("COMPAT_SASL_MECHANISM")
    if not mechanism:
        return None
    return mechanism, os.environ["COMPAT_SASL_USER"], os.environ["COMPAT_SASL_PASSWORD"]
