# Strategy: the whole proxy (what proxy/assembly.py builds, run by proxy/server.run: its
# listeners, connections, purgatories and watchers) in the test's own trio run, with no
# sockets: listeners are in-memory (MemoryListeners, the proxy's ListenerFactory), upstream
# connections go to a ScriptedBroker through its dialer, and clients speak the wire/ codec over
# trio memory streams (WireClient). Under trio's MockClock with autojump every timeout,
# long-poll and purgatory deadline is exact virtual time, so the tests assert *when* an answer
# came, not only what it said.
"""In-process proxy harness: the whole proxy over memory streams against a scripted broker."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import trio
import trio.testing

from proxy.assembly import Assembly, assemble
from proxy.config import Config
from proxy.connection.listeners import AnyListener
from proxy.server import Running, run
from tests.support.scripted_broker import BROKER, NODE_ID, ScriptedBroker, ScriptedDialer
from wire.apis import response_header_version
from wire.codec import decode_response, encode
from wire.framing import NEED_DATA, FrameDecoder, frame
from wire.headers import RequestHeader, encode_request_header, parse_response_header

if TYPE_CHECKING:
    from wire._struct import Message

__all__ = ["InProcessProxy", "MemoryListeners", "WireClient", "proxy_in_process"]


class _MemoryListener(trio.abc.Listener[trio.abc.Stream]):
    def __init__(self) -> None:
        self.send, self._receive = trio.open_memory_channel[trio.abc.Stream](64)

    async def accept(self) -> trio.abc.Stream:
        return await self._receive.receive()

    async def aclose(self) -> None:
        await self._receive.aclose()


class MemoryListeners:
    """The proxy's ListenerFactory over memory streams; ports are made-up numbers."""

    def __init__(self) -> None:
        self._listeners: dict[int, _MemoryListener] = {}
        self._ports = itertools.count(40_000)

    def bind(self, host: str, port: int) -> tuple[AnyListener, int]:
        port = port or next(self._ports)
        listener = self._listeners[port] = _MemoryListener()
        return listener, port

    async def connect(self, port: int, *, lockstep: bool = False) -> trio.abc.Stream:
        """A client connection to the proxy's listener on ``port``; ``lockstep``: without
        buffering, so the proxy's writes wait until the client reads (a client that does not
        read holds the proxy's answer)."""
        pair = trio.testing.lockstep_stream_pair if lockstep else trio.testing.memory_stream_pair
        client_end, proxy_end = pair()
        await self._listeners[port].send.send(proxy_end)
        return client_end


class WireClient:
    """A Kafka client made of wire/: sends requests, reads answers with their arrival times."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self._decoder = FrameDecoder()
        self._sent: dict[int, tuple[int, int]] = {}
        self._ids = itertools.count(1)

    def frame(self, request: Message, version: int) -> tuple[int, bytes]:
        """``request`` as a frame to send (in pieces if need be), and its correlation id."""
        correlation_id = next(self._ids)
        header = RequestHeader(request.API_KEY, version, correlation_id, "wire-client")
        self._sent[correlation_id] = (request.API_KEY, version)
        return correlation_id, frame(encode_request_header(header), encode(request, version))

    async def send(self, request: Message, version: int) -> int:
        """Send ``request``; returns its correlation id."""
        correlation_id, data = self.frame(request, version)
        await self.stream.send_all(data)
        return correlation_id

    async def receive(self) -> tuple[int, Any, float]:
        """The next answer: (correlation id, decoded response, virtual time it arrived)."""
        while True:
            body = self._decoder.next_frame()
            if isinstance(body, memoryview):
                break
            if body is not NEED_DATA:
                raise EOFError("the proxy closed the connection")
            self._decoder.receive_data(await self.stream.receive_some(65536))
        correlation_id = int.from_bytes(body[:4], "big", signed=True)
        api_key, version = self._sent.pop(correlation_id)
        header, start = parse_response_header(body, response_header_version(api_key, version))
        return (
            header.correlation_id,
            decode_response(api_key, version, body[start:]),
            (trio.current_time()),
        )

    async def closed(self) -> bool:
        """Whether the proxy closed the connection (reads until it does or data comes)."""
        return not await self.stream.receive_some(65536)


@dataclass
class InProcessProxy:
    assembly: Assembly  # what the process owns (proxy/assembly.py)
    running: Running
    listeners: MemoryListeners
    dialer: ScriptedDialer
    broker: ScriptedBroker
    shutdown: trio.CancelScope  # cancel it to begin serve()'s shutdown drain

    @property
    def broker_port(self) -> int:
        port = self.running.services.routing.proxy_port_of(NODE_ID)
        assert port is not None
        return port

    async def client(self, port: int | None = None, *, lockstep: bool = False) -> WireClient:
        """A client on the broker's port (default) or ``port`` (e.g. the bootstrap port);
        ``lockstep``: see MemoryListeners.connect."""
        stream = await self.listeners.connect(port or self.broker_port, lockstep=lockstep)
        return WireClient(stream)


def config(**sections: dict[str, Any]) -> Config:
    """The proxy's defaults with ``sections`` overridden (e.g. fetch={"hold": False})."""
    return Config(**{"upstream": {"bootstrap": [str(BROKER)]}, **sections})


@asynccontextmanager
async def proxy_in_process(
    broker: ScriptedBroker, **sections: dict[str, Any]
) -> AsyncIterator[InProcessProxy]:
    """The proxy against ``broker`` until the block ends (built as serve() builds it, run by
    the server's nursery tree); it has learnt the broker on entry."""
    async with trio.open_nursery() as nursery:
        dialer = ScriptedDialer(broker, nursery)
        listeners = MemoryListeners()
        shutdown = trio.CancelScope()
        assembly = assemble(config(**sections), [BROKER], dialer=dialer, listeners=listeners)
        running: Running = await nursery.start(partial(run, assembly, shutdown))
        while running.services.routing.proxy_port_of(NODE_ID) is None:
            await trio.sleep(0.001)
        broker.requests.clear()
        yield InProcessProxy(assembly, running, listeners, dialer, broker, shutdown)
        nursery.cancel_scope.cancel()


class TaskWakeups(trio.abc.Instrument):
    """Counts how often tasks whose name ends with ``name_suffix`` are scheduled to run
    (add it with trio.lowlevel.add_instrument): how many wake-ups something costs."""

    def __init__(self, name_suffix: str) -> None:
        self.name_suffix = name_suffix
        self.count = 0

    def task_scheduled(self, task: trio.lowlevel.Task) -> None:
        if task.name.endswith(self.name_suffix):
            self.count += 1
