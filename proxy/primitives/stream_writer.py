# Strategy: a connection's writes, on a plain socket straight to its descriptor (os.write,
# os.writev), through trio only to wait for room. A pump that has the next frame in hand may
# `defer` what it would write, so N pipelined frames cost one writev instead of N writes; the
# rule that keeps it safe: a reader given the writer as `flush` writes the deferred data before
# it waits or yields, and `send_all` writes it first, so nothing deferred is left behind while
# the pump waits for anything else. The writer also gives trio's 16 KiB TCP_NOTSENT_LOWAT back
# to the system's, so one writev hands the kernel what its send buffer takes, as a broker's
# writes do (the pool does not count bytes the kernel holds; docs/history.md has the numbers).
"""Writes to a client or broker stream: deferred frames batched into one writev."""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterable
from contextlib import suppress
from itertools import islice
from typing import Protocol

import trio
import trio.socket as tsocket

from proxy.primitives.stream_deadlines import WriteTimeout

__all__ = ["DEFER_MAX_BYTES", "DEFER_MAX_FRAMES", "Flushable", "StreamWriter", "socket_fd"]

#: Buffers per writev (Linux allows 1,024).
_MAX_IOV = 512


DEFER_MAX_BYTES = 64 * 1024
DEFER_MAX_FRAMES = 256


class Flushable(Protocol):
    """What a FrameReader writes out before it waits: a StreamWriter, or an UpstreamLink
    (whose writer comes and goes with its connection)."""

    @property
    def pending_bytes(self) -> int: ...

    async def flush(self) -> None: ...


class StreamWriter:
    """Writes to a stream; on a plain socket straight to its descriptor (see the module header).

    ``defer`` queues data to go out with the next write: several small frames then cost one
    system call (writev). Whoever defers must make sure a write follows before it waits for
    anything: a FrameReader given this writer as ``flush`` writes it before it waits or
    yields, and ``send_all`` writes the deferred data first. Cancel-safe: what was not written
    stays queued, in order.

    Not safe for two tasks at once (nor is the stream's own send_all); one writer per
    direction of a connection.

    ``timeout``: armed while a write waits for the peer (see the module header), or None.
    """

    __slots__ = ("_pending", "_socket", "_stream", "_timeout", "pending_bytes")

    def __init__(self, stream: trio.abc.SendStream, timeout: WriteTimeout | None = None) -> None:
        self._stream = stream
        self._timeout = timeout
        self._socket = stream.socket if isinstance(stream, trio.SocketStream) else None
        self._pending: deque[bytes | bytearray | memoryview] = deque()
        self.pending_bytes = 0
        transport: trio.abc.SendStream = stream
        while isinstance(transport, trio.SSLStream):  # TLS writes go through its socket too
            transport = transport.transport_stream
        if isinstance(transport, trio.SocketStream):
            _unlimit_unsent(transport.socket)

    @property
    def pending_count(self) -> int:
        return len(self._pending)

    def has_room_for(self, data: bytes | bytearray | memoryview) -> bool:
        """Whether ``data`` may be deferred: the batch stays within DEFER_MAX_BYTES and
        DEFER_MAX_FRAMES, so what it keeps alive past its pool lease stays small."""
        return (
            self.pending_bytes + len(data) <= DEFER_MAX_BYTES
            and len(self._pending) < DEFER_MAX_FRAMES
        )

    def defer(self, data: bytes | bytearray | memoryview) -> None:
        """Queue ``data`` for the next write (see the class docstring)."""
        self._pending.append(data)
        self.pending_bytes += len(data)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        """Write what was deferred, then all of ``data``; wait only while the socket has no
        room.

        Raises:
            trio.BrokenResourceError: the socket failed (the OS error is its cause).
            trio.ClosedResourceError: the stream was closed.
        """
        socket = self._socket
        if socket is None or self.pending_bytes:
            self.defer(data)
            await self.flush()
            return
        view = memoryview(data)
        while True:
            try:
                sent = os.write(socket_fd(socket), view)
            except BlockingIOError:
                sent = 0
            except OSError as error:
                raise trio.BrokenResourceError(f"socket failed: {error}") from error
            if sent == len(view):
                if self._timeout is not None:
                    self._timeout.done()
                return
            view = view[sent:]
            await self._wait_writable(socket)

    async def send_parts(self, parts: Iterable[bytes | bytearray | memoryview]) -> None:
        """Write what was deferred, then ``parts`` in order without joining them (writev: a
        fetch answer's records go from the upstream frame to the socket uncopied)."""
        for part in parts:
            self.defer(part)
        await self.flush()

    async def flush(self) -> None:
        """Write everything deferred (one writev while the socket takes it all)."""
        pending = self._pending
        if not pending:
            return
        socket = self._socket
        timeout = self._timeout
        if socket is None:
            data = b"".join(pending)
            pending.clear()
            self.pending_bytes = 0
            if timeout is not None:
                timeout.arm()
            await self._stream.send_all(data)
            if timeout is not None:
                timeout.done()
            return
        while True:
            try:
                sent = os.writev(
                    socket_fd(socket),
                    pending if len(pending) <= _MAX_IOV else list(islice(pending, _MAX_IOV)),
                )
            except BlockingIOError:
                sent = 0
            except OSError as error:
                raise trio.BrokenResourceError(f"socket failed: {error}") from error
            self.pending_bytes -= sent
            if not self.pending_bytes:
                pending.clear()
                if timeout is not None:
                    timeout.done()
                return
            partial = sent < sum(len(part) for part in islice(pending, _MAX_IOV))
            while sent:
                head = pending[0]
                if len(head) <= sent:
                    sent -= len(head)
                    pending.popleft()
                else:
                    pending[0] = memoryview(head)[sent:]
                    sent = 0
            if partial:  # the socket is full (else: the next batch of buffers at once)
                await self._wait_writable(socket)

    async def _wait_writable(self, socket: trio.socket.SocketType) -> None:
        """Wait for room in the socket, under the write's deadline."""
        if self._timeout is not None:
            self._timeout.arm()
        await trio.lowlevel.wait_writable(socket)


def _unlimit_unsent(socket: trio.socket.SocketType) -> None:
    """Undo trio's 16 KiB TCP_NOTSENT_LOWAT (see the module header): 0 means the system's setting
    (net.ipv4.tcp_notsent_lowat, unlimited unless changed), so the send buffer alone bounds
    what one write hands the kernel. Not a TCP socket, or no such option: nothing to undo."""
    option = getattr(tsocket, "TCP_NOTSENT_LOWAT", None)
    if option is None:
        return
    with suppress(OSError):
        socket.setsockopt(tsocket.IPPROTO_TCP, option, 0)


def socket_fd(socket: trio.socket.SocketType) -> int:
    """The socket's descriptor, checked each time: a closed socket's number may be reused."""
    fd = socket.fileno()
    if fd < 0:
        raise trio.ClosedResourceError("the socket was closed")
    return fd
