"""Held fetches in process (serve() against a scripted broker, virtual time): the long-poll
answered at exactly max_wait_ms, min_bytes, and which event woke a held fetch: a produce
through the proxy, or the upstream watcher that learns of data written behind the proxy."""

from __future__ import annotations

import trio
import trio.testing

from tests.support.inprocess import TaskWakeups, proxy_in_process
from tests.support.one_partition import broker_with_topic, fetch, produce
from wire.messages.api_versions_request import ApiVersionsRequest


async def test_an_empty_long_poll_is_answered_at_max_wait_with_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = broker_with_topic()
    async with proxy_in_process(broker) as proxy:
        client = await proxy.client()
        sent = trio.current_time()
        await client.send(fetch(max_wait_ms=500), 12)
        _, response, at = await client.receive()
        assert response.error_code == 0
        partition = response.responses[0].partitions[0]
        assert partition.high_watermark == 0 and not partition.records
        # The purgatory's tick is 1 ms: the deadline is served in the tick it falls in.
        assert 0.5 <= round(at - sent, 6) <= 0.501
        held = proxy.running.services.held
        assert held is not None and held.fetches.statistics().expired == 1


async def test_a_fetch_with_data_is_answered_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = broker_with_topic()
    broker.append("t", 0, b"abc")
    async with proxy_in_process(broker) as proxy:
        client = await proxy.client()
        sent = trio.current_time()
        await client.send(fetch(max_wait_ms=500), 12)
        _, response, at = await client.receive()
        assert bytes(response.responses[0].partitions[0].records) == b"abc"
        assert round(at - sent, 6) == 0.0


async def test_min_bytes_holds_the_fetch_until_enough_has_been_produced(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = broker_with_topic()
    broker.append("t", 0, b"x" * 10)
    async with proxy_in_process(broker) as proxy:
        consumer, producer = await proxy.client(), await proxy.client()
        sent = trio.current_time()
        await consumer.send(fetch(max_wait_ms=5000, min_bytes=100), 12)
        await trio.sleep(1.0)
        await producer.send(produce(acks=1, records=b"y" * 50), 9)  # 60 bytes: not enough
        await producer.receive()
        await trio.sleep(1.0)
        await producer.send(produce(acks=1, records=b"z" * 50), 9)  # 110: enough
        await producer.receive()
        _, response, at = await consumer.receive()
        assert round(at - sent, 6) == 2.0
        assert bytes(response.responses[0].partitions[0].records) == (
            b"x" * 10 + b"y" * 50 + b"z" * 50
        )


async def test_a_produce_through_the_proxy_wakes_the_held_fetch_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = broker_with_topic()
    broker.long_poll = False  # the watcher's polls come back only at their max wait
    async with proxy_in_process(broker, fetch={"watcher_max_wait_ms": 500}) as proxy:
        consumer, producer = await proxy.client(), await proxy.client()
        sent = trio.current_time()
        await consumer.send(fetch(max_wait_ms=5000), 12)
        await trio.sleep(0.2)
        await producer.send(produce(acks=1), 9)
        await producer.receive()
        _, response, at = await consumer.receive()
        assert round(at - sent, 6) == 0.2  # not at the watcher's 0.5: the produce woke it
        assert bytes(response.responses[0].partitions[0].records) == b"r" * 10


async def test_data_written_behind_the_proxy_wakes_the_held_fetch_through_the_watcher(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = broker_with_topic()
    async with proxy_in_process(broker, fetch={"watcher_max_wait_ms": 500}) as proxy:
        consumer = await proxy.client()
        await consumer.send(fetch(max_wait_ms=5000), 12)
        await trio.sleep(0.2)
        written = trio.current_time()
        broker.append("t", 0, b"behind")  # another client of the cluster, not the proxy
        _, response, at = await consumer.receive()
        # The watcher's poll, out since the fetch was held, returns when the broker has the
        # records (a Kafka long-poll): that wakes the fetch, whose re-fetch returns them.
        assert round(at - written, 6) == 0
        assert bytes(response.responses[0].partitions[0].records) == b"behind"
        polls = [request for _, request in broker.fetch_requests if request.max_bytes == 1]
        assert polls[0].max_wait_ms == 5000  # as long as the fetch it covers may wait
        reads = [request for _, request in broker.fetch_requests if request.max_bytes > 1]
        assert len(reads) == 2  # the first look, and the re-fetch the watcher's news woke


async def test_an_idle_long_poll_wakes_the_response_pump_only_when_it_is_done(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A fetch the proxy knows has nothing new enters the purgatory from the request pump;
    the response pump runs once, to send the answer (not also to start the hold)."""
    broker = broker_with_topic()
    async with proxy_in_process(broker) as proxy:
        consumer = await proxy.client()
        await consumer.send(fetch(max_wait_ms=500), 12)
        await consumer.receive()  # the first look taught the proxy the partition's end
        held = proxy.running.services.held
        assert held is not None
        expired = held.fetches.statistics().expired
        # A client connection's response pump is its only task started by ``_guard`` (the
        # request pump runs in the connection's own task).
        wakeups = TaskWakeups("ClientConnection._guard")
        trio.lowlevel.add_instrument(wakeups)
        try:
            sent = trio.current_time()
            await consumer.send(fetch(max_wait_ms=500), 12)
            await trio.sleep(0.1)
            assert (wakeups.count, held.fetches.statistics().pending) == (0, 1)
            _, response, at = await consumer.receive()
        finally:
            trio.lowlevel.remove_instrument(wakeups)
        assert 0.5 <= round(at - sent, 6) <= 0.501
        assert not response.responses[0].partitions[0].records
        assert held.fetches.statistics().expired == expired + 1
        # Once for the end of the hold, and twice for the checkpoints trio's memory stream
        # takes in send_all (a socket is written without them: proxy/primitives/stream_writer.py).
        assert wakeups.count == 1 + 2


async def test_a_fetch_held_from_the_request_pump_keeps_the_response_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A request sent behind an idle long-poll is answered after it, and a produce through
    the proxy still wakes it at once."""
    broker = broker_with_topic()
    async with proxy_in_process(broker) as proxy:
        consumer, producer = await proxy.client(), await proxy.client()
        await consumer.send(fetch(max_wait_ms=500), 12)
        await consumer.receive()
        sent = trio.current_time()
        fetch_id = await consumer.send(fetch(max_wait_ms=5000), 12)
        behind_id = await consumer.send(ApiVersionsRequest(), 3)
        await trio.sleep(0.3)
        await producer.send(produce(acks=1, records=b"new"), 9)
        await producer.receive()
        first_id, response, at = await consumer.receive()
        second_id, _, _ = await consumer.receive()
        assert (first_id, second_id) == (fetch_id, behind_id)
        assert round(at - sent, 6) == 0.3
        assert bytes(response.responses[0].partitions[0].records) == b"new"
