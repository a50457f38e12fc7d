# Strategy: the trio side of framing; the framing itself is wire/framing.FrameDecoder in
# whole-frame mode (one implementation for the codec's tests, the proxy and its helpers).
#
# KIP-72 wants the size read and checked *before* any memory is committed to the body, so the
# reader never asks the stream for more than the piece it is on: first the 4-byte prefix
# (`next_size`, which returns the checked size), then, after the caller has allocated from the
# pool, the rest of that frame (`finish`). With `read_ahead` (bytes) a receive may bring up to
# that many bytes at once, so small pipelined frames cost one receive for several instead of two
# each; the bytes past a prefix are then held before the caller's reservation, at most
# `read_ahead` per connection (the decoder still gives an incomplete frame its buffer only when
# the body is asked for). Without it, two receives per request, as Kafka's NetworkReceive does.
#
# Honest memory (issue 29): with `first_piece_bytes`, a large frame is paid for as it arrives.
# The caller reserves the first piece (or the whole frame, when smaller) after `next_size`, and
# `finish(lease)` grows the lease before each doubling of the frame's buffer (the decoder's
# `grow_frame`), so what a connection holds follows what its client really sent: one that
# declares 100 MiB and sends nothing holds a first piece. Growth first tries without waiting;
# when the pool is out of memory the reader asks for the whole rest of the frame and parks (see
# proxy/memory.py: only such a growth may take the pool's overdraft). Parked is not the
# client's fault: the frame deadline is stood down, and armed afresh for the next wait.
#
# The decoder allocates the frame's one buffer (size prefix included), and the body goes from
# the kernel straight into it (readv), so forwarding a frame needs no join and no re-prefixing:
# the same bytearray is written out as it came in. Streams that are not plain sockets (TLS, the
# SASL wrapper of proxy/secure_upstream.py, trio memory streams in tests) go through
# receive_some and one copy per chunk.
#
# Cost: on a plain socket the reader and the writer call the socket's file descriptor directly
# (os.read / os.readv / os.write) and go through trio only to wait (wait_readable /
# wait_writable) when the kernel has nothing to give or no room. trio's own socket methods
# yield to the scheduler after every successful call (a checkpoint each), which with one small
# request per frame was a scheduler round per syscall; here a frame that is already in hand
# costs no round trip through the scheduler, and a checkpoint is taken every
# `_FRAMES_PER_CHECKPOINT` frames read without waiting, so a connection that always has data
# neither starves the others nor escapes cancellation. A read that returned less than it asked
# for emptied the socket: the next one waits for readability first instead of trying (an idle
# long-poller's next request is never there yet, and the failed read was a syscall and an
# exception per request).
#
# Batching: a pump that has the next frame in hand already (`FrameReader.frame_in_hand`) may
# `defer` what it would write, so N pipelined frames cost one writev instead of N writes (a
# write on loopback is the expensive syscall: the kernel runs the receiver's side of TCP in
# it). The rule that keeps it safe: a reader given the writer as `flush` writes the deferred
# data before it waits or yields, and `send_all` writes it first, so nothing deferred is ever
# left behind while the pump waits for anything else (the pumps flush before their other
# waits themselves).
#
# Send buffering: trio's SocketStream sets TCP_NOTSENT_LOWAT to 16 KiB, so the kernel takes
# little more than what is in flight and a write of a large answer returns after ~200 KB on
# loopback: a 5 MB fetch answer cost ~25 writev + wait_writable rounds (an epoll_ctl pair and a
# scheduler pass each), and the client waited for them between fetches. A StreamWriter owns its
# socket's writes and gives that limit back to the system's (unlimited by default), so one
# writev hands the kernel as much as its send buffer takes, as the broker's own writes do.
# Trade-off: the pool (KIP-72) does not count bytes the kernel holds, and a connection's
# unsent bytes may now reach its send buffer (autotuned, at most net.ipv4.tcp_wmem's maximum)
# instead of 16 KiB; a Kafka broker's sockets are the same.
#
# Timeouts: `ReadTimeouts` (a cancel scope, idle and frame seconds) is armed only when a read
# has to wait: the idle deadline while waiting for a prefix, the frame deadline while waiting
# for a body, each armed once per piece (a peer trickling bytes does not move it); the frame
# deadline is cleared when the body is in, the idle one may stand and be reused by the next
# wait (it then fires up to 12.5 % late, never early). Moving a scope's deadline costs a few
# µs, so a frame already in hand costs none, and an idle consumer's wait rarely one.
#
# Send timeout (issue 29): a StreamWriter given a `WriteTimeout` arms its scope's deadline when
# a write has to wait for room (the client is not reading) and clears it once everything queued
# is written, so a client that does not take an answer within the timeout is cut, whatever the
# answer's size, and one that reads costs nothing: a write the kernel takes at once never moves
# a deadline. Streams that are not plain sockets (TLS, tests' memory streams) cannot tell in
# advance: there every write arms and clears it (a few µs each).
#
# Every piece of partial progress lives in the decoder, so a read may be cancelled at any point
# (a held produce's deadline) and the next call resumes where it stopped.
"""Frames from a trio stream, read through wire's FrameDecoder: prefix first, then the body."""

from __future__ import annotations

import math
import os
from collections import deque
from collections.abc import Iterable
from contextlib import suppress
from itertools import islice
from typing import Protocol

import trio
import trio.socket as tsocket

from proxy.memory import Lease
from wire.framing import NEED_DATA, SIZE_PREFIX_BYTES, FrameDecoder

__all__ = [
    "DEFER_MAX_BYTES",
    "DEFER_MAX_FRAMES",
    "UNBOUNDED_FRAME_BYTES",
    "Flushable",
    "FrameReader",
    "PeerClosed",
    "ReadTimeouts",
    "StreamWriter",
    "WriteTimeout",
]

#: No limit but the wire's own (a signed 32-bit size): for answers from a trusted broker.
UNBOUNDED_FRAME_BYTES = 2**31 - 1
#: Frames read without waiting before the reader yields to the scheduler once.
_FRAMES_PER_CHECKPOINT = 16
#: A frame this large counts as a whole batch: the reader yields before the next one, so
#: connections pipelining large requests are read one request each in turn, as a Kafka
#: broker's selector reads them (issue 29), not one connection's pipeline after another.
_YIELD_AFTER_BYTES = 64 * 1024
#: Buffers per writev (Linux allows 1,024).
_MAX_IOV = 512


class PeerClosed(Exception):
    """The peer closed its side; ``received`` bytes of the piece being read had arrived (of
    the size prefix, or of the body once the size was read)."""

    def __init__(self, received: int) -> None:
        super().__init__(f"peer closed the connection after {received} bytes of a piece")
        self.received = received


class ReadTimeouts:
    """The deadlines a reader arms on ``scope`` when it has to wait (see Strategy).

    Args:
        scope: a cancel scope around the reads.
        idle_s: the longest wait for the next frame's prefix.
        frame_s: the longest wait for the rest of a frame once its size is known.

    The frame deadline is cleared as soon as the body is in. The idle deadline (ten minutes
    by default) is left standing after the prefix is in and reused by the next wait when it
    still lies between ``idle_s`` and ``idle_s`` x 1.125 ahead: a scope's deadline move costs
    ~4 µs, and an idle long-polling consumer waits for every request. So the idle timeout
    fires between ``idle_s`` and 12.5 % later, never earlier; whoever waits for something
    other than the client while it stands (the pool) calls ``stand_down`` first.
    """

    __slots__ = ("_phase_s", "frame_s", "idle_s", "scope")

    def __init__(self, scope: trio.CancelScope, idle_s: float, frame_s: float) -> None:
        self.scope = scope
        self.idle_s = idle_s
        self.frame_s = frame_s
        self._phase_s = 0.0  # the deadline armed for the piece being read (0: none)

    @property
    def armed(self) -> bool:
        return self._phase_s != 0.0

    def arm(self, seconds: float) -> None:
        """The read has to wait: at most ``seconds`` from now for this piece (armed once per
        piece, so a peer trickling bytes does not move it)."""
        if self._phase_s:
            return
        self._phase_s = seconds
        earliest = trio.current_time() + seconds
        if seconds != self.idle_s:
            self.scope.deadline = earliest  # a frame deadline: exact, cleared when it is in
        elif not earliest <= self.scope.deadline <= earliest + seconds * _LATE:
            self.scope.deadline = earliest + seconds * _LATE / 2

    def piece_done(self) -> None:
        """The piece is in: clear a frame deadline; an idle one may stand (see class doc)."""
        phase_s, self._phase_s = self._phase_s, 0.0
        if phase_s and phase_s != self.idle_s:
            self.scope.deadline = math.inf

    def stand_down(self) -> None:
        """Clear any deadline: the caller waits for something other than the peer."""
        self._phase_s = 0.0
        if self.scope.deadline != math.inf:
            self.scope.deadline = math.inf


#: How late a reused deadline may fire, as a fraction of its timeout.
_LATE = 0.125


class WriteTimeout:
    """The deadline a StreamWriter arms on ``scope`` while a write waits (see Strategy).

    Args:
        scope: a cancel scope around the writer's user (the response pump).
        seconds: the longest a write may wait for the peer to take what it is given.
    """

    __slots__ = ("_armed", "scope", "seconds")

    def __init__(self, scope: trio.CancelScope, seconds: float) -> None:
        self.scope = scope
        self.seconds = seconds
        self._armed = False

    def arm(self) -> None:
        """A write has to wait: it must be done ``seconds`` from now (once per write)."""
        if not self._armed:
            self._armed = True
            self.scope.deadline = trio.current_time() + self.seconds

    def done(self) -> None:
        """Everything queued is written."""
        if self._armed:
            self._armed = False
            self.scope.deadline = math.inf


class FrameReader:
    """Reads one frame after another from a stream; safe to cancel at any point.

    Args:
        stream: what to read.
        max_frame_bytes: larger sizes raise FrameTooLarge (``socket_request_max_bytes`` for
            clients); negative sizes and TLS records raise their own WireErrors.
        read_ahead: the most bytes one receive may bring past the piece being read (0: exactly
            the piece).
        timeouts: deadlines to arm while waiting (see Strategy), or None.
        flush: written out before the reader waits or yields (see Strategy), or None.
        first_piece_bytes: a larger frame's buffer starts at this many bytes and grows as
            its bytes arrive (see Strategy); None: one buffer of the frame's size at once.

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
        self._drained = False  # the last read emptied the socket (see Strategy)

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
        (``first_piece_bytes``) before each of its doublings (see Strategy).

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
        """Double the frame's buffer, its lease grown first (see Strategy)."""
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
                await lease.grow(pending - lease.size_bytes)  # the rest: see proxy/memory.py
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
                chunk = os.read(_fd(socket), max_bytes)
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
                received = os.readv(_fd(socket), (buffer,))
            except BlockingIOError:
                await self._wait(idle=False)
                continue
            except OSError as error:
                raise trio.BrokenResourceError(f"socket failed: {error}") from error
            self._drained = received < len(buffer)
            return received


#: Deferred writes (StreamWriter.defer) per writer: at most this many bytes and frames.
DEFER_MAX_BYTES = 64 * 1024
DEFER_MAX_FRAMES = 256


class Flushable(Protocol):
    """What a FrameReader writes out before it waits: a StreamWriter, or an UpstreamLink
    (whose writer comes and goes with its connection)."""

    @property
    def pending_bytes(self) -> int: ...

    async def flush(self) -> None: ...


class StreamWriter:
    """Writes to a stream; on a plain socket straight to its file descriptor (see Strategy).

    ``defer`` queues data to go out with the next write: several small frames then cost one
    system call (writev). Whoever defers must make sure a write follows before it waits for
    anything: a FrameReader given this writer as ``flush`` writes it before it waits or
    yields, and ``send_all`` writes the deferred data first. Cancel-safe: what was not written
    stays queued, in order.

    Not safe for two tasks at once (nor is the stream's own send_all); one writer per
    direction of a connection.

    ``timeout``: armed while a write waits for the peer (see Strategy), or None.
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
                sent = os.write(_fd(socket), view)
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
                    _fd(socket),
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
    """Undo trio's 16 KiB TCP_NOTSENT_LOWAT (see Strategy): 0 means the system's setting
    (net.ipv4.tcp_notsent_lowat, unlimited unless changed), so the send buffer alone bounds
    what one write hands the kernel. Not a TCP socket, or no such option: nothing to undo."""
    option = getattr(tsocket, "TCP_NOTSENT_LOWAT", None)
    if option is None:
        return
    with suppress(OSError):
        socket.setsockopt(tsocket.IPPROTO_TCP, option, 0)


def _fd(socket: trio.socket.SocketType) -> int:
    """The socket's descriptor, checked each time: a closed socket's number may be reused."""
    fd = socket.fileno()
    if fd < 0:
        raise trio.ClosedResourceError("the socket was closed")
    return fd


def _frame_of(view: memoryview) -> bytearray:
    frame = view.obj  # whole-frame mode: a view of exactly the frame's own bytearray
    assert isinstance(frame, bytearray) and len(frame) == len(view)
    return frame
