"""KIP-227 fetch sessions as the proxy keeps them (Kafka's FetchSessionTest, in spirit)."""

from __future__ import annotations

import itertools
from uuid import UUID

import pytest

from proxy.held.fetch.session import (
    FETCH_SESSION_ID_NOT_FOUND,
    FETCH_SESSION_TOPIC_ID_ERROR,
    INVALID_FETCH_SESSION_EPOCH,
    ContextKind,
    FetchSessionCache,
    PartitionNews,
    next_epoch,
)
from wire.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic, ForgottenTopic

QUIET = PartitionNews(
    high_watermark=10, last_stable_offset=10, log_start_offset=0, has_records=False
)


def _fetch(
    session_id: int,
    epoch: int,
    partitions: dict[tuple[str, int], int] | None = None,
    forgotten: dict[str, list[int]] | None = None,
    topic_id: UUID | None = None,
) -> FetchRequest:
    topics: dict[str, list[FetchPartition]] = {}
    for (topic, index), offset in (partitions or {}).items():
        topics.setdefault(topic, []).append(
            FetchPartition(partition=index, fetch_offset=offset, partition_max_bytes=1 << 20)
        )
    return FetchRequest(
        session_id=session_id,
        session_epoch=epoch,
        topics=[
            FetchTopic(topic=name, topic_id=topic_id or UUID(int=0), partitions=parts)
            for name, parts in topics.items()
        ],
        forgotten_topics_data=[
            ForgottenTopic(topic=name, partitions=parts)
            for name, parts in (forgotten or {}).items()
        ],
    )


def _cache(**kwargs: int) -> FetchSessionCache:
    ids = itertools.count(101)
    return FetchSessionCache(new_id=lambda: next(ids), **kwargs)


def _open(cache: FetchSessionCache, partitions: dict[tuple[str, int], int], now_ms: int = 0) -> int:
    context = cache.new_context(_fetch(0, 0, partitions), now_ms)
    assert context.kind is ContextKind.FULL
    session_id, carried = context.respond({key: QUIET for key in partitions}, now_ms)
    assert carried == list(partitions)
    return session_id


def test_full_fetch_creates_a_session_at_epoch_one() -> None:
    cache = _cache()
    session_id = _open(cache, {("t", 0): 0, ("t", 1): 5})
    assert session_id == 101
    session = cache.get(session_id)
    assert session is not None and session.epoch == 1
    assert {key: p.fetch_offset for key, p in session.partitions.items()} == {
        ("t", 0): 0,
        ("t", 1): 5,
    }


def test_sessionless_fetch_creates_nothing() -> None:
    cache = _cache()
    context = cache.new_context(_fetch(0, -1, {("t", 0): 0}), 0)
    assert context.kind is ContextKind.SESSIONLESS
    assert context.respond({("t", 0): QUIET}, 0) == (0, [("t", 0)])
    assert len(cache) == 0


def test_incremental_needs_a_known_session_at_the_right_epoch() -> None:
    cache = _cache()
    session_id = _open(cache, {("t", 0): 0})
    unknown = cache.new_context(_fetch(999, 1), 0)
    assert (unknown.kind, unknown.error_code) == (ContextKind.ERROR, FETCH_SESSION_ID_NOT_FOUND)
    assert unknown.respond({}, 0) == (0, [])
    stale = cache.new_context(_fetch(session_id, 2), 0)
    assert (stale.kind, stale.error_code) == (ContextKind.ERROR, INVALID_FETCH_SESSION_EPOCH)
    ok = cache.new_context(_fetch(session_id, 1), 0)
    assert ok.kind is ContextKind.INCREMENTAL
    assert cache.get(session_id).epoch == 2  # type: ignore[union-attr]
    replay = cache.new_context(_fetch(session_id, 1), 0)
    assert replay.error_code == INVALID_FETCH_SESSION_EPOCH


def test_incremental_adds_updates_and_forgets_partitions() -> None:
    cache = _cache()
    session_id = _open(cache, {("a", 0): 0, ("a", 1): 0, ("b", 0): 0})
    context = cache.new_context(
        _fetch(session_id, 1, {("a", 1): 7, ("c", 0): 3}, forgotten={"b": [0]}), 0
    )
    assert context.kind is ContextKind.INCREMENTAL
    assert {key: p.fetch_offset for key, p in context.partitions.items()} == {
        ("a", 0): 0,
        ("a", 1): 7,
        ("c", 0): 3,
    }


def test_incremental_response_carries_only_partitions_with_news() -> None:
    cache = _cache()
    keys = [("t", 0), ("t", 1), ("t", 2), ("t", 3)]
    session_id = _open(cache, dict.fromkeys(keys, 0))
    context = cache.new_context(_fetch(session_id, 1), 0)
    news = {
        ("t", 0): QUIET,  # nothing new: left out
        ("t", 1): PartitionNews(11, 11, 0, has_records=True),  # records
        ("t", 2): PartitionNews(10, 10, 0, has_records=False, error_code=6),  # an error
        ("t", 3): PartitionNews(10, 9, 0, has_records=False),  # last stable offset moved
    }
    assert context.respond(news, 0) == (session_id, [("t", 1), ("t", 2), ("t", 3)])
    again = cache.new_context(_fetch(session_id, 2), 0)
    assert again.respond(news | {("t", 1): PartitionNews(11, 11, 0, False)}, 0) == (
        session_id,
        [("t", 2)],  # errors are always news; the rest were told already
    )


def test_forgetting_the_last_partition_closes_the_session() -> None:
    cache = _cache()
    session_id = _open(cache, {("t", 0): 0})
    context = cache.new_context(_fetch(session_id, 1, forgotten={"t": [0]}), 0)
    assert context.kind is ContextKind.SESSIONLESS
    assert cache.get(session_id) is None


@pytest.mark.parametrize("epoch", [0, -1])
def test_a_full_fetch_naming_a_session_closes_it(epoch: int) -> None:
    cache = _cache()
    session_id = _open(cache, {("t", 0): 0})
    context = cache.new_context(_fetch(session_id, epoch, {("t", 0): 0}), 0)
    assert cache.get(session_id) is None
    new_id, _ = context.respond({("t", 0): QUIET}, 0)
    assert (new_id != 0) is (epoch == 0)


def test_topic_ids_must_stay_consistent_within_a_session() -> None:
    cache = _cache()
    session_id = _open(cache, {("t", 0): 0})
    mixed = cache.new_context(_fetch(session_id, 1, {("t", 1): 0}, topic_id=UUID(int=5)), 0)
    assert mixed.error_code == FETCH_SESSION_TOPIC_ID_ERROR


def test_a_full_cache_evicts_only_sessions_idle_long_enough() -> None:
    cache = _cache(max_sessions=2, eviction_ms=1000)
    first = _open(cache, {("t", 0): 0}, now_ms=0)
    second = _open(cache, {("t", 1): 0}, now_ms=100)
    assert _open(cache, {("t", 2): 0}, now_ms=500) == 0  # nobody idle for 1 s yet
    cache.new_context(_fetch(first, 1), 600)  # first is used again: second is now the LRU
    third = _open(cache, {("t", 3): 0}, now_ms=1100)
    assert third != 0
    assert cache.get(second) is None and cache.get(first) is not None
    assert cache.evictions == 1


def test_zero_slots_means_no_sessions() -> None:
    cache = _cache(max_sessions=0)
    assert _open(cache, {("t", 0): 0}) == 0


def test_next_epoch_wraps_to_one_and_keeps_final() -> None:
    assert next_epoch(0) == 1
    assert next_epoch(41) == 42
    assert next_epoch(2**31 - 1) == 1
    assert next_epoch(-1) == -1
