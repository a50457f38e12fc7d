"""Held fetches without a broker: the delayed operation, partition knowledge, answers built
from a fetch context, and the cancel-safe upstream frame reader (virtual time throughout)."""

from __future__ import annotations

import itertools
from uuid import UUID

import trio
import trio.testing

from proxy.held.fetch.answer import (
    FetchResults,
    build_response,
    has_unread_records,
    learn,
    reached_offsets,
    satisfied,
    upstream_request,
)
from proxy.held.fetch.delayed import DelayedFetch
from proxy.held.fetch.session import ContextKind, FetchSessionCache
from proxy.held.partition_state import PartitionStates
from proxy.primitives.framed import FrameReader
from proxy.primitives.purgatory import Purgatory, current_time_ms
from proxy.routing.topic_names import TopicNames
from wire.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic
from wire.messages.fetch_response import FetchableTopicResponse, FetchResponse, PartitionData

TOPIC_ID = UUID(int=0xABCDEF)


def _request(offsets: dict[tuple[str, int], int], session_id: int = 0, epoch: int = 0,
             max_wait_ms: int = 500, min_bytes: int = 1) -> FetchRequest:  # fmt: skip
    topics: dict[str, list[FetchPartition]] = {}
    for (topic, index), offset in offsets.items():
        topics.setdefault(topic, []).append(
            FetchPartition(partition=index, fetch_offset=offset, partition_max_bytes=1 << 20)
        )
    return FetchRequest(
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=50 << 20,
        session_id=session_id,
        session_epoch=epoch,
        topics=[FetchTopic(topic=name, partitions=parts) for name, parts in topics.items()],
    )


def _answer(partitions: dict[tuple[str, int], tuple[int, bytes]]) -> FetchResponse:
    """A broker's answer: per partition (high watermark, records)."""
    topics: dict[str, list[PartitionData]] = {}
    for (topic, index), (high, records) in partitions.items():
        topics.setdefault(topic, []).append(
            PartitionData(
                partition_index=index,
                high_watermark=high,
                last_stable_offset=high,
                log_start_offset=0,
                records=records,
            )
        )
    return FetchResponse(
        responses=[FetchableTopicResponse(topic=t, partitions=p) for t, p in topics.items()]
    )


def _cache() -> FetchSessionCache:
    ids = itertools.count(7)
    return FetchSessionCache(new_id=lambda: next(ids))


# -- exactly-once completion ------------------------------------------------------------------


async def test_fetch_woken_by_data_in_the_tick_its_deadline_passes_completes_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Data and deadline race: both completion paths run in the same millisecond; the fetch
    must be answered exactly once, by whichever came first."""
    states, purgatory = PartitionStates(), Purgatory()
    states.learn(("t", 0), 5, 5, 0, 0)
    answers = []

    class Counted(DelayedFetch):
        def on_complete(self) -> None:
            answers.append(current_time_ms())
            super().on_complete()

    async with trio.open_nursery() as nursery:
        await nursery.start(purgatory.run)
        start_ms = current_time_ms()
        operation = Counted(100, states, [(("t", 0), 5)], 0)
        assert not purgatory.try_complete_else_watch(operation, operation.keys, start_ms)
        await trio.sleep_until((start_ms + 100) / 1000)  # the deadline's own tick
        states.learn(("t", 0), 6, 6, 0, 0)  # and data arrives in it
        purgatory.check_and_complete(("t", 0))
        await operation.wait()
        await trio.sleep(1)  # nothing else may fire later
        nursery.cancel_scope.cancel()
    stats = purgatory.statistics()
    assert len(answers) == 1
    assert stats.completed + stats.expired == 1
    assert stats.pending == 0


async def test_fetch_completes_on_new_data_stale_mark_or_error_not_on_old_data() -> None:
    states = PartitionStates()
    states.learn(("t", 0), 5, 5, 0, 0)
    purgatory = Purgatory()
    waiting = DelayedFetch(1000, states, [(("t", 0), 5)], 0)
    assert not purgatory.try_complete_else_watch(waiting, waiting.keys, 0)
    assert not states.learn(("t", 0), 5, 5, 0, 0)  # the same answer again: nothing new
    assert purgatory.check_and_complete(("t", 0)) == 0
    states.invalidate(("t", 0))  # a produce through the proxy
    assert purgatory.check_and_complete(("t", 0)) == 1
    assert waiting.is_completed and not waiting.expired

    states.learn(("t", 0), 9, 9, 0, 0)
    erroring = DelayedFetch(1000, states, [(("t", 0), 9)], 0)
    assert not purgatory.try_complete_else_watch(erroring, erroring.keys, 0)
    states.learn(("t", 0), 9, 9, 0, 6)  # NOT_LEADER_OR_FOLLOWER
    assert purgatory.check_and_complete(("t", 0)) == 1


async def test_read_committed_fetch_waits_for_the_last_stable_offset() -> None:
    states = PartitionStates()
    states.learn(("t", 0), 10, 4, 0, 0)  # an open transaction from 4 on
    committed = DelayedFetch(1000, states, [(("t", 0), 4)], 1)
    uncommitted = DelayedFetch(1000, states, [(("t", 0), 4)], 0)
    assert not committed.try_complete()
    assert uncommitted.try_complete()
    states.learn(("t", 0), 11, 11, 0, 0)  # the commit marker
    assert committed.try_complete()


# -- what the proxy knows ---------------------------------------------------------------------


def test_nothing_new_only_while_watched_fresh_and_exactly_at_the_end() -> None:
    states = PartitionStates()
    key = ("t", 0)
    assert not states.nothing_new(key, 5, 0, now_ms=0)  # never answered for
    states.learn(key, 5, 5, 0, 0)
    assert not states.nothing_new(key, 5, 0, now_ms=0)  # not covered by the watcher
    state = states.get(key)
    assert state is not None
    state.watched_until_ms = 100
    assert states.nothing_new(key, 5, 0, now_ms=50)
    assert not states.nothing_new(key, 5, 0, now_ms=101)  # coverage lapsed
    assert not states.nothing_new(key, 4, 0, now_ms=50)  # there is data at 4
    assert not states.nothing_new(key, 6, 0, now_ms=50)  # out of range: the broker says so
    states.invalidate(key)
    assert not states.nothing_new(key, 5, 0, now_ms=50)  # a produce landed


def test_topic_ids_map_to_names_once_metadata_named_them() -> None:
    names = TopicNames()
    assert names.key("", TOPIC_ID, 3) == (TOPIC_ID, 3)
    names.learn(TOPIC_ID, "orders")
    assert names.key("", TOPIC_ID, 3) == ("orders", 3)
    assert names.key("orders", UUID(int=0), 3) == ("orders", 3)


# -- answers built from a context -------------------------------------------------------------


def test_incremental_fetch_asks_for_the_whole_session_and_answers_only_news() -> None:
    cache, states, names = _cache(), PartitionStates(), TopicNames()
    full = cache.new_context(_request({("t", 0): 0, ("t", 1): 0}), now_ms=0)
    first = FetchResults.of(_answer({("t", 0): (3, b"abc"), ("t", 1): (0, b"")}))
    learn(first, states, names, 0)
    response = build_response(full, first, states, names, now_ms=0)
    session_id = response.session_id
    assert session_id == 7
    assert [(t.topic, [p.partition_index for p in t.partitions]) for t in response.responses] == [
        ("t", [0, 1])
    ]

    # The client moves partition 0 on and lists only it; the session still holds partition 1.
    incremental = cache.new_context(_request({("t", 0): 3}, session_id, 1), now_ms=1)
    assert incremental.kind is ContextKind.INCREMENTAL
    upstream = upstream_request(
        _request({("t", 0): 3}), incremental, max_bytes=1 << 20, max_wait_ms=100
    )
    asked = {(t.topic, p.partition): p.fetch_offset for t in upstream.topics for p in t.partitions}
    assert asked == {("t", 0): 3, ("t", 1): 0}
    assert (upstream.session_id, upstream.session_epoch) == (0, -1)  # sessionless
    assert (upstream.max_bytes, upstream.min_bytes, upstream.max_wait_ms) == (1 << 20, 0, 100)

    # Only partition 1 got a record: the answer carries it alone.
    second = FetchResults.of(_answer({("t", 0): (3, b""), ("t", 1): (1, b"x")}))
    learn(second, states, names, 0)
    response = build_response(incremental, second, states, names, now_ms=1)
    assert response.session_id == session_id
    assert [(t.topic, [p.partition_index for p in t.partitions]) for t in response.responses] == [
        ("t", [1])
    ]


def test_satisfied_by_min_bytes_or_any_error() -> None:
    assert not satisfied(FetchResults.of(_answer({("t", 0): (0, b"")})), min_bytes=1)
    assert satisfied(FetchResults.of(_answer({("t", 0): (1, b"abcd")})), min_bytes=4)
    assert not satisfied(FetchResults.of(_answer({("t", 0): (1, b"abcd")})), min_bytes=5)
    erroring = _answer({("t", 0): (0, b"")})
    erroring.responses[0].partitions[0].error_code = 1  # OFFSET_OUT_OF_RANGE
    assert satisfied(FetchResults.of(erroring), min_bytes=1 << 20)


def test_a_fetch_that_got_too_little_waits_past_what_it_saw() -> None:
    cache, states, names = _cache(), PartitionStates(), TopicNames()
    context = cache.new_context(_request({("t", 0): 2, ("t", 1): 0}), now_ms=0)
    learn(FetchResults.of(_answer({("t", 0): (4, b"xy"), ("t", 1): (0, b"")})), states, names, 0)
    assert reached_offsets(context, states, names, 0) == [(("t", 0), 4), (("t", 1), 0)]


# -- the upstream reader ----------------------------------------------------------------------


async def test_frame_reader_resumes_a_frame_whose_read_was_cancelled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    left, right = trio.socket.socketpair()
    reader = FrameReader(trio.SocketStream(right))
    writer = trio.SocketStream(left)
    frame = (6).to_bytes(4, "big") + b"abcdef"
    await writer.send_all(frame[:2])
    with trio.move_on_after(0.05):
        await reader.next_frame()
    await writer.send_all(frame[2:7])
    with trio.move_on_after(0.05):
        await reader.next_frame()
    await writer.send_all(frame[7:] + frame)
    assert await reader.next_frame() == frame
    assert await reader.next_frame() == frame


def test_records_the_broker_reported_but_did_not_return_are_asked_for_again() -> None:
    """Tansu on s3 answers a short fetch with the high watermark and no records."""
    cache = _cache()
    context = cache.new_context(_request({("t", 0): 0, ("t", 1): 5}), now_ms=0)
    short = FetchResults.of(_answer({("t", 0): (5, b""), ("t", 1): (5, b"")}))
    assert has_unread_records(context, short, 0)
    caught_up = FetchResults.of(_answer({("t", 0): (5, b"abc"), ("t", 1): (5, b"")}))
    assert not has_unread_records(context, caught_up, 0)
    quiet = FetchResults.of(_answer({("t", 0): (0, b""), ("t", 1): (5, b"")}))
    assert not has_unread_records(context, quiet, 0)
