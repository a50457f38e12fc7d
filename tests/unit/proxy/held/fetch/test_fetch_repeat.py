"""An idle consumer's repeated incremental fetch, recognised by its bytes
(proxy/held/fetch/repeat.py), checked against the generated codec."""

from __future__ import annotations

from dataclasses import replace
from uuid import UUID

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.held.fetch.repeat import FetchRepeat
from proxy.held.fetch.session import ContextKind, FetchSessionCache, PartitionNews
from wire.apis import API_BY_KEY, ApiKey
from wire.codec import encode
from wire.framing import frame
from wire.headers import RequestHeader, encode_request_header
from wire.messages.fetch_request import (
    FetchPartition,
    FetchRequest,
    FetchTopic,
    ForgottenTopic,
)

FETCH = API_BY_KEY[ApiKey.FETCH]
VERSIONS = range(max(FETCH.min_version, 7), FETCH.max_version + 1)  # sessions: v7 on
TOPIC_ID = UUID("6a1f3c9e-0b7d-4e52-9a38-51c2d0e4f7a1")
QUIET = PartitionNews(high_watermark=5, last_stable_offset=5, log_start_offset=0,
                      has_records=False)  # fmt: skip


def _idle(session_id: int, epoch: int, **fields: object) -> FetchRequest:
    """An incremental fetch that changes nothing in its session."""
    request = FetchRequest(
        max_wait_ms=500, min_bytes=1, max_bytes=52428800, session_id=session_id,
        session_epoch=epoch, rack_id="",
    )  # fmt: skip
    return replace(request, **fields) if fields else request


def _frame_body(request: FetchRequest, version: int, correlation_id: int) -> bytes:
    header = RequestHeader(ApiKey.FETCH, version, correlation_id, "consumer-1")
    return frame(encode_request_header(header), encode(request, version))[4:]


def _header_length(version: int) -> int:
    return len(encode_request_header(RequestHeader(ApiKey.FETCH, version, 0, "consumer-1")))


def _learnt(version: int) -> tuple[FetchRepeat, int, FetchSessionCache]:
    """A template learnt from a real session's first incremental fetch (epoch 1)."""
    cache = FetchSessionCache(new_id=lambda: 7)
    uses_ids = version >= 13
    topic = FetchTopic(
        topic="" if uses_ids else "t",
        topic_id=TOPIC_ID if uses_ids else UUID(int=0),
        partitions=[FetchPartition(partition=0, fetch_offset=5, partition_max_bytes=1 << 20)],
    )
    full = cache.new_context(replace(_idle(0, 0), topics=[topic]), 0)
    session_id, _ = full.respond(dict.fromkeys(full.partitions, QUIET), 0)
    request = _idle(session_id, 1)
    context = cache.new_context(request, 0)
    assert context.kind is ContextKind.INCREMENTAL
    body = _frame_body(request, version, 41)
    repeat = FetchRepeat.learn(body, _header_length(version), request, version, context)
    assert repeat is not None
    return repeat, session_id, cache


@pytest.mark.parametrize("version", VERSIONS)
def test_a_repeat_is_recognised_with_its_correlation_id_and_epoch(version: int) -> None:
    repeat, session_id, _ = _learnt(version)
    assert repeat.match(_frame_body(_idle(session_id, 2), version, 42)) == (42, 2)
    assert repeat.session.session_id == session_id


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(
    "changed", [{"max_wait_ms": 499}, {"min_bytes": 2}, {"isolation_level": 1}, {"max_bytes": 1}]
)
def test_anything_else_that_changed_is_not_a_repeat(
    version: int, changed: dict[str, object]
) -> None:
    repeat, session_id, _ = _learnt(version)
    assert repeat.match(_frame_body(_idle(session_id, 2, **changed), version, 42)) is None


@pytest.mark.parametrize("version", VERSIONS)
def test_a_fetch_that_changes_its_session_is_not_a_repeat(version: int) -> None:
    repeat, session_id, _ = _learnt(version)
    name, topic_id = ("", TOPIC_ID) if version >= 13 else ("t", UUID(int=0))
    partition = FetchPartition(partition=0, fetch_offset=6, partition_max_bytes=1 << 20)
    moved = FetchTopic(topic=name, topic_id=topic_id, partitions=[partition])
    forgotten = ForgottenTopic(topic=name, topic_id=topic_id, partitions=[0])
    for change in ({"topics": [moved]}, {"forgotten_topics_data": [forgotten]}):
        assert repeat.match(_frame_body(_idle(session_id, 2, **change), version, 42)) is None


def test_another_client_id_or_version_is_not_a_repeat() -> None:
    repeat, session_id, _ = _learnt(12)
    other_client = RequestHeader(ApiKey.FETCH, 12, 42, "consumer-2")
    body = frame(encode_request_header(other_client), encode(_idle(session_id, 2), 12))[4:]
    assert repeat.match(body) is None
    assert repeat.match(_frame_body(_idle(session_id, 2), 11, 42)) is None


def test_bytes_the_codec_does_not_reproduce_give_no_template() -> None:
    """A client whose bytes differ from the codec's (here: a tagged field the schema does
    not know, at the end) keeps the ordinary path."""
    request = _idle(7, 1)
    body = _frame_body(request, 12, 41)
    tampered = body[:-1] + b"\x01\x63\x01\x00"  # one unknown tagged field: id 99, 1 byte
    context = FetchSessionCache().new_context(_idle(0, -1), 0)
    assert FetchRepeat.learn(tampered, _header_length(12), request, 12, context) is None


@given(
    correlation_id=st.integers(-(2**31), 2**31 - 1),
    epoch=st.integers(1, 2**31 - 1),
    version=st.sampled_from(list(VERSIONS)),
)
def test_match_reads_what_the_codec_wrote(correlation_id: int, epoch: int, version: int) -> None:
    repeat, session_id, _ = _learnt(version)
    body = _frame_body(_idle(session_id, epoch), version, correlation_id)
    assert repeat.match(body) == (correlation_id, epoch)


@pytest.mark.parametrize("version", VERSIONS)
def test_a_sessionless_fetch_repeats_with_its_correlation_id_only(version: int) -> None:
    """librdkafka, kcat, kafka-python and aiokafka poll sessionless: the same partitions at
    the same offsets; the epoch stays -1 (and a full fetch's 0 is told apart by its caller)."""
    uses_ids = version >= 13
    topic = FetchTopic(
        topic="" if uses_ids else "t",
        topic_id=TOPIC_ID if uses_ids else UUID(int=0),
        partitions=[FetchPartition(partition=0, fetch_offset=5, partition_max_bytes=1 << 20)],
    )
    request = _idle(0, -1, topics=[topic])
    context = FetchSessionCache().new_context(request, 0)
    assert context.kind is ContextKind.SESSIONLESS
    body = _frame_body(request, version, 41)
    repeat = FetchRepeat.learn(body, _header_length(version), request, version, context)
    assert repeat is not None and repeat.session is None
    assert repeat.match(_frame_body(request, version, 42)) == (42, -1)
    assert repeat.match(_frame_body(replace(request, session_epoch=0), version, 42)) == (42, 0)
    moved = replace(topic, partitions=[replace(topic.partitions[0], fetch_offset=6)])
    assert repeat.match(_frame_body(replace(request, topics=[moved]), version, 42)) is None
