"""Message bodies written by Kafka's own code (tests/unit/wire/kafka_bytes.json), and wire
messages in the JSON form Kafka's generated JsonConverter classes give them.

Why: some versions wire decodes are newer than both independent Python codecs (kafka-python,
kio). For those, the reference is Kafka: the fixture holds bodies that Kafka's generated
classes encoded and that a real broker answered (tests/support/kafka_bytes_capture.py), each
with Kafka's own decode of it as JSON.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.unit.wire.strategies import fresh_default
from wire._struct import FieldSpec, Struct

__all__ = ["KAFKA_SAMPLES", "KafkaSample", "as_kafka_json"]

_FIXTURE = Path(__file__).with_name("kafka_bytes.json")


@dataclass(frozen=True)
class KafkaSample:
    """One body: which message and version, where it came from, and what Kafka reads in it."""

    message: str
    version: int
    source: str
    body: bytes
    kafka_json: Any


def _load() -> list[KafkaSample]:
    data = json.loads(_FIXTURE.read_text())
    return [
        KafkaSample(s["message"], s["version"], s["source"], bytes.fromhex(s["hex"]),
                    s["kafka_json"])
        for s in data["samples"]
    ]  # fmt: skip


#: Every captured body.
KAFKA_SAMPLES: list[KafkaSample] = _load()


def _camel(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(part.capitalize() for part in rest)


def _value(spec: FieldSpec, value: Any, version: int) -> Any:
    if value is None:
        return None
    elem = spec.wire_type.removeprefix("[]")
    if spec.wire_type.startswith("[]"):
        return [_element(elem, v, version) for v in value]
    return _element(elem, value, version)


def _element(elem: str, value: Any, version: int) -> Any:
    if elem == "struct":
        return as_kafka_json(value, version)
    if elem == "uuid":  # Kafka's Uuid.toString: URL-safe base64 without padding
        return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")
    if elem in ("bytes", "records"):
        return base64.b64encode(bytes(value)).decode()
    return value


def as_kafka_json(obj: Struct, version: int) -> dict[str, Any]:
    """``obj`` as Kafka's JsonConverter writes it: the fields ``version`` has, camelCase,
    tagged fields only when they differ from their default."""
    out: dict[str, Any] = {}
    for spec in type(obj)._SCHEMA:
        if not spec.present_in(version):
            continue
        value = getattr(obj, spec.name)
        if spec.tag is not None and value == fresh_default(spec):
            continue
        out[_camel(spec.name)] = _value(spec, value, version)
    return out
