"""An idle consumer's repeated incremental fetch in process (serve() against a scripted
broker, virtual time): recognised by its bytes without planning it again, answered as the
ordinary path answers it, and handed back to that path whenever something differs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import trio
import trio.testing

from proxy.held.fetch.holding import FetchHolding
from proxy.held.fetch.planning import FetchPlanner
from proxy.held.fetch.session import INVALID_FETCH_SESSION_EPOCH
from tests.support.inprocess import InProcessProxy, WireClient, proxy_in_process
from tests.support.one_partition import broker_with_topic, fetch, produce
from wire.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic

VERSION = 12


def _fetch_u() -> FetchRequest:
    """A sessionless fetch of u-0 from its start, held (u-0 is empty)."""
    wanted = FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)
    return FetchRequest(max_wait_ms=500, min_bytes=1, max_bytes=1 << 20, session_id=0,
                        session_epoch=-1,
                        topics=[FetchTopic(topic="u", partitions=[wanted])])  # fmt: skip


def _incremental(session_id: int, epoch: int) -> FetchRequest:
    return FetchRequest(max_wait_ms=500, min_bytes=1, max_bytes=1 << 20,
                        session_id=session_id, session_epoch=epoch)  # fmt: skip


class _Plans:
    """Counts the fetches the held path plans the ordinary way (decoded, through the session
    cache) and the repeats it holds from their bytes."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.ordinary = self.repeats = 0
        for owner, name, counter in ((FetchPlanner, "plan", "ordinary"),
                                     (FetchHolding, "hold_repeat", "repeats")):  # fmt: skip
            monkeypatch.setattr(owner, name, self._counting(getattr(owner, name), counter))

    def _counting(self, method: Callable[..., Any], counter: str) -> Callable[..., Any]:
        def counted(owner: object, *args: Any, **kwargs: Any) -> Any:
            result = method(owner, *args, **kwargs)
            if result is not None:
                setattr(self, counter, getattr(self, counter) + 1)
            return result

        return counted


async def _open_session(proxy: InProcessProxy, offset: int = 0) -> tuple[WireClient, int]:
    """A consumer at ``offset`` whose session has been answered once incrementally (the
    template)."""
    consumer = await proxy.client()
    full = fetch(offset=offset, max_wait_ms=500)
    full.session_epoch = 0
    await consumer.send(full, VERSION)
    _, response, _ = await consumer.receive()
    assert response.session_id
    await consumer.send(_incremental(response.session_id, 1), VERSION)
    _, response, _ = await consumer.receive()
    assert (response.error_code, response.responses) == (0, [])
    return consumer, response.session_id


async def _idle_repeats(consumer: WireClient, session_id: int, epochs: range) -> None:
    """Send the idle incremental fetch at each of ``epochs``; each is answered empty, on its
    session, when its max wait (500 ms) has passed."""
    for epoch in epochs:
        sent = trio.current_time()
        sent_id = await consumer.send(_incremental(session_id, epoch), VERSION)
        correlation_id, response, at = await consumer.receive()
        assert correlation_id == sent_id
        assert (response.error_code, response.session_id, response.responses) == (
            0, session_id, [],
        )  # fmt: skip
        # The purgatory's clock is whole milliseconds, arrival rounded down.
        assert 0.499 <= round(at - sent, 6) <= 0.501


async def test_idle_repeats_are_held_without_planning_them_again(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    plans = _Plans(monkeypatch)
    async with proxy_in_process(broker_with_topic()) as proxy:
        consumer, session_id = await _open_session(proxy)
        assert (plans.ordinary, plans.repeats) == (2, 0)
        await _idle_repeats(consumer, session_id, range(2, 6))
        assert (plans.ordinary, plans.repeats) == (2, 4)
        held = proxy.running.services.held
        assert held is not None and held.fetches.statistics().expired == 6


async def test_repeats_stay_held_while_the_watchers_poll_is_answered_late(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A saturated loop reads the watcher's answers late (at 10,000 idle consumers, up to
    1.4 s after the poll's send). While its poll is out the partition stays covered, so the
    repeats are held without asking the broker; a fixed cover of two max waits lapsed and sent
    them the slow way."""
    plans = _Plans(monkeypatch)
    broker = broker_with_topic()
    broker.late_fetch_s = 1.5  # each watcher poll comes back 2 s after its send
    async with proxy_in_process(broker, fetch={"watcher_max_wait_ms": 500}) as proxy:
        consumer, session_id = await _open_session(proxy)
        asked = len(broker.fetch_requests)
        await _idle_repeats(consumer, session_id, range(2, 12))
        assert (plans.ordinary, plans.repeats) == (2, 10)
        polls = [request for _, request in broker.fetch_requests[asked:]]
        assert polls and all(request.max_bytes == 1 for request in polls)  # the watcher's only


async def test_a_watcher_poll_out_for_ten_max_waits_no_longer_covers(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A poll that does not come back (a hung broker or connection) covers its partition for
    ten of its max waits; after that the consumer's fetches ask the broker again."""
    plans = _Plans(monkeypatch)
    broker = broker_with_topic()
    async with proxy_in_process(broker, fetch={"watcher_max_wait_ms": 500}) as proxy:
        consumer, session_id = await _open_session(proxy)
        broker.late_fetch_s = 60.0  # from the poll out now (sent at most 0.5 s ago) on
        start, epochs = trio.current_time(), iter(range(2, 100))

        async def poll_until(deadline: float) -> None:
            while trio.current_time() < deadline:
                await consumer.send(_incremental(session_id, next(epochs)), VERSION)
                await consumer.receive()

        await poll_until(start + 4.5)
        assert plans.ordinary == 2  # held from their bytes: the poll covers them
        await poll_until(start + 5.5)
        assert plans.ordinary > 2  # planned and read from the broker again


async def test_a_produce_wakes_a_held_repeat_with_the_records(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    plans = _Plans(monkeypatch)
    async with proxy_in_process(broker_with_topic()) as proxy:
        consumer, session_id = await _open_session(proxy)
        producer = await proxy.client()
        sent = trio.current_time()
        await consumer.send(_incremental(session_id, 2), VERSION)
        await trio.sleep(0.2)
        await producer.send(produce(acks=1), 9)
        await producer.receive()
        _, response, at = await consumer.receive()
        assert round(at - sent, 6) == 0.2
        (topic,) = response.responses
        assert bytes(topic.partitions[0].records) == b"r" * 10
        assert plans.repeats == 1


async def test_a_repeat_whose_log_start_moved_is_told_it_at_its_deadline(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Records deleted while a repeat waits (the log start moves; nothing new to read, so the
    hold runs to its deadline): the incremental answer must carry the partition with its new
    log start (KIP-227), not the session's empty answer the repeat usually gets."""
    plans = _Plans(monkeypatch)
    broker = broker_with_topic()
    broker.create_topic("u")
    broker.append("t", 0, b"r" * 10)
    async with proxy_in_process(broker, fetch={"watcher_max_wait_ms": 100}) as proxy:
        consumer, session_id = await _open_session(proxy, offset=1)
        other = await proxy.client()  # held on u-0: the watcher's poll covers u-0 and t-0
        await other.send(_fetch_u(), VERSION)
        broker.log_start_offsets[("t", 0)] = 1
        sent = trio.current_time()
        await consumer.send(_incremental(session_id, 2), VERSION)
        await trio.sleep(0.2)
        broker.append("u", 0, b"u")  # the watcher's poll comes back, telling the log start
        _, response, at = await consumer.receive()
        assert 0.499 <= round(at - sent, 6) <= 0.501
        (topic,) = response.responses
        (partition,) = topic.partitions
        assert (partition.log_start_offset, partition.high_watermark) == (1, 1)
        assert bytes(partition.records or b"") == b""
        await _idle_repeats(consumer, session_id, range(3, 5))  # told: empty again
        assert plans.repeats == 3


async def test_a_held_repeat_leaves_the_purgatory_with_its_connection(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A connection the proxy ends (here: the client's next frame is too short to be a
    request) takes its held repeat out of the purgatory at once, not at its deadline. (A
    client that only closes is still answered: Kafka keeps its fetch until the deadline too.)"""
    async with proxy_in_process(broker_with_topic()) as proxy:
        held = proxy.running.services.held
        assert held is not None
        consumer, session_id = await _open_session(proxy)
        sent = trio.current_time()
        await consumer.send(_incremental(session_id, 2), VERSION)
        await trio.sleep(0.1)
        assert held.fetches.statistics().pending == 1
        await consumer.stream.send_all(b"\x00\x00\x00\x01x")
        assert await consumer.closed()
        assert held.fetches.statistics().pending == 0
        assert trio.current_time() - sent < 0.2  # (its deadline: 0.5 s)


async def test_a_repeat_at_a_stale_epoch_gets_the_session_error(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bytes alike are not enough: the session must expect that epoch (the ordinary path
    then answers INVALID_FETCH_SESSION_EPOCH, as Kafka does)."""
    plans = _Plans(monkeypatch)
    async with proxy_in_process(broker_with_topic()) as proxy:
        consumer, session_id = await _open_session(proxy)
        await consumer.send(_incremental(session_id, 2), VERSION)
        await consumer.receive()
        await consumer.send(_incremental(session_id, 2), VERSION)  # again: 3 is expected
        _, response, _ = await consumer.receive()
        assert response.error_code == INVALID_FETCH_SESSION_EPOCH
        assert (plans.ordinary, plans.repeats) == (3, 1)


async def test_news_known_before_the_repeat_goes_the_ordinary_way(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Records produced between two polls: the repeat is not held but read at once. The
    consumer then moves its offset (an ordinary incremental fetch), and its next idle poll is
    a repeat again, held."""
    plans = _Plans(monkeypatch)
    async with proxy_in_process(broker_with_topic()) as proxy:
        consumer, session_id = await _open_session(proxy)
        producer = await proxy.client()
        await producer.send(produce(acks=1), 9)
        await producer.receive()
        sent = trio.current_time()
        await consumer.send(_incremental(session_id, 2), VERSION)
        _, response, at = await consumer.receive()
        assert round(at - sent, 6) == 0.0
        assert bytes(response.responses[0].partitions[0].records) == b"r" * 10
        moved = _incremental(session_id, 3)
        moved.topics = fetch(offset=1).topics
        await consumer.send(moved, VERSION)
        _, response, _ = await consumer.receive()
        assert (response.error_code, response.responses) == (0, [])
        sent = trio.current_time()
        await consumer.send(_incremental(session_id, 4), VERSION)
        _, response, at = await consumer.receive()
        assert (response.error_code, response.responses) == (0, [])
        assert 0.499 <= round(at - sent, 6) <= 0.501  # (whole milliseconds, as above)
        assert (plans.ordinary, plans.repeats) == (4, 1)


async def test_sessionless_repeats_are_held_and_a_full_fetch_still_opens_a_session(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client without sessions (librdkafka 2.16, kafka-python, aiokafka) repeats its
    sessionless fetch: recognised from the second one on. The same bytes with epoch 0 are a
    full fetch: it opens a session."""
    plans = _Plans(monkeypatch)
    async with proxy_in_process(broker_with_topic()) as proxy:
        consumer = await proxy.client()
        for _ in range(4):
            sent = trio.current_time()
            await consumer.send(fetch(max_wait_ms=500), VERSION)
            _, response, at = await consumer.receive()
            (topic,) = response.responses
            assert (response.session_id, topic.partitions[0].high_watermark) == (0, 0)
            assert round(at - sent, 6) <= 0.501
        # The first is planned and looks upstream, which teaches the proxy the partition's
        # end; the second is planned, held at once and kept as the template; the rest repeat.
        assert (plans.ordinary, plans.repeats) == (2, 2)
        full = fetch(max_wait_ms=500)
        full.session_epoch = 0
        await consumer.send(full, VERSION)
        _, response, _ = await consumer.receive()
        assert response.session_id != 0
        assert (plans.ordinary, plans.repeats) == (3, 2)
