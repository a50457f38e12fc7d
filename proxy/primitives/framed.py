# Strategy: the trio side of framing; the framing itself is wire/framing.FrameDecoder in
# whole-frame mode (one implementation for the codec's tests, the proxy and its helpers).
#
# KIP-72 wants the size read and checked *before* any memory is committed to the body, so the
# reader never asks the stream for more than the piece it is on: first the 4-byte prefix
# (`next_size`), then, after the caller has allocated from the pool, the rest of that frame
# (`finish`). With `read_ahead` (bytes) a receive may bring up to that many bytes at once, so
# small pipelined frames cost one receive for several instead of two each. With
# `first_piece_bytes` a large frame is paid for as it arrives: `finish(lease)` grows
# the lease before each doubling of the frame's buffer, and a growth the pool cannot give at
# once asks for the whole rest and parks (proxy/primitives/memory_growth.py); parked is not the
# client's fault, so the frame deadline is stood down meanwhile.
#
# The body goes from the kernel straight into the frame's one buffer (readv), so forwarding a
# frame needs no join and no re-prefixing. On a plain socket the reader calls the descriptor
# directly and goes through trio only to wait, with a checkpoint every
# `_FRAMES_PER_CHECKPOINT` frames, so a connection that always has data neither starves the
# others nor escapes cancellation. Every piece of partial progress lives in the decoder, so a
# read may be cancelled at any point and the next call resumes where it stopped.
# Writing is proxy/primitives/stream_writer.py, the deadlines proxy/primitives/stream_deadlines.py.
"""Frames from a trio stream, read through wire's FrameDecoder: prefix first, then the body."""

from __future__ import annotations

import os

import trio

from proxy.primitives.lease import Lease
from proxy.primitives.stream_deadlines import ReadTimeouts
from proxy.primitives.stream_writer import Flushable, socket_fd
from wire.framing import NEED_DATA, SIZE_PREFIX_BYTES, FrameDecoder

__all__ = ["UNBOUNDED_FRAME_BYTES", "FrameReader", "PeerClosed"]

#: No limit but the wire's own (a signed 32-bit size): for answers from a trusted broker.
UNBOUNDED_FRAME_BYTES = 2**31 - 1
#: Frames read without waiting before the reader yields to the scheduler once.
_FRAMES_PER_CHECKPOINT = 16
#: A frame this large counts as a whole batch: the reader yields before the next one, so
#: connections pipelining large requests are read one request each in turn, as a Kafka
#: broker's selector reads them, not one connection's pipeline after another.
_YIELD_AFTER_BYTES = 64 * 1024


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
        read_ahead: the most bytes one receive may bring past the piece being read (0: exactly
            the piece).
        timeouts: deadlines to arm while waiting (see the module header), or None.
        flush: written out before the reader waits or yields (see the module header), or None.
        first_piece_bytes: a larger frame's buffer starts at this many bytes and grows as
            its bytes arrive (see the module header); None: one buffer of the frame's size at once.

    Error handling: the first WireError is final (the decoder refuses further calls).
    """

    __slots__ = (
        "_decoder",
        "_drained",
        "_flush",
        "_read_ahead",
        "_ready",
        "_socket",
        "_stream",
        "_timeouts",
        "_unyielded",
    )

    def __init__(
        self,
        stream: trio.abc.ReceiveStream,
        max_frame_bytes: int = UNBOUNDED_FRAME_BYTES,
        *,
        read_ahead: int = 0,
        timeouts: ReadTimeouts | None = None,
        flush: Flushable | None = None,
        first_piece_bytes: int | None = None,
    ) -> None:
        self._stream = stream
        self._socket = stream.socket if isinstance(stream, trio.SocketStream) else None
        self._decoder = FrameDecoder(
            max_frame_bytes, whole_frames=True, first_piece_bytes=first_piece_bytes
        )
        self._ready: bytearray | None = None  # a frame complete with its prefix
        self._read_ahead = read_ahead
        self._timeouts = timeouts
        self._flush = flush
        self._unyielded = 0
        self._drained = False  # the last read emptied the socket (see the module header)

    def frame_in_hand(self) -> bool:
        """Whether the next frame is already complete here (``next_frame`` would not read)."""
        return self.peek() is not None

    def peek(self) -> bytearray | None:
        """The next frame (prefix included) if it is already complete here, without taking it;
        else None. Reads nothing."""
        ready = self._ready
        if ready is None:
            out = self._decoder.next_frame()
            if out is NEED_DATA:
                return None
            assert isinstance(out, memoryview)
            self._ready = ready = _frame_of(out)
        return ready

    async def next_size(self) -> int | None:
        """The next frame's size, once its prefix is in (and checked); None when the stream
        ended cleanly between frames. Reads nothing past the prefix unless ``read_ahead``.

        Raises:
            PeerClosed: the stream ended inside the prefix.
            WireError: the size is negative, too large, or a TLS record header.
        """
        ready = self._ready
        if ready is not None:
            return len(ready) - SIZE_PREFIX_BYTES
        decoder = self._decoder
        size = decoder.pending_frame_size
        if size is not None:
            return size
        self._unyielded += 1
        if self._unyielded >= _FRAMES_PER_CHECKPOINT:
            self._unyielded = 0
            await self._flush_partner()
            await trio.lowlevel.checkpoint()
        while True:
            out = decoder.next_frame()
            if out is not NEED_DATA:  # the whole frame is in hand
                assert isinstance(out, memoryview)
                self._ready = ready = _frame_of(out)
                self._done_waiting()
                return len(ready) - SIZE_PREFIX_BYTES
            size = decoder.pending_frame_size
            if size is not None:
                self._done_waiting()
                return size
            have = decoder.buffered_bytes
            chunk = await self._receive(max(self._read_ahead, SIZE_PREFIX_BYTES - have), idle=True)
            if not chunk:
                if have == 0:
                    return None
                raise PeerClosed(have)
            decoder.receive_data(chunk)

    async def finish(self, lease: Lease | None = None) -> bytearray:
        """The rest of the frame whose size ``next_size`` returned: the whole frame, size
        prefix included, in one buffer.

        ``lease``: what the caller reserved for the frame, grown here with a growing buffer
        (``first_piece_bytes``) before each of its doublings (see the module header).

        Raises:
            PeerClosed: the stream ended inside the body (``received`` counts body bytes).
            trio.BrokenResourceError: the socket failed (the OS error is its cause).
            trio.Cancelled: also while parked for the lease's growth; the lease keeps the
                size it had, and the caller releases it.
        """
        ready = self._ready
        if ready is not None:
            self._ready = None
            return ready
        decoder = self._decoder
        while True:
            missing = decoder.missing_bytes
            if not missing:
                if decoder.capacity < decoder.next_capacity:  # all in hand, past the buffer
                    await self._grow(lease)
                    continue
                break
            buffer = decoder.frame_buffer()
            if not len(buffer):
                del buffer  # (a view of the buffer would keep it from growing)
                await self._grow(lease)
                continue
            if missing < self._read_ahead:  # small: bring the next frames' bytes along
                del buffer
                chunk = await self._receive(self._read_ahead, idle=False)
                if not chunk:
                    raise PeerClosed(decoder.buffered_bytes)
                decoder.receive_data(chunk)
                continue
            received = await self._receive_into(buffer)
            del buffer
            if not received:
                raise PeerClosed(decoder.buffered_bytes)
            decoder.frame_filled(received)
        self._done_waiting()
        out = decoder.next_frame()
        assert isinstance(out, memoryview)
        if len(out) >= _YIELD_AFTER_BYTES:
            self._unyielded = _FRAMES_PER_CHECKPOINT - 1  # yield before the next (see above)
        return _frame_of(out)

    async def _grow(self, lease: Lease | None) -> None:
        """Double the frame's buffer, its lease grown first (see the module header)."""
        decoder = self._decoder
        if lease is not None:
            more = decoder.next_capacity - lease.size_bytes
            if more > 0 and not lease.try_grow(more):
                timeouts = self._timeouts
                if timeouts is not None:
                    timeouts.stand_down()
                await self._flush_partner()
                pending = decoder.pending_frame_size
                assert pending is not None
                # the rest: see proxy/primitives/memory.py
                await lease.grow(pending - lease.size_bytes)
        decoder.grow_frame()

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

    async def _flush_partner(self) -> None:
        """Write what the paired writer deferred: never wait or yield with it unsent."""
        flush = self._flush
        if flush is not None and flush.pending_bytes:
            await flush.flush()

    def _done_waiting(self) -> None:
        timeouts = self._timeouts
        if timeouts is not None and timeouts.armed:
            timeouts.piece_done()

    async def _wait(self, idle: bool) -> None:
        """Wait until the socket is readable, under the piece's deadline."""
        timeouts = self._timeouts
        if timeouts is not None:
            timeouts.arm(timeouts.idle_s if idle else timeouts.frame_s)
        self._unyielded = 0
        await self._flush_partner()
        assert self._socket is not None
        await trio.lowlevel.wait_readable(self._socket)

    async def _receive(self, max_bytes: int, idle: bool) -> bytes | bytearray:
        socket = self._socket
        if socket is None:
            await self._flush_partner()
            timeouts = self._timeouts
            if timeouts is not None:
                timeouts.arm(timeouts.idle_s if idle else timeouts.frame_s)
            return await self._stream.receive_some(max_bytes)
        if self._drained:
            await self._wait(idle)
        while True:
            try:
                chunk = os.read(socket_fd(socket), max_bytes)
            except BlockingIOError:
                await self._wait(idle)
                continue
            except OSError as error:  # the stream would translate this; we read its socket
                raise trio.BrokenResourceError(f"socket failed: {error}") from error
            self._drained = len(chunk) < max_bytes
            return chunk

    async def _receive_into(self, buffer: memoryview) -> int:
        socket = self._socket
        if socket is None:
            await self._flush_partner()
            timeouts = self._timeouts
            if timeouts is not None:
                timeouts.arm(timeouts.frame_s)
            chunk = await self._stream.receive_some(len(buffer))
            buffer[: len(chunk)] = chunk
            return len(chunk)
        if self._drained:
            await self._wait(idle=False)
        while True:
            try:
                received = os.readv(socket_fd(socket), (buffer,))
            except BlockingIOError:
                await self._wait(idle=False)
                continue
            except OSError as error:
                raise trio.BrokenResourceError(f"socket failed: {error}") from error
            self._drained = received < len(buffer)
            return received


def _frame_of(view: memoryview) -> bytearray:
    frame = view.obj  # whole-frame mode: a view of exactly the frame's own bytearray
    assert isinstance(frame, bytearray) and len(frame) == len(view)
    return frame
