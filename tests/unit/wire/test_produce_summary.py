"""wire.produce_summary against the generated codec: same fields on valid requests, and the
same verdict (accepted or MalformedMessage) on truncated and corrupted ones; a response called
untagged is one the codec decodes with no KIP-951 field in it."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.wire.strategies import message
from wire.codec import decode, encode
from wire.errors import MalformedMessage, UnsupportedVersion
from wire.messages import ProduceRequest, ProduceResponse
from wire.messages.produce_response import (
    NodeEndpoint,
    PartitionProduceResponse,
    TopicProduceResponse,
)
from wire.produce_summary import ProduceSummary, produce_response_has_no_tags, summarize_produce

_LOW, _HIGH = ProduceRequest.VERSIONS
_SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def _encoded(draw: st.DrawFn) -> tuple[bytes, int]:
    version = draw(st.integers(_LOW, _HIGH))
    return encode(draw(message(ProduceRequest, version)), version), version


def _expected(body: bytes, version: int) -> ProduceSummary | None:
    """What the generated decoder reads from ``body`` (None: it rejects it)."""
    try:
        produce = decode(ProduceRequest, body, version)
    except MalformedMessage:
        return None
    return ProduceSummary(
        produce.acks,
        produce.timeout_ms,
        tuple(
            (t.name, t.topic_id, tuple(p.index for p in t.partition_data))
            for t in produce.topic_data
        ),
    )


def _actual(body: bytes, version: int) -> ProduceSummary | None:
    try:
        return summarize_produce(body, version)
    except MalformedMessage:
        return None


@_SETTINGS
@given(_encoded())
def test_valid_requests_read_as_the_codec_reads_them(case: tuple[bytes, int]) -> None:
    body, version = case
    expected = _expected(body, version)
    assert expected is not None
    assert summarize_produce(body, version) == expected
    assert summarize_produce(memoryview(bytearray(body)), version) == expected


@_SETTINGS
@given(_encoded(), st.data())
def test_truncated_requests_rejected_as_the_codec_rejects_them(
    case: tuple[bytes, int], data: st.DataObject
) -> None:
    body, version = case
    cut = data.draw(st.integers(0, max(0, len(body) - 1)))
    assert _actual(body[:cut], version) == _expected(body[:cut], version)
    assert _actual(body + b"\x00", version) is None  # trailing bytes


@_SETTINGS
@given(_encoded(), st.data())
def test_corrupted_requests_judged_as_the_codec_judges_them(
    case: tuple[bytes, int], data: st.DataObject
) -> None:
    body, version = case
    if not body:
        return
    damaged = bytearray(body)
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(body) - 1))
        damaged[at] = data.draw(st.integers(0, 255))
    assert _actual(bytes(damaged), version) == _expected(bytes(damaged), version)


def test_versions_outside_the_table_are_unsupported() -> None:
    try:
        summarize_produce(b"", _HIGH + 1)
    except UnsupportedVersion:
        return
    raise AssertionError("no UnsupportedVersion")


def test_acks_and_timeout_come_from_the_fixed_prefix() -> None:
    """A hand-made v9 (flexible) body: null transactional id, acks=-1, timeout 1500, no topics."""
    acks = (-1).to_bytes(2, "big", signed=True)
    body = b"\x00" + acks + (1500).to_bytes(4, "big") + b"\x01\x00"
    assert summarize_produce(body, 9) == ProduceSummary(-1, 1500, ())


@st.composite
def _encoded_response(draw: st.DrawFn) -> tuple[bytes, int]:
    version = draw(st.integers(ProduceRequest.FIRST_FLEXIBLE_VERSION or 9, _HIGH))
    response = draw(message(ProduceResponse, version))
    return encode(response, version), version


def _names_no_broker(body: bytes, version: int) -> bool:
    """The codec decodes ``body`` and finds no tagged field that could name a broker."""
    try:
        response = decode(ProduceResponse, body, version)
    except MalformedMessage:
        return False
    if response.node_endpoints or response.raw_tagged_fields:
        return False
    no_leader = PartitionProduceResponse().current_leader
    return all(
        not t.raw_tagged_fields
        and all(
            not p.raw_tagged_fields
            and p.current_leader == no_leader
            and all(not e.raw_tagged_fields for e in p.record_errors)
            for p in t.partition_responses
        )
        for t in response.responses
    )


@_SETTINGS
@given(_encoded_response(), st.data())
def test_untagged_responses_are_the_ones_with_nothing_to_rewrite(
    case: tuple[bytes, int], data: st.DataObject
) -> None:
    """Never "no tags" for a response the codec rejects or that carries a tagged field; and
    "no tags" for every response the codec reads without any (the fast path is taken)."""
    body, version = case
    assert produce_response_has_no_tags(body, version) == _names_no_broker(body, version)
    damaged = bytearray(body)
    if damaged:
        at = data.draw(st.integers(0, len(body) - 1))
        damaged[at] = data.draw(st.integers(0, 255))
    cut = bytes(damaged[: data.draw(st.integers(0, len(damaged)))])
    for variant in (bytes(damaged), cut, body + b"\x00"):
        if produce_response_has_no_tags(variant, version):
            assert _names_no_broker(variant, version)


def test_a_leader_error_with_node_endpoints_is_not_passed_through() -> None:
    response = ProduceResponse(
        responses=[TopicProduceResponse(name="t", partition_responses=[
            PartitionProduceResponse(index=0, error_code=6)])],
        node_endpoints=[NodeEndpoint(node_id=1, host="broker", port=9092)],
    )  # fmt: skip
    assert not produce_response_has_no_tags(encode(response, 10), 10)
    response.node_endpoints = []
    assert produce_response_has_no_tags(encode(response, 10), 10)
    assert not produce_response_has_no_tags(encode(response, 8), 8)  # not flexible: decode
