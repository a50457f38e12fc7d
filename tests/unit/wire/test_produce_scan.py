"""The Produce fast path equals the generated decoder: same values, same rejections.

wire.codec.scan_produce_request is hand-written for the proxy's hot path. These
properties tie it to the generated codec: on every valid body of every version it returns
what the decoder returns, and on arbitrary and mutated bytes it fails exactly when the
decoder fails.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.wire.strategies import message
from wire import codec
from wire.errors import MalformedMessage, UnsupportedVersion
from wire.messages import ProduceRequest
from wire.messages import produce_request as preq

VERSIONS = list(range(ProduceRequest.VERSIONS[0], ProduceRequest.VERSIONS[1] + 1))
SLOW = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=300)


def summary_of(msg: ProduceRequest, version: int) -> codec.ProduceSummary:
    """What the scan must return, read off the decoded message."""
    return codec.ProduceSummary(
        msg.transactional_id,
        msg.acks,
        msg.timeout_ms,
        [
            codec.ProducePartition(t.topic_id if version >= 13 else t.name, p.index, p.records)
            for t in msg.topic_data
            for p in t.partition_data
        ],
    )


def outcome(fn: object, *args: object) -> object:
    try:
        return fn(*args)  # type: ignore[operator]
    except MalformedMessage:
        return MalformedMessage


@SLOW
@given(
    st.sampled_from(VERSIONS).flatmap(lambda v: st.tuples(message(ProduceRequest, v), st.just(v)))
)
def test_scan_equals_decode_on_valid_bodies(msg_version: tuple[ProduceRequest, int]) -> None:
    msg, version = msg_version
    body = codec.encode(msg, version)
    scanned = codec.scan_produce_request(body, version)
    assert scanned == summary_of(codec.decode(ProduceRequest, body, version), version)
    assert scanned == summary_of(msg, version)
    assert scanned.record_bytes == sum(len(p.records or b"") for p in scanned.partitions)


@SLOW
@given(
    st.sampled_from(VERSIONS).flatmap(lambda v: st.tuples(message(ProduceRequest, v), st.just(v))),
    st.lists(st.tuples(st.integers(0, 2000), st.binary(max_size=5), st.integers(0, 5)), max_size=3),
)
def test_scan_fails_exactly_when_decode_fails(
    msg_version: tuple[ProduceRequest, int], edits: list[tuple[int, bytes, int]]
) -> None:
    msg, version = msg_version
    body = bytearray(codec.encode(msg, version))
    for pos, new, removed in edits:
        at = pos % (len(body) + 1)
        body[at : at + removed] = new
    data = bytes(body)
    decoded = outcome(codec.decode, ProduceRequest, data, version)
    scanned = outcome(codec.scan_produce_request, data, version)
    if decoded is MalformedMessage:
        assert scanned is MalformedMessage
    else:
        assert scanned == summary_of(decoded, version)  # type: ignore[arg-type]


@settings(max_examples=500)
@given(st.binary(max_size=80), st.sampled_from(VERSIONS))
def test_scan_and_decode_agree_on_random_bytes(data: bytes, version: int) -> None:
    decoded = outcome(codec.decode, ProduceRequest, data, version)
    scanned = outcome(codec.scan_produce_request, data, version)
    if decoded is MalformedMessage:
        assert scanned is MalformedMessage
    else:
        assert scanned == summary_of(decoded, version)  # type: ignore[arg-type]


def test_records_are_views_and_versions_are_checked() -> None:
    records = b"r" * 5000
    request = ProduceRequest(
        acks=-1,
        topic_data=[
            preq.TopicProduceData(
                name="t", partition_data=[preq.PartitionProduceData(index=3, records=records)]
            )
        ],
    )
    body = codec.encode(request, 9)
    summary = codec.scan_produce_request(body, 9)
    (partition,) = summary.partitions
    assert (partition.topic, partition.partition, summary.acks) == ("t", 3, -1)
    assert isinstance(partition.records, memoryview) and partition.records.obj is body
    assert summary.record_bytes == 5000
    with pytest.raises(UnsupportedVersion):
        codec.scan_produce_request(body, 14)
