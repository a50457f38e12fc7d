"""wire against bytes Kafka's own code wrote: for the versions no Python codec knows yet.

Each body in tests/unit/wire/kafka_bytes.json was encoded by Kafka's generated classes or
answered by a real broker (tests/support/kafka_bytes_capture.py). wire must read the same
field values Kafka reads in it, and write it back byte for byte.
"""

from __future__ import annotations

import pytest

from tests.unit.wire.kafka_bytes import KAFKA_SAMPLES, KafkaSample, as_kafka_json
from wire import codec, messages


@pytest.mark.parametrize("sample", KAFKA_SAMPLES, ids=lambda s: f"{s.message}-v{s.version}")
def test_wire_reads_and_writes_what_kafka_wrote(sample: KafkaSample) -> None:
    cls = getattr(messages, sample.message)
    decoded = codec.decode(cls, sample.body, sample.version)
    assert as_kafka_json(decoded, sample.version) == sample.kafka_json, sample.source
    assert codec.encode(decoded, sample.version) == sample.body, sample.source


def test_the_samples_cover_kip_1242_and_the_v0_fallback() -> None:
    """The fixture holds what this file is for: ApiVersions v5 with a cluster and node id,
    the broker's REBOOTSTRAP_REQUIRED answer (KIP-1242), and a v0 UNSUPPORTED_VERSION body."""
    requests = [s for s in KAFKA_SAMPLES if s.message == "ApiVersionsRequest"]
    assert any(s.version == 5 and s.kafka_json["clusterId"] for s in requests)
    errors = {s.kafka_json["errorCode"] for s in KAFKA_SAMPLES if s.message.endswith("Response")}
    assert {0, 35, 129} <= errors
