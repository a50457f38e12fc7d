"""The operators' endpoint when descriptors run short (issue 29): its accept loop waits out
EMFILE instead of ending the proxy, and idle connections cannot pile up past its cap.
Real loopback sockets; the first test's listener fails accept() as an exhausted process does."""

from __future__ import annotations

import errno
import logging

import pytest
import trio
from prometheus_client import CollectorRegistry, Counter

from proxy.observability.http import serve_http
from proxy.observability.readiness import Readiness
from proxy.primitives.accepting import RETRY_S, accept_or_wait
from tests.support.http_client import exchange, get

_MAX_CONNECTIONS = 16


class _Exhausted(trio.abc.Listener[trio.SocketStream]):
    """A real listener whose first ``failures`` accepts fail with EMFILE."""

    def __init__(self, listener: trio.SocketListener, failures: int) -> None:
        self.listener = listener
        self.failures = failures

    async def accept(self) -> trio.SocketStream:
        if self.failures:
            self.failures -= 1
            await trio.lowlevel.checkpoint()
            raise OSError(errno.EMFILE, "Too many open files")
        return await self.listener.accept()

    async def aclose(self) -> None:
        await self.listener.aclose()


async def _listener() -> tuple[trio.SocketListener, int]:
    (listener,) = await trio.open_tcp_listeners(0, host="127.0.0.1")
    return listener, listener.socket.getsockname()[1]


async def test_the_endpoint_waits_out_a_lack_of_descriptors_and_then_answers(
    nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    listener, port = await _listener()
    registry = CollectorRegistry()
    failures = Counter("accept_failures", "test", registry=registry)
    exhausted = _Exhausted(listener, failures=3)
    nursery.start_soon(serve_http, exhausted, registry, Readiness(), nursery, failures)
    with caplog.at_level(logging.INFO, logger="purgatory_proxy.server"):
        [(status, _, body)] = await exchange(port, [get("/healthz")])
    assert (status, body) == (200, b"ok\n")
    assert failures._value.get() == 3
    lines = [r.getMessage() for r in caplog.records if "the HTTP endpoint" in r.getMessage()]
    assert lines == [
        f"cannot accept a connection (Too many open files) on the HTTP endpoint; "
        f"retrying every {RETRY_S * 1000:.0f} ms",
        "accepting connections on the HTTP endpoint again",
    ]


async def test_accept_or_wait_raises_what_is_not_a_lack_of_resources() -> None:
    class _Broken(trio.abc.Listener[trio.abc.Stream]):
        async def accept(self) -> trio.abc.Stream:
            raise OSError(errno.EBADF, "Bad file descriptor")

        async def aclose(self) -> None:
            pass

    with pytest.raises(OSError, match="Bad file descriptor"):
        await accept_or_wait(_Broken(), None, "a broken listener")


async def test_a_connection_past_the_cap_closes_the_oldest_and_is_answered(
    nursery: trio.Nursery,
) -> None:
    listener, port = await _listener()
    nursery.start_soon(serve_http, listener, CollectorRegistry(), Readiness(), nursery)
    idle = [await trio.open_tcp_stream("127.0.0.1", port) for _ in range(_MAX_CONNECTIONS)]
    try:
        await trio.sleep(0.2)  # all accepted (a new one is what closes the oldest)
        [(status, _, _)] = await exchange(port, [get("/healthz")])
        assert status == 200
        with trio.fail_after(5):  # long before the idle connections' 10 s receive timeout
            assert await idle[0].receive_some(1) == b""  # closed by the proxy
        with trio.move_on_after(0.2) as waited:
            await idle[1].receive_some(1)  # the second oldest is still open
        assert waited.cancelled_caught
    finally:
        for stream in idle:
            await stream.aclose()
