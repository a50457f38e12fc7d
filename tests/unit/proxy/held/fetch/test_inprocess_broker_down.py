"""A broker that dies under held fetches (serve() against a scripted broker, virtual time).

A client connected to a Kafka broker that is killed sees its connection break at once, and
that is what makes it ask for metadata again and find the partition's new leader. A fetch the
proxy terminates reads the broker on the proxy's own channels, so the client's connection
would stay up: answered "nothing new" at every max wait, the consumer never learns that its
leader is gone (seen on a three-node Apache Kafka: a consumer through the proxy was still on
the dead leader 40 s after the kill, while the same consumer direct moved on after 10 s). The
proxy must end the client's connection as the broker's own would have ended.
"""

from __future__ import annotations

import logging

import pytest
import trio
import trio.testing

from tests.support.inprocess import proxy_in_process
from tests.support.one_partition import broker_with_topic, fetch
from wire.messages.api_versions_request import ApiVersionsRequest

MAX_WAIT_MS = 5000


async def test_a_fetch_to_a_dead_broker_closes_the_client_connection_at_once(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    broker = broker_with_topic()
    async with proxy_in_process(broker) as proxy:
        consumer = await proxy.client()
        broker.go_down()
        sent = trio.current_time()
        await consumer.send(fetch(max_wait_ms=MAX_WAIT_MS), 12)
        assert await consumer.closed(), "answered as if the broker had nothing new"
        assert trio.current_time() - sent < 0.1  # at once, not at the max wait
    closes = [r for r in caplog.records if "closed client connection" in r.getMessage()]
    assert len(closes) == 1 and closes[0].levelno == logging.WARNING
    assert "upstream unreachable" in closes[0].getMessage()


async def test_a_fetch_held_when_its_broker_dies_closes_the_client_connection(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = broker_with_topic()
    async with proxy_in_process(broker) as proxy:
        consumer = await proxy.client()
        await consumer.send(fetch(max_wait_ms=MAX_WAIT_MS), 12)
        await consumer.receive()  # nothing there yet; the first look taught the proxy the end
        await consumer.send(fetch(max_wait_ms=MAX_WAIT_MS), 12)  # held: nothing new
        await trio.sleep(0.2)
        died = trio.current_time()
        broker.go_down()
        assert await consumer.closed(), "answered as if the broker had nothing new"
        # The watcher's poll breaks with the broker, which wakes the fetch: its connection
        # ends then, not at the end of the max wait.
        assert trio.current_time() - died < 0.1


async def test_a_client_that_comes_back_is_served_once_the_broker_is_back(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = broker_with_topic()
    broker.append("t", 0, b"kept")
    async with proxy_in_process(broker) as proxy:
        broker.go_down()
        gone = await proxy.client()
        await gone.send(fetch(max_wait_ms=MAX_WAIT_MS), 12)
        assert await gone.closed()
        broker.down = False  # restarted on the same address and data
        consumer = await proxy.client()
        await consumer.send(fetch(max_wait_ms=MAX_WAIT_MS), 12)
        _, response, _ = await consumer.receive()
        assert bytes(response.responses[0].partitions[0].records) == b"kept"


async def test_a_dead_broker_is_not_shown_alive_to_reconnecting_clients(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The proxy answers a broker port's ApiVersions from the last one it forwarded
    (proxy/connection/api_versions.py). Once it found the broker dead that answer would tell a
    reconnecting client the broker is up, and the client would not look for the new leader."""
    broker = broker_with_topic()
    async with proxy_in_process(broker) as proxy:
        first = await proxy.client()
        await first.send(ApiVersionsRequest(), 3)
        await first.receive()  # forwarded, and kept for the port's next clients
        broker.go_down()
        await first.send(fetch(max_wait_ms=MAX_WAIT_MS), 12)
        assert await first.closed()
        again = await proxy.client()
        await again.send(ApiVersionsRequest(), 3)
        assert await again.closed(), "a dead broker's port answered ApiVersions from memory"
