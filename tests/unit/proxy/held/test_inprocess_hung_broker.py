"""A broker that hangs (serve() against a scripted broker, virtual time).

A client connected to a hung Kafka broker times its requests out and leaves: it asks for
metadata again and finds the partition's new leader once the controller fenced the hung one.
Through the proxy it did not: a held produce is answered REQUEST_TIMED_OUT by the proxy at its
timeout_ms (issue 6), so the client retried on the same connection for as long as the hang
lasted, and a reconnecting client was answered ApiVersions from the proxy's memory, so the hung
broker looked up (seen on a three-node Apache Kafka: producers through the proxy resumed only at
SIGCONT, 15 s, while direct ones moved to the new leader after 8 s). Kafka answers a produce by
its timeout_ms and a fetch with min_bytes 0 at once, so a broker silent for
`connections.upstream_answer_grace_ms` past that is taken as hung: the client's connection ends.
"""

from __future__ import annotations

import trio
import trio.testing

from tests.support.inprocess import WireClient, proxy_in_process
from tests.support.one_partition import broker_with_topic, fetch, produce
from wire.messages.api_versions_request import ApiVersionsRequest

REQUEST_TIMED_OUT = 7
GRACE_MS = 5000
CONFIG = {"upstream_answer_grace_ms": GRACE_MS}


async def test_a_producer_is_not_kept_retrying_into_a_hung_broker(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = broker_with_topic()
    async with proxy_in_process(broker, connections=CONFIG) as proxy:
        client = await proxy.client()
        await client.send(produce(timeout_ms=1000), 9)
        await client.receive()  # the client's upstream connection is open and answered
        broker.freeze()
        sent = trio.current_time()
        answered: list[int] = []
        while len(answered) < 20 and (code := await _produce(client)) is not None:
            answered.append(code)
        # Each produce got REQUEST_TIMED_OUT at its timeout and the client retried on the same
        # connection (as librdkafka does), until the broker had been silent for the grace.
        assert set(answered) == {REQUEST_TIMED_OUT} and len(answered) < 20, answered
        assert round(trio.current_time() - sent, 6) == 1.0 + GRACE_MS / 1000


async def test_a_late_answer_within_the_grace_keeps_the_connection(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = broker_with_topic()
    broker.produce_delay_s = 4.0  # answers 3 s past the produce's timeout: slow, not hung
    async with proxy_in_process(broker, connections=CONFIG) as proxy:
        client = await proxy.client()
        await client.send(produce(timeout_ms=1000), 9)
        _, response, _ = await client.receive()
        assert response.responses[0].partition_responses[0].error_code == REQUEST_TIMED_OUT
        broker.produce_delay_s = 0.0
        await client.send(produce(timeout_ms=10_000), 9)
        _, response, _ = await client.receive()
        assert response.responses[0].partition_responses[0].error_code == 0
        assert broker.logs[("t", 0)] == [b"r" * 10, b"r" * 10]


async def test_a_consumer_is_not_kept_waiting_on_a_hung_broker(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = broker_with_topic()
    async with proxy_in_process(broker, connections=CONFIG) as proxy:
        consumer = await proxy.client()
        broker.freeze()
        sent = trio.current_time()
        await consumer.send(fetch(max_wait_ms=500), 12)  # its first look goes upstream
        assert await consumer.closed(), "answered although the broker answers nothing"
        # Kafka answers the proxy's min_bytes=0 fetch at once: silent for the grace is hung.
        assert round(trio.current_time() - sent, 3) == GRACE_MS / 1000 + 0.1  # + its max wait


async def test_a_hung_broker_is_not_shown_alive_to_reconnecting_clients(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = broker_with_topic()
    async with proxy_in_process(broker, connections=CONFIG) as proxy:
        first = await proxy.client()
        await first.send(ApiVersionsRequest(), 3)
        await first.receive()  # forwarded, and kept for the port's next clients
        broker.freeze()
        await first.send(produce(timeout_ms=1000), 9)
        await first.receive()
        while await _produce(first) is not None:
            pass
        again = await proxy.client()
        await again.send(ApiVersionsRequest(), 3)
        with trio.move_on_after(60):
            await again.receive()
            raise AssertionError("a hung broker's port answered ApiVersions from memory")


async def _produce(client: WireClient) -> int | None:
    """Send one produce (timeout 1 s) and read its answer's error code; None once the proxy
    closed the connection."""
    try:
        await client.send(produce(timeout_ms=1000), 9)
        _, response, _ = await client.receive()
    except (EOFError, trio.BrokenResourceError, trio.ClosedResourceError):
        return None
    code: int = response.responses[0].partition_responses[0].error_code
    return code
