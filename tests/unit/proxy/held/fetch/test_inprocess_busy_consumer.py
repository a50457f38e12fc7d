"""A busy consumer's fetch goes upstream as its own long-poll (in process against a scripted
broker, virtual time): once its partition's readable end has moved twice within the busy
window, the fetch is sent on the client's own upstream connection with the client's max wait and
min bytes, and answered when the broker answers it (one round trip: no hold, no re-fetch);
once the partition goes quiet, or while another fetch already waits on it, it is held in the
purgatory as before."""

from __future__ import annotations

import trio
import trio.testing

from tests.support.inprocess import InProcessProxy, WireClient, proxy_in_process
from tests.support.one_partition import batch_at, broker_with_topic, fetch
from tests.support.scripted_broker import ScriptedBroker
from wire.messages import FetchRequest

BUSY_WINDOW_MS = 300
MAX_WAIT_MS = 500


def long_polls(broker: ScriptedBroker) -> list[FetchRequest]:
    """The client's own long-polls the broker received: the client's min bytes and max wait
    (the proxy's own reads ask with min bytes 0; its watcher with max_bytes 1)."""
    return [
        request
        for _, request in broker.fetch_requests
        if request.min_bytes == 1 and request.max_bytes > 1 and request.max_wait_ms == MAX_WAIT_MS
    ]


def records(response: object) -> bytes:
    return bytes(response.responses[0].partitions[0].records or b"")  # type: ignore[attr-defined]


def held(proxy: InProcessProxy) -> tuple[int, int]:
    """(fetches completed, expired) in the fetch purgatory so far."""
    purgatory = proxy.running.services.held
    assert purgatory is not None
    stats = purgatory.fetches.statistics()
    return stats.completed, stats.expired


async def busy_consumer(proxy: InProcessProxy, broker: ScriptedBroker) -> tuple[WireClient, int]:
    """A consumer that has read three batches written 100 ms apart (the proxy saw the
    partition's end move twice within the window); the offset it fetches next."""
    consumer = await proxy.client()
    offset = 0
    for _ in range(3):
        broker.append("t", 0, batch_at(offset))
        await consumer.send(fetch(offset, max_wait_ms=MAX_WAIT_MS), 12)
        _, response, _ = await consumer.receive()
        assert records(response) == batch_at(offset)
        offset += 1
        await trio.sleep(0.1)
    return consumer, offset


async def test_a_busy_consumers_fetch_is_its_own_long_poll_answered_in_one_round_trip(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = broker_with_topic()
    async with proxy_in_process(broker, fetch={"busy_window_ms": BUSY_WINDOW_MS}) as proxy:
        consumer, offset = await busy_consumer(proxy, broker)
        before, polls = held(proxy), len(long_polls(broker))
        sent = trio.current_time()
        await consumer.send(fetch(offset, max_wait_ms=MAX_WAIT_MS), 12)
        await trio.sleep(0.05)
        broker.append("t", 0, batch_at(offset))
        _, response, at = await consumer.receive()
        assert records(response) == batch_at(offset)
        assert round(at - sent, 3) == 0.05  # the broker's answer, as it came
        assert len(long_polls(broker)) == polls + 1  # the client's own long-poll went up
        assert held(proxy) == before  # and nothing waited in the purgatory


async def test_a_busy_consumers_long_poll_that_runs_out_is_answered_at_max_wait(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = broker_with_topic()
    async with proxy_in_process(broker, fetch={"busy_window_ms": BUSY_WINDOW_MS}) as proxy:
        consumer, offset = await busy_consumer(proxy, broker)
        polls = len(long_polls(broker))
        sent = trio.current_time()
        await consumer.send(fetch(offset, max_wait_ms=MAX_WAIT_MS), 12)
        _, response, at = await consumer.receive()
        assert records(response) == b"" and response.error_code == 0
        assert round(at - sent, 3) == MAX_WAIT_MS / 1000
        assert len(long_polls(broker)) == polls + 1


async def test_once_the_partition_is_quiet_the_fetch_is_held_in_the_purgatory(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = broker_with_topic()
    async with proxy_in_process(broker, fetch={"busy_window_ms": BUSY_WINDOW_MS}) as proxy:
        consumer, offset = await busy_consumer(proxy, broker)
        await trio.sleep(BUSY_WINDOW_MS / 1000)  # no news for the window
        completed, _ = held(proxy)
        polls = len(long_polls(broker))
        await consumer.send(fetch(offset, max_wait_ms=MAX_WAIT_MS), 12)
        await trio.sleep(0.05)
        broker.append("t", 0, batch_at(offset))
        _, response, _ = await consumer.receive()
        assert records(response) == batch_at(offset)
        assert len(long_polls(broker)) == polls  # no long-poll of its own
        assert held(proxy)[0] > completed  # held, woken by the watcher


async def test_a_busy_partition_another_fetch_long_polls_is_read_for_both(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Two busy consumers of one partition: the first one's long-poll reads for both; the
    second waits in the purgatory and is woken by what that long-poll brought."""
    broker = broker_with_topic()
    async with proxy_in_process(broker, fetch={"busy_window_ms": BUSY_WINDOW_MS}) as proxy:
        consumer, offset = await busy_consumer(proxy, broker)
        other = await proxy.client()
        polls = len(long_polls(broker))
        await consumer.send(fetch(offset, max_wait_ms=MAX_WAIT_MS), 12)
        await trio.sleep(0.01)
        completed, _ = held(proxy)
        await other.send(fetch(offset, max_wait_ms=MAX_WAIT_MS), 12)
        await trio.sleep(0.05)
        broker.append("t", 0, batch_at(offset))
        for client in (consumer, other):
            _, response, _ = await client.receive()
            assert records(response) == batch_at(offset)
        assert len(long_polls(broker)) == polls + 1  # the first consumer's only
        assert held(proxy)[0] == completed + 1  # the other, woken by it


async def test_a_busy_consumer_is_held_when_its_long_poll_would_take_half_the_pool(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = broker_with_topic()
    memory = {"limit": "1536KiB", "socket_request_max_bytes": "1MiB"}  # a 1 MiB fetch budget
    sections = {"fetch": {"busy_window_ms": BUSY_WINDOW_MS}, "memory": memory}
    async with proxy_in_process(broker, **sections) as proxy:
        consumer, offset = await busy_consumer(proxy, broker)
        polls = len(long_polls(broker))
        await consumer.send(fetch(offset, max_wait_ms=MAX_WAIT_MS), 12)
        await trio.sleep(0.05)
        broker.append("t", 0, batch_at(offset))
        _, response, _ = await consumer.receive()
        assert records(response) == batch_at(offset)
        assert len(long_polls(broker)) == polls  # its budget would leave a third of the pool
