# Strategy: Kafka frames are a 4-byte big-endian size and a body. KIP-72 wants the size read and
# checked *before* any memory is committed to the body, so these readers never read past the
# piece they were asked for: first exactly 4 bytes, then (after the caller has allocated from
# the pool) exactly the body. Two receives per request is what Kafka's NetworkReceive does too.
#
# The body goes straight from the kernel into the one buffer that holds the whole frame (size
# prefix included) with recv_into, so forwarding a frame needs no join and no re-prefixing: the
# same bytearray is written out as it came in. Streams that are not plain sockets (TLS, the
# SASL wrapper of proxy/secure_upstream.py) go through receive_some and one copy per chunk.
"""Exact-size reads of Kafka frames from a trio stream."""

from __future__ import annotations

import trio

__all__ = ["FrameReader", "PeerClosed", "receive_exactly", "receive_frame"]

_SIZE_BYTES = 4


class PeerClosed(Exception):
    """The peer closed its side; ``received`` bytes of the requested piece had arrived."""

    def __init__(self, received: int) -> None:
        super().__init__(f"peer closed the connection after {received} bytes of a piece")
        self.received = received


async def receive_exactly(stream: trio.abc.ReceiveStream, size: int) -> bytes | bytearray:
    """Read exactly ``size`` bytes.

    Raises:
        PeerClosed: the stream ended first (``received`` says how far it got, so the caller
            can tell a clean close between frames from a truncated frame).
    """
    first = await stream.receive_some(size)
    if len(first) == size:
        return first
    if not first:
        raise PeerClosed(0)
    chunks = [first]
    have = len(first)
    while have < size:
        chunk = await stream.receive_some(size - have)
        if not chunk:
            raise PeerClosed(have)
        chunks.append(chunk)
        have += len(chunk)
    return b"".join(chunks)


async def _receive_into(stream: trio.abc.ReceiveStream, view: memoryview) -> int:
    """Receive at most ``len(view)`` bytes into ``view``; 0 at end of stream.

    Cancel-safe like the stream's own receive: nothing is taken unless it is returned.
    """
    if isinstance(stream, trio.SocketStream):
        try:
            received: int = await stream.socket.recv_into(view)
        except OSError as error:  # the stream would translate this; we read its socket directly
            raise trio.BrokenResourceError(f"socket failed: {error}") from error
        return received
    chunk = await stream.receive_some(len(view))
    view[: len(chunk)] = chunk
    return len(chunk)


async def receive_frame(stream: trio.abc.ReceiveStream, size_prefix: bytes, size: int) -> bytearray:
    """Read a ``size``-byte body into a new buffer that starts with its ``size_prefix``.

    Returns the whole frame (prefix + body), ready to be written on unchanged.

    Raises:
        PeerClosed: the stream ended inside the body (``received`` counts body bytes).
        trio.BrokenResourceError: the socket failed (the OS error is its cause).
    """
    frame = bytearray(_SIZE_BYTES + size)
    frame[:_SIZE_BYTES] = size_prefix
    view = memoryview(frame)
    have = _SIZE_BYTES
    end = _SIZE_BYTES + size
    while have < end:
        received = await _receive_into(stream, view[have:])
        if not received:
            raise PeerClosed(have - _SIZE_BYTES)
        have += received
    return frame


class FrameReader:
    """Reads one frame after another from a socket stream; safe to cancel at any point.

    Why: the proxy waits for an upstream answer under a deadline (a held produce's timeout),
    and giving up must not lose the bytes of a frame already half read, or the connection falls
    out of step. Partial progress lives here, not in a local variable, so the next call resumes
    where the cancelled one stopped; trio's socket calls either complete or take nothing.
    """

    __slots__ = ("_frame", "_have", "_prefix", "_stream")

    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self._stream = stream
        self._prefix = bytearray()
        self._frame: bytearray | None = None
        self._have = 0

    async def next_frame(self) -> bytearray:
        """The next whole frame, size prefix included.

        Raises:
            PeerClosed: the stream ended (``received`` counts bytes of the unfinished piece).
            trio.BrokenResourceError: the socket failed.
        """
        frame = self._frame
        if frame is None:
            prefix = self._prefix
            while len(prefix) < _SIZE_BYTES:
                chunk = await self._stream.receive_some(_SIZE_BYTES - len(prefix))
                if not chunk:
                    raise PeerClosed(len(prefix))
                prefix += chunk
            frame = self._frame = bytearray(_SIZE_BYTES + int.from_bytes(prefix, "big"))
            frame[:_SIZE_BYTES] = prefix
            self._have = _SIZE_BYTES
            prefix.clear()
        view = memoryview(frame)
        end = len(frame)
        while self._have < end:
            received = await _receive_into(self._stream, view[self._have :])
            if not received:
                raise PeerClosed(self._have - _SIZE_BYTES)
            self._have += received
        self._frame = None
        return frame
