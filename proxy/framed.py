# Strategy: the trio side of framing; the framing itself is wire/framing.FrameDecoder in
# whole-frame mode (one implementation for the codec's tests, the proxy and its helpers).
#
# KIP-72 wants the size read and checked *before* any memory is committed to the body, so the
# reader never asks the stream for more than the piece it is on: first what is missing of the
# 4-byte prefix (`next_size`, which returns the checked size), then, after the caller has
# allocated from the pool, exactly the rest of that frame (`finish`). Two receives per request
# is what Kafka's NetworkReceive does too.
#
# The decoder allocates the frame's one buffer (size prefix included) when the prefix is in, and
# the body goes from the kernel straight into it with recv_into, so forwarding a frame needs no
# join and no re-prefixing: the same bytearray is written out as it came in. Streams that are
# not plain sockets (TLS, the SASL wrapper of proxy/secure_upstream.py, trio memory streams in
# tests) go through receive_some and one copy per chunk.
#
# Every piece of partial progress lives in the decoder, so a read may be cancelled at any point
# (a held produce's deadline) and the next call resumes where it stopped.
"""Frames from a trio stream, read through wire's FrameDecoder: prefix first, then the body."""

from __future__ import annotations

import trio

from wire.framing import NEED_DATA, SIZE_PREFIX_BYTES, FrameDecoder

__all__ = ["UNBOUNDED_FRAME_BYTES", "FrameReader", "PeerClosed"]

#: No limit but the wire's own (a signed 32-bit size): for answers from a trusted broker.
UNBOUNDED_FRAME_BYTES = 2**31 - 1


class PeerClosed(Exception):
    """The peer closed its side; ``received`` bytes of the piece being read had arrived (of
    the size prefix, or of the body once the size was read)."""

    def __init__(self, received: int) -> None:
        super().__init__(f"peer closed the connection after {received} bytes of a piece")
        self.received = received


class FrameReader:
    """Reads one frame after another from a stream; safe to cancel at any point.

    Args:
        stream: what to read.
        max_frame_bytes: larger sizes raise FrameTooLarge (``socket_request_max_bytes`` for
            clients); negative sizes and TLS records raise their own WireErrors.

    Error handling: the first WireError is final (the decoder refuses further calls).
    """

    __slots__ = ("_decoder", "_ready", "_socket", "_stream")

    def __init__(
        self, stream: trio.abc.ReceiveStream, max_frame_bytes: int = UNBOUNDED_FRAME_BYTES
    ) -> None:
        self._stream = stream
        self._socket = stream.socket if isinstance(stream, trio.SocketStream) else None
        self._decoder = FrameDecoder(max_frame_bytes, whole_frames=True)
        self._ready: bytearray | None = None  # a frame complete with its prefix (size 0)

    async def next_size(self) -> int | None:
        """The next frame's size, once its prefix is in (and checked); None when the stream
        ended cleanly between frames. Reads nothing past the prefix.

        Raises:
            PeerClosed: the stream ended inside the prefix.
            WireError: the size is negative, too large, or a TLS record header.
        """
        decoder = self._decoder
        if decoder.buffered_bytes == 0 and decoder.pending_frame_size is None and (
            self._ready is None
        ):
            # The common case, between frames: one receive brings the whole prefix.
            chunk = await self._stream.receive_some(SIZE_PREFIX_BYTES)
            if not chunk:
                return None
            decoder.receive_data(chunk)
            out = decoder.next_frame()
            if out is not NEED_DATA:  # an empty frame: complete with its prefix
                assert isinstance(out, memoryview)
                self._ready = _frame_of(out)
                return 0
            size = decoder.pending_frame_size
            if size is not None:
                return size
            # a 1-3 byte read: the general path below reads the rest of the prefix
        while True:
            size = decoder.pending_frame_size
            if size is not None or self._ready is not None:
                return size if size is not None else 0
            out = decoder.next_frame()
            if out is not NEED_DATA:
                assert isinstance(out, memoryview)
                self._ready = _frame_of(out)  # an empty frame: complete with its prefix
                continue
            if decoder.pending_frame_size is not None:
                continue
            have = decoder.buffered_bytes
            chunk = await self._stream.receive_some(SIZE_PREFIX_BYTES - have)
            if not chunk:
                if have == 0:
                    return None
                raise PeerClosed(have)
            decoder.receive_data(chunk)

    async def finish(self) -> bytearray:
        """The rest of the frame whose size ``next_size`` returned: the whole frame, size
        prefix included, in one buffer.

        Raises:
            PeerClosed: the stream ended inside the body (``received`` counts body bytes).
            trio.BrokenResourceError: the socket failed (the OS error is its cause).
        """
        ready = self._ready
        if ready is not None:
            self._ready = None
            return ready
        decoder, socket = self._decoder, self._socket
        while True:
            buffer = decoder.frame_buffer()
            if not buffer:
                out = decoder.next_frame()
                assert isinstance(out, memoryview)
                return _frame_of(out)
            if socket is not None:
                try:
                    received: int = await socket.recv_into(buffer)
                except OSError as error:  # the stream would translate this; we read its socket
                    raise trio.BrokenResourceError(f"socket failed: {error}") from error
            else:
                chunk = await self._stream.receive_some(len(buffer))
                received = len(chunk)
                buffer[:received] = chunk
            if not received:
                raise PeerClosed(decoder.buffered_bytes)
            decoder.frame_filled(received)
            if received == len(buffer):  # complete: skip asking for an empty buffer
                out = decoder.next_frame()
                assert isinstance(out, memoryview)
                return _frame_of(out)

    async def next_frame(self) -> bytearray:
        """The next whole frame, size prefix included.

        Raises:
            PeerClosed: the stream ended (``received`` counts bytes of the unfinished piece).
            WireError: a bad size prefix.
            trio.BrokenResourceError: the socket failed.
        """
        if await self.next_size() is None:
            raise PeerClosed(0)
        return await self.finish()


def _frame_of(view: memoryview) -> bytearray:
    frame = view.obj  # whole-frame mode: a view of exactly the frame's own bytearray
    assert isinstance(frame, bytearray) and len(frame) == len(view)
    return frame
