# Strategy: three kinds of client the proxy must survive without letting them cost anyone
# else (DESIGN "Bad input and faults"), each a trio task that runs until cancelled and counts
# what happened to it:
#
# * Slowloris: open a connection, announce a frame, send part of it, then dribble one byte
#   every ``dribble_s`` so the connection is never idle. Only the proxy's frame timeout
#   (connections.frame_timeout_ms) can end it; the task counts connections the proxy closed.
# * Never-reader: pipeline Fetch requests whose responses are large and never read one. The
#   proxy must not buffer the answers for it: today it stops reading a client that owes 1024
#   responses and lets TCP push back; the task counts how many requests it got onto the wire.
# * Garbage: connections that send bytes no Kafka client would, in turn: random bytes, a TLS
#   ClientHello on the plaintext port, a well-sized frame with a nonsense header. One starts
#   every ``interval_s``, and each waits (at most ``close_wait_s``) for the proxy to close it.
"""Hostile clients for scenario 5: slowloris, a client that never reads, garbage streams."""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

import trio

from tests.support.load_wire import FETCH_VERSION, KafkaWire, fetch_request

__all__ = ["Garbage", "NeverReader", "Slowloris"]

# A TLS 1.2 ClientHello record header and the start of its handshake: read as a Kafka size,
# 0x16030301 is a 369 MB frame.
_CLIENT_HELLO = bytes.fromhex("16030301") + bytes.fromhex("00c4010000c00303") + os.urandom(32)


async def _closed_by_peer(stream: trio.SocketStream) -> bool:
    """Read until the proxy closes (True); False if it sent data instead."""
    try:
        return not await stream.receive_some(65536)
    except trio.BrokenResourceError:
        return True  # reset by the proxy


@dataclass
class Slowloris:
    """``connections`` connections each stuck inside a ``frame_bytes`` frame."""

    address: tuple[str, int]
    connections: int
    frame_bytes: int = 1024
    dribble_s: float = 1.0
    opened: int = 0
    closed_by_proxy: int = 0

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Open every connection, report started, then dribble until cancelled."""
        streams = []
        try:
            for _ in range(self.connections):
                stream = await trio.open_tcp_stream(*self.address)
                streams.append(stream)
                # The size, then a header's first bytes (Produce v8): a request in progress.
                await stream.send_all(struct.pack(">ihh", self.frame_bytes, 0, 8))
                self.opened += 1
            task_status.started()
            async with trio.open_nursery() as nursery:
                for stream in streams:
                    nursery.start_soon(self._dribble, stream)
        finally:
            for stream in streams:
                await trio.aclose_forcefully(stream)

    async def _dribble(self, stream: trio.SocketStream) -> None:
        async with trio.open_nursery() as nursery:

            async def watch() -> None:
                if await _closed_by_peer(stream):
                    self.closed_by_proxy += 1
                nursery.cancel_scope.cancel()

            nursery.start_soon(watch)
            try:
                for _ in range(self.frame_bytes - 4):  # never the last byte
                    await trio.sleep(self.dribble_s)
                    await stream.send_all(b"\x00")
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass  # the proxy closed it; watch() counts that
            await trio.sleep_forever()


@dataclass
class NeverReader:
    """One connection that sends up to ``requests`` Fetch requests and reads nothing."""

    address: tuple[str, int]
    topic: str
    requests: int
    fetch_max_bytes: int
    sent: int = 0

    async def run(self) -> None:
        wire = await KafkaWire.connect(*self.address, "never-reader")
        request = fetch_request(self.topic, 0, max_bytes=self.fetch_max_bytes, max_wait_ms=10)
        try:
            for _ in range(self.requests):
                await wire.send(request, FETCH_VERSION)
                self.sent += 1
            await trio.sleep_forever()
        finally:
            await wire.aclose()


@dataclass
class Garbage:
    """One garbage connection every ``interval_s``; each waits for the proxy to close it."""

    address: tuple[str, int]
    interval_s: float
    close_wait_s: float = 10.0
    sent: int = 0
    closed_by_proxy: int = 0
    answered: int = 0

    def _payload(self) -> bytes:
        kind = self.sent % 3
        if kind == 0:
            # Random bytes whose first four read as a negative size.
            noise = bytearray(os.urandom(4096))
            noise[0] |= 0x80
            return bytes(noise)
        if kind == 1:
            return _CLIENT_HELLO
        # A plausible size, then api key 0x7fff: no such API.
        return struct.pack(">ihhi", 100, 0x7FFF, 0, 1) + os.urandom(90)

    async def run(self, until_s: float) -> None:
        """Start connections until trio time ``until_s``, then wait for the last ones."""
        async with trio.open_nursery() as nursery:
            while trio.current_time() < until_s:
                nursery.start_soon(self._one, self._payload())
                await trio.sleep(self.interval_s)

    async def _one(self, payload: bytes) -> None:
        stream = await trio.open_tcp_stream(*self.address)
        try:
            with trio.move_on_after(self.close_wait_s):
                try:
                    await stream.send_all(payload)
                    self.sent += 1
                    if await _closed_by_peer(stream):
                        self.closed_by_proxy += 1
                    else:
                        self.answered += 1
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    self.sent += 1
                    self.closed_by_proxy += 1  # reset while we were still sending
        finally:
            await trio.aclose_forcefully(stream)
