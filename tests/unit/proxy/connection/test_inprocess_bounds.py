"""Issue 29's bounds on one client connection, in process and in virtual time: the time a
passthrough client has to be accepted by the cluster (and its upstream connection with it),
the frames it may send while authenticating, and the time any client has to take an answer
(its memory back to the pool when it does not)."""

from __future__ import annotations

import logging

import pytest
import trio
import trio.testing

from tests.support.inprocess import proxy_in_process
from tests.support.one_partition import broker_with_topic, produce
from tests.support.passthrough_clients import broker_with_accounts, login
from wire.messages import ApiVersionsRequest, MetadataRequest

_LOGGER = "purgatory_proxy.connection.client"
#: Passthrough, the proxy's own connections authenticated: the cluster's listener is SASL.
PASSTHROUGH_SASL = {
    "proxy": {"client_auth": "passthrough"},
    "upstream": {
        "bootstrap": ["127.0.0.1:9092"],
        "sasl": {"mechanism": "PLAIN", "username": "proxy", "password": "proxy-secret"},
    },
}


def _closing_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.name == _LOGGER and "closed client connection" in record.getMessage()
    ]


async def test_a_passthrough_client_not_accepted_in_time_is_closed_with_its_upstream(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The client sends ApiVersions (which opens its upstream connection) and nothing else:
    at connections.authentication_timeout_ms (30 s by default) after it connected, both are
    gone, not at the idle timeout (10 minutes)."""
    caplog.set_level(logging.INFO, logger=_LOGGER)
    broker = broker_with_accounts()
    async with proxy_in_process(broker, **PASSTHROUGH_SASL) as proxy:
        before = broker.open_connections
        connected = trio.current_time()
        client = await proxy.client()
        await client.send(ApiVersionsRequest(), 3)
        await client.receive()
        assert broker.open_connections == before + 1
        assert await client.closed()
        assert round(trio.current_time() - connected, 6) == 30.0
        await trio.testing.wait_all_tasks_blocked()
        assert broker.open_connections == before
    [line] = _closing_lines(caplog)
    assert "not accepted the client within 30 s" in line


async def test_an_accepted_client_is_not_timed_by_the_authentication_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = broker_with_accounts()
    async with proxy_in_process(broker, **PASSTHROUGH_SASL) as proxy:
        client = await proxy.client()
        assert await login(client, "alice", "alice-secret") == 0
        await client.send(MetadataRequest(topics=None), 12)
        await client.receive()  # the cluster answered: accepted
        await trio.sleep(60)
        await client.send(MetadataRequest(topics=None), 12)
        _, metadata, _ = await client.receive()
        assert metadata.brokers


async def test_a_large_frame_before_authentication_closes_the_connection(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Kafka's sasl.server.max.receive.size (512 KiB): a larger frame while SASL is under way
    is refused at its size prefix, before any of it is read; after a successful login the
    same frame is an ordinary request."""
    caplog.set_level(logging.INFO, logger=_LOGGER)
    broker = broker_with_accounts()
    async with proxy_in_process(broker, **PASSTHROUGH_SASL) as proxy:
        early = await proxy.client()
        await early.stream.send_all((600 * 1024).to_bytes(4, "big"))
        assert await early.closed()
        await trio.testing.wait_all_tasks_blocked()
        [line] = _closing_lines(caplog)
        assert "frame of 614400 bytes before the client authenticated; at most 524288" in line

        later = await proxy.client()
        assert await login(later, "alice", "alice-secret") == 0
        await later.send(produce(acks=1, records=b"x" * 600 * 1024), 9)
        _, answer, _ = await later.receive()
        assert [p.error_code for t in answer.responses for p in t.partition_responses] == [0]


async def test_a_client_that_does_not_take_its_answer_is_closed_and_its_memory_released(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A client whose stream has no buffer (lockstep) asks for metadata and never reads: the
    answer's memory is the pool's (read within it) until connections.send_timeout_ms (30 s
    by default) after the write began to wait; then the connection is closed and the memory
    released."""
    caplog.set_level(logging.INFO, logger=_LOGGER)
    async with proxy_in_process(broker_with_topic()) as proxy:
        pool = proxy.running.services.pool
        client = await proxy.client(lockstep=True)
        sent = trio.current_time()
        await client.send(MetadataRequest(topics=None), 12)
        await trio.sleep(29.9)
        assert pool.used_bytes > 0  # the answer, waiting for the client
        with trio.move_on_after(1):
            while pool.used_bytes:
                await trio.sleep(0.001)
        assert round(trio.current_time() - sent, 3) == 30.0
        with pytest.raises(trio.BrokenResourceError):
            await client.stream.send_all(b"\0\0\0\0")
    [line] = _closing_lines(caplog)
    assert "did not take its answer within 30 s" in line
