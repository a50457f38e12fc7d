"""The ListOffsets watcher of passthrough mode, against the scripted broker in virtual time:
when it polls, what wakes held fetches (and what must not), and how long it claims freshness."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from uuid import UUID

import pytest
import trio
import trio.testing

from proxy.held.fetch.delayed import DelayedFetch
from proxy.held.fetch.offset_watcher import OffsetWatcher
from proxy.held.partition_state import PartitionKey, PartitionStates
from proxy.observability.metrics import Metrics
from proxy.primitives.memory import MemoryPool
from proxy.primitives.purgatory import current_time_ms
from proxy.routing.topic_names import TopicNames
from proxy.upstream.broker_channel import BrokerChannel
from tests.support.recording_purgatory import RecordingPurgatory
from tests.support.scripted_broker import (
    BROKER,
    NODE_ID,
    UNKNOWN_TOPIC_OR_PARTITION,
    ScriptedBroker,
    ScriptedDialer,
)
from wire.apis import ApiKey

NOT_LEADER_OR_FOLLOWER = 6
P0: tuple[str, int] = ("t", 0)
P1: tuple[str, int] = ("t", 1)


@dataclass
class Watching:
    broker: ScriptedBroker
    states: PartitionStates
    purgatory: RecordingPurgatory
    watcher: OffsetWatcher

    def learn(self, key: PartitionKey, high_watermark: int) -> None:
        """What a client's Fetch answer taught the proxy about ``key``."""
        self.states.learn(key, high_watermark, high_watermark, 0, 0)

    def hold(self, key: PartitionKey, delay_ms: int = 5000) -> DelayedFetch:
        """A client fetch held on ``key`` at its known end, as the service holds it."""
        state = self.states.get(key)
        assert state is not None
        operation = DelayedFetch(delay_ms, self.states, [(key, state.high_watermark)], 0)
        assert not self.purgatory.try_complete_else_watch(operation, [key])
        self.watcher.want([key], current_time_ms() + delay_ms)
        return operation

    def polls(self) -> list[float]:
        return [round(at, 6) for at in self.broker.list_offsets_times()]


@asynccontextmanager
async def watching(
    partitions: int = 2, interval_ms: int = 100, log: int = 3
) -> AsyncIterator[Watching]:
    """An OffsetWatcher on its own channel to a scripted broker with topic "t" (``log``
    records in each partition), started at virtual time 0, with a running fetch purgatory."""
    broker = ScriptedBroker()
    broker.create_topic("t", partitions)
    for index in range(partitions):
        for _ in range(log):
            broker.append("t", index, b"r")
    async with trio.open_nursery() as nursery:
        channel = BrokerChannel(BROKER, nursery, dialer=ScriptedDialer(broker, nursery))
        states = PartitionStates()
        purgatory = RecordingPurgatory()
        await nursery.start(purgatory.run)
        watcher = OffsetWatcher(
            NODE_ID,
            channel,
            states,
            TopicNames(),
            purgatory,
            interval_ms,
            Metrics(MemoryPool(1000, 1000)),
        )
        nursery.start_soon(watcher.run)
        yield Watching(broker, states, purgatory, watcher)
        nursery.cancel_scope.cancel()


async def test_polls_every_interval_while_wanted(autojump_clock: trio.testing.MockClock) -> None:
    async with watching(interval_ms=100) as w:
        w.learn(P0, 3)
        w.learn(P1, 3)
        w.watcher.want([P0, P1], until_ms=450)
        await trio.sleep(2)
        # One poll at once, then one per interval until the want (+ one interval) ends.
        assert w.polls() == [0.0, 0.1, 0.2, 0.3, 0.4, 0.5]
        request = w.broker.list_offsets_requests[0]
        assert request.replica_id == -1 and request.isolation_level == 0
        assert [(t.name, p.partition_index, p.timestamp) for t in request.topics
                for p in t.partitions] == [("t", 0, -1), ("t", 1, -1)]  # fmt: skip
        assert len(w.broker.list_offsets_requests) == 6  # one request per poll, both partitions
        assert w.broker.fetches() == 0  # never a Fetch: the proxy identity reads no records
        assert w.purgatory.checked == []  # nothing moved


async def test_nothing_is_polled_when_nothing_is_wanted(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with watching() as w:
        await trio.sleep(10)
        w.watcher.want([(UUID(int=7), 0)], until_ms=20_000)  # by topic id only: not watchable
        await trio.sleep(10)
        assert w.polls() == []


async def test_wants_expire_and_come_back(autojump_clock: trio.testing.MockClock) -> None:
    async with watching(interval_ms=100) as w:
        w.watcher.want([P0], until_ms=150)
        await trio.sleep(5)
        assert w.polls() == [0.0, 0.1, 0.2]  # wanted until 150 + 100 of linger
        w.watcher.want([P0], until_ms=current_time_ms() + 50)
        await trio.sleep(5)
        assert w.polls() == [0.0, 0.1, 0.2, 5.0, 5.1]
        # A longer want of a key already wanted extends it; a shorter one does not shorten it.
        w.watcher.want([P0], until_ms=current_time_ms() + 300)
        w.watcher.want([P0], until_ms=current_time_ms())
        await trio.sleep(5)
        assert w.polls()[5:] == [10.0, 10.1, 10.2, 10.3, 10.4]


async def test_an_end_moved_behind_the_proxy_wakes_the_held_fetch(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with watching(interval_ms=100) as w:
        w.learn(P0, 3)
        w.learn(P1, 3)
        on_p0, on_p1 = w.hold(P0), w.hold(P1)
        await trio.sleep(0.25)
        assert w.purgatory.checked == []
        w.broker.append("t", 0, b"behind")  # another client of the cluster
        with trio.fail_after(1):
            await on_p0.wait()
        assert round(trio.current_time(), 6) == 0.3  # the next poll after the append
        assert not on_p0.expired and not on_p1.is_completed
        assert w.purgatory.checked == [P0]  # only the partition that moved
        state = w.states.get(P0)
        assert state is not None and state.stale  # the re-fetch must ask the broker ...
        assert state.high_watermark == 3  # ... and the ListOffsets answer is never an end
        await trio.sleep(1)
        assert w.purgatory.checked == [P0]  # the same answer again is no news


async def test_the_first_answer_wakes_when_records_landed_since_the_fetch(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with watching(log=5) as w:
        w.learn(P0, 3)  # a client fetch saw 3; two records landed since
        operation = w.hold(P0)
        with trio.fail_after(1):
            await operation.wait()
        assert trio.current_time() == 0.0
        assert w.purgatory.checked == [P0]


async def test_a_tansu_answer_below_the_end_is_no_news_and_each_new_batch_is(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with watching(log=8) as w:
        # Tansu 0.6 answers the last batch's base offset + 1: batches [0..4] and [5..7] -> 6.
        w.broker.latest_offsets[P0] = 6
        w.learn(P0, 8)
        operation = w.hold(P0)
        await trio.sleep(1)
        assert not operation.is_completed and w.purgatory.checked == []
        # A batch of 3 at 8: Tansu says 9, past the previous answer (and the known end).
        w.broker.latest_offsets[P0] = 9
        await trio.sleep(0.1)
        assert operation.is_completed and w.purgatory.checked == [P0]


async def test_an_answer_with_no_news_keeps_the_partition_fresh_one_interval(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with watching(interval_ms=100) as w:
        w.learn(P0, 3)
        assert not w.states.nothing_new(P0, 3, 0, current_time_ms())
        w.watcher.want([P0], until_ms=300)
        await trio.sleep(0.05)
        state = w.states.get(P0)
        assert state is not None and state.watched_until_ms == 100  # the poll sent at 0 + 100
        assert w.states.nothing_new(P0, 3, 0, current_time_ms())
        await trio.sleep(1)  # the want ended; the last poll was sent at 0.4
        assert state.watched_until_ms == 500
        assert not w.states.nothing_new(P0, 3, 0, current_time_ms())


@pytest.mark.parametrize("error", [NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION])
async def test_a_lasting_partition_error_never_wakes(
    autojump_clock: trio.testing.MockClock, error: int
) -> None:
    async with watching() as w:
        w.learn(P0, 3)
        w.learn(P1, 3)
        if error == UNKNOWN_TOPIC_OR_PARTITION:
            w.broker.logs.pop(P0)
        else:
            w.broker.offset_errors[P0] = error
        on_p0 = w.hold(P0, delay_ms=2000)
        w.hold(P1, delay_ms=2000)
        await trio.sleep(1)
        assert w.polls()[:10] == [i / 10 for i in range(10)]  # polling goes on (P1)
        assert w.purgatory.checked == []
        assert not on_p0.is_completed
        p0, p1 = w.states.get(P0), w.states.get(P1)
        assert p0 is not None and p1 is not None
        assert p0.watched_until_ms == -1  # its fetches must ask the broker
        assert p0.error_code == 0  # the proxy identity's error is not the client's
        assert p1.watched_until_ms > current_time_ms()
        await trio.sleep(1.5)
        assert on_p0.expired


async def test_an_error_that_appears_wakes_once(autojump_clock: trio.testing.MockClock) -> None:
    async with watching() as w:
        w.learn(P0, 3)
        operation = w.hold(P0)
        await trio.sleep(0.25)
        w.broker.offset_errors[P0] = NOT_LEADER_OR_FOLLOWER  # the leader moved
        await trio.sleep(0.1)
        assert operation.is_completed and w.purgatory.checked == [P0]
        # The client's re-fetch on its own connection learns the partition again, and holds.
        w.learn(P0, 3)
        again = w.hold(P0)
        await trio.sleep(1)
        assert not again.is_completed and w.purgatory.checked == [P0]


async def test_a_failed_poll_uncovers_and_retries_after_a_pause(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with watching(interval_ms=100) as w:
        w.learn(P0, 3)
        w.watcher.want([P0], until_ms=10_000)
        await trio.sleep(0.05)
        state = w.states.get(P0)
        assert state is not None and state.watched_until_ms == 100
        w.broker.break_on[ApiKey.LIST_OFFSETS] = 2  # the broker goes away for two polls
        w.broker.append("t", 0, b"during the outage")
        operation = w.hold(P0)  # holds at 3: the append above is news to be found
        await trio.sleep(0.1)
        assert state.watched_until_ms == -1  # fetches must ask the broker meanwhile
        with trio.fail_after(2):
            await operation.wait()
        # Polls at 0 and 0.1 (broken), 0.6 (broken), 1.1 answered: the move is news.
        assert w.polls()[:4] == [0.0, 0.1, 0.6, 1.1]
        assert round(trio.current_time(), 6) == 1.1
        assert w.purgatory.checked == [P0]
        await trio.sleep(1)
        assert w.purgatory.checked == [P0]


async def test_an_end_that_moves_back_wakes_too(autojump_clock: trio.testing.MockClock) -> None:
    async with watching() as w:
        w.learn(P0, 3)
        operation = w.hold(P0)
        await trio.sleep(0.25)
        w.broker.latest_offsets[P0] = 0  # the topic was deleted and made again
        await trio.sleep(0.1)
        # Not past the known end, but a change: the re-fetch tells the client (out of range).
        assert operation.is_completed and w.purgatory.checked == [P0]
