"""serve() in process against a scripted broker, in virtual time: answers in request order,
acks=0, produce timeouts, and back-pressure (tests/support/inprocess.py)."""

from __future__ import annotations

import trio
import trio.testing

from tests.support.inprocess import WireClient, proxy_in_process
from tests.support.one_partition import broker_with_topic, fetch, produce
from wire.messages import MetadataRequest

REQUEST_TIMED_OUT = 7


def pool_sized_produce(client: WireClient, limit: int) -> tuple[int, bytes]:
    """A produce frame whose size (prefix excluded) is exactly ``limit``, and its id."""
    records = limit - 60
    while True:
        correlation_id, data = client.frame(produce(acks=1, records=b"x" * records), 9)
        if len(data) - 4 == limit:
            return correlation_id, data
        records += limit - (len(data) - 4)


async def test_acks0_answers_are_skipped_and_the_next_answer_is_in_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = broker_with_topic()  # answers acks=0 produces, as Tansu does
    async with proxy_in_process(broker) as proxy:
        client = await proxy.client()
        await client.send(produce(acks=0), 9)
        await client.send(produce(acks=0), 9)
        metadata_id = await client.send(MetadataRequest(topics=None), 12)
        correlation_id, response, _ = await client.receive()
        assert correlation_id == metadata_id
        assert [b.port for b in response.brokers] == [proxy.broker_port]  # rewritten
        assert broker.logs[("t", 0)] == [b"r" * 10, b"r" * 10]


async def test_acks0_without_answers_from_the_broker(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = broker_with_topic()
    broker.answer_acks0 = False  # Kafka's behaviour
    async with proxy_in_process(broker) as proxy:
        client = await proxy.client()
        await client.send(produce(acks=0), 9)
        produce_id = await client.send(produce(acks=1), 9)
        correlation_id, response, _ = await client.receive()
        assert correlation_id == produce_id
        assert response.responses[0].partition_responses[0].base_offset == 1


async def test_produce_times_out_at_its_timeout_and_the_late_answer_is_skipped(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = broker_with_topic()
    broker.produce_delay_s = 5.0
    async with proxy_in_process(broker) as proxy:
        client = await proxy.client()
        sent = trio.current_time()
        timed_out_id = await client.send(produce(timeout_ms=1000), 9)
        correlation_id, response, at = await client.receive()
        assert correlation_id == timed_out_id
        assert response.responses[0].partition_responses[0].error_code == REQUEST_TIMED_OUT
        assert round(at - sent, 6) == 1.0  # virtual time, to the microsecond
        # The broker still wrote it (a timeout says "unknown", not "failed") and answers late;
        # that answer is skipped and the next request gets its own.
        broker.produce_delay_s = 0.0
        metadata_id = await client.send(MetadataRequest(topics=None), 12)
        correlation_id, _, at = await client.receive()
        assert correlation_id == metadata_id
        assert round(at - sent, 6) == 5.0  # behind the slow produce on the same upstream connection
        assert broker.logs[("t", 0)] == [b"r" * 10]
        stats = proxy.running.services.held
        assert stats is not None and stats.produces.statistics().expired == 1


async def test_held_and_forwarded_answers_keep_request_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = broker_with_topic()
    async with proxy_in_process(broker) as proxy:
        client = await proxy.client()
        sent = trio.current_time()
        fetch_id = await client.send(fetch(max_wait_ms=300), 12)  # held: nothing to read
        metadata_id = await client.send(MetadataRequest(topics=None), 12)  # answered at once
        produce_id = await client.send(produce(acks=1), 9)  # upstream answers at once
        answers = [await client.receive() for _ in range(3)]
        assert [a[0] for a in answers] == [fetch_id, metadata_id, produce_id]
        # The produce landed while the fetch was held: it woke the fetch, which answers with
        # the produced records at once; the others follow it in order.
        assert [round(a[2] - sent, 6) for a in answers] == [0.0, 0.0, 0.0]
        fetched = answers[0][1].responses[0].partitions[0]
        assert bytes(fetched.records) == b"r" * 10


async def test_an_empty_pool_mutes_readers_until_memory_comes_back(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = broker_with_topic()
    limit = 64 * 1024
    memory = {"limit": limit, "socket_request_max_bytes": limit}
    async with proxy_in_process(broker, memory=memory) as proxy:
        pool = proxy.running.services.pool
        slow, other = await proxy.client(), await proxy.client()
        sent = trio.current_time()
        # The slow client announces a frame as big as the pool and sends its body 2 s later:
        # the proxy pays for the whole frame when the size is read (KIP-72).
        produce_id, data = pool_sized_produce(slow, limit)
        await slow.stream.send_all(data[:4])
        await trio.sleep(0.5)
        assert pool.statistics().available_bytes <= 0
        metadata_id = await other.send(MetadataRequest(topics=None), 12)  # muted meanwhile
        await trio.sleep(1.5)
        await slow.stream.send_all(data[4:])
        assert (await slow.receive())[0] == produce_id
        correlation_id, _, at = await other.receive()
        assert correlation_id == metadata_id
        assert round(at - sent, 6) == 2.0  # answered once the slow frame's memory came back
        assert pool.statistics().available_bytes == limit


async def test_a_frame_not_completed_in_time_closes_only_its_connection(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = broker_with_topic()
    limit = 64 * 1024
    async with proxy_in_process(
        broker,
        memory={"limit": limit, "socket_request_max_bytes": limit},
        connections={"frame_timeout_ms": 3000},
    ) as proxy:
        slow, other = await proxy.client(), await proxy.client()
        sent = trio.current_time()
        _, data = pool_sized_produce(slow, limit)
        await slow.stream.send_all(data[:100])
        await trio.sleep(0.5)
        metadata_id = await other.send(MetadataRequest(topics=None), 12)
        correlation_id, _, at = await other.receive()
        assert correlation_id == metadata_id
        assert round(at - sent, 6) == 3.0  # the stalled frame's memory freed at its timeout
        assert await slow.closed()
        await trio.testing.wait_all_tasks_blocked()  # the connection's last accounting
        closed = proxy.running.services.metrics.connections_closed.labels("frame_timeout")
        assert closed._value.get() == 1


async def test_shutdown_stops_reading_but_answers_what_is_owed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = broker_with_topic()
    broker.produce_delay_s = 1.0
    async with proxy_in_process(broker, connections={"shutdown_drain_ms": 5000}) as proxy:
        client = await proxy.client()
        sent = trio.current_time()
        produce_id = await client.send(produce(acks=1), 9)
        await trio.sleep(0.1)
        proxy.shutdown.cancel()
        await trio.sleep(0.1)
        assert "shutting down" in proxy.running.readiness.reasons()
        await client.send(MetadataRequest(topics=None), 12)  # after shutdown began: not read
        correlation_id, _, at = await client.receive()
        assert correlation_id == produce_id
        assert round(at - sent, 6) == 1.0  # the owed answer still came, when the broker gave it
        assert await client.closed()
        await trio.testing.wait_all_tasks_blocked()  # the connection's last accounting
        closed = proxy.running.services.metrics.connections_closed.labels("shutdown")
        assert closed._value.get() == 1
