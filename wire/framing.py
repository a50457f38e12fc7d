# Strategy: Kafka frames are a 4-byte big-endian signed size followed by that many bytes.
# FrameDecoder is an h11-style receive buffer: receive_data() only stores what it is
# given, next_frame() does all the parsing, one frame per call, and returns NEED_DATA
# when it cannot. The size prefix is parsed and checked (negative, too large, TLS) as
# soon as its 4 bytes are in, before any of the body, so the caller can reserve memory
# for exactly that frame first (KIP-72) via `pending_frame_size`.
#
# Whole-frame mode (for a proxy that forwards frames unchanged) and growing frames (a large
# frame paid for as it arrives) are described above FrameDecoder.
"""Size-prefixed Kafka frames: an incremental decoder and the encoding helpers."""

from __future__ import annotations

import struct
from collections import deque
from typing import Final, final

from wire.errors import (
    FrameTooLarge,
    LocalProtocolError,
    LooksLikeTLS,
    NegativeFrameSize,
    TruncatedFrame,
    WireError,
)
from wire.sentinel import Sentinel

__all__ = [
    "CLOSED",
    "DEFAULT_MAX_FRAME_BYTES",
    "NEED_DATA",
    "SIZE_PREFIX_BYTES",
    "FrameDecoder",
    "frame",
    "read_frame_size",
    "size_prefix",
]

#: Kafka's default ``socket.request.max.bytes`` (100 MiB).
DEFAULT_MAX_FRAME_BYTES: Final = 104_857_600
#: Length of the size prefix.
SIZE_PREFIX_BYTES: Final = 4

_SIZE = struct.Struct(">i")
#: What a growing frame's buffer is extended with (never written; read in pieces of it).
_ZEROS = memoryview(bytes(1 << 20))


#: next_frame(): no complete frame yet; feed more bytes with receive_data().
NEED_DATA: Final = Sentinel("NEED_DATA")
#: next_frame(): the peer closed the connection cleanly between frames.
CLOSED: Final = Sentinel("CLOSED")


def read_frame_size(header: bytes | bytearray | memoryview, max_frame_bytes: int) -> int:
    """Validate a frame's 4-byte size prefix and return the size.

    Args:
        header: at least the 4 prefix bytes (only the first 4 are read).
        max_frame_bytes: the largest acceptable frame (``socket.request.max.bytes``).

    Raises:
        NegativeFrameSize: the size is negative.
        LooksLikeTLS: the size exceeds the limit and the bytes are a TLS record header
            (``16 03 0x``): a TLS client on a plaintext port.
        FrameTooLarge: the size exceeds the limit otherwise.
        LocalProtocolError: fewer than 4 bytes were given.
    """
    if len(header) < SIZE_PREFIX_BYTES:
        raise LocalProtocolError(f"a size prefix needs 4 bytes, got {len(header)}")
    (size,) = _SIZE.unpack_from(header)
    if size < 0:
        raise NegativeFrameSize(f"negative frame size {size}")
    if size > max_frame_bytes:
        b0, b1, b2 = header[0], header[1], header[2]
        if b0 == 0x16 and b1 == 0x03 and b2 <= 0x04:
            raise LooksLikeTLS(
                f"frame size {size} exceeds {max_frame_bytes}: the bytes are a TLS record "
                "header (TLS client on a plaintext listener?)",
                size_bytes=size,
                max_frame_bytes=max_frame_bytes,
            )
        hint = ""
        if bytes(header[:4]) in (b"GET ", b"POST", b"PUT ", b"HEAD"):
            hint = ": the bytes are an HTTP request line"
        raise FrameTooLarge(
            f"frame size {size} exceeds {max_frame_bytes}{hint}",
            size_bytes=size,
            max_frame_bytes=max_frame_bytes,
        )
    return int(size)


def size_prefix(size_bytes: int) -> bytes:
    """The 4-byte prefix of a frame of ``size_bytes`` bytes."""
    try:
        return _SIZE.pack(size_bytes)
    except struct.error as exc:
        raise LocalProtocolError(f"frame size {size_bytes} does not fit an int32") from exc


def frame(*parts: bytes | bytearray | memoryview) -> bytes:
    """Concatenate ``parts`` (e.g. a header and a body) behind a size prefix."""
    return b"".join((size_prefix(sum(len(p) for p in parts)), *parts))


@final
class FrameDecoder:
    """Split a byte stream into frames (payloads without their size prefix).

    Feed bytes with :meth:`receive_data` (``b""`` means the peer closed) and call
    :meth:`next_frame` until it returns :data:`NEED_DATA`.

    Error handling: the first error (a bad size prefix, or EOF inside a frame) is raised
    from :meth:`next_frame`; after that the decoder refuses every call with
    :class:`LocalProtocolError`, as the connection is unusable.

    Task safety: none; one decoder belongs to one connection's reader.
    """

    __slots__ = (
        "_buffered",
        "_chunks",
        "_eof",
        "_failed",
        "_filled",
        "_first_piece",
        "_frame",
        "_max",
        "_size",
        "_whole",
    )

    def __init__(
        self,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        *,
        whole_frames: bool = False,
        first_piece_bytes: int | None = None,
    ) -> None:
        if max_frame_bytes < 0:
            raise LocalProtocolError(f"max_frame_bytes must be >= 0, got {max_frame_bytes}")
        if first_piece_bytes is not None and (first_piece_bytes < 1 or not whole_frames):
            raise LocalProtocolError("first_piece_bytes needs whole_frames and must be >= 1")
        self._max = max_frame_bytes
        self._first_piece = first_piece_bytes
        self._chunks: deque[memoryview] = deque()
        self._buffered = 0
        self._size: int | None = None
        self._eof = False
        self._failed: WireError | None = None
        self._whole = whole_frames
        self._frame: bytearray | None = None  # whole-frame mode: the frame being filled
        self._filled = 0

    @property
    def max_frame_bytes(self) -> int:
        return self._max

    @property
    def capacity(self) -> int:
        """Whole-frame mode: the body bytes the pending frame's buffer holds now (the frame's
        size unless it grows: see Strategy); 0 before its buffer exists."""
        frame = self._frame
        return len(frame) - SIZE_PREFIX_BYTES if frame is not None else 0

    @property
    def next_capacity(self) -> int:
        """Whole-frame mode: what ``capacity`` becomes with ``grow_frame()`` (or when the buffer
        is made): twice the current one, at least the first piece, at most the frame."""
        size = self._size
        if size is None:
            return 0
        first = self._first_piece
        if first is None:
            return size
        return min(size, max(first, 2 * self.capacity))

    @property
    def missing_bytes(self) -> int:
        """Body bytes of the pending frame not yet received (0 between frames)."""
        size = self._size
        if size is None:
            return 0
        frame = self._frame
        in_frame = self._filled - SIZE_PREFIX_BYTES if frame is not None else 0
        return size - in_frame - min(self._buffered, size - in_frame)

    @property
    def pending_frame_size(self) -> int | None:
        """The size of the frame being received, once its prefix is in (else None).

        Set by the :meth:`next_frame` call that read the prefix, so the caller can
        account for the whole frame before its body arrives.
        """
        return self._size

    @property
    def buffered_bytes(self) -> int:
        """Bytes received and not yet returned in a frame (prefixes excluded once read)."""
        frame = self._frame
        return self._buffered + (self._filled - SIZE_PREFIX_BYTES if frame is not None else 0)

    def frame_buffer(self) -> memoryview:
        """Whole-frame mode: the unfilled tail of the pending frame's buffer, to receive into
        directly (empty when a growing buffer is full: ``grow_frame()`` first).

        Report the bytes written at its start with :meth:`frame_filled`.

        Raises:
            LocalProtocolError: not in whole-frame mode, or no frame size has been read yet.
        """
        frame = self._pending_frame()
        if frame is None:
            raise LocalProtocolError("frame_buffer() needs a pending frame in whole-frame mode")
        return memoryview(frame)[self._filled :]

    def grow_frame(self) -> None:
        """Whole-frame mode: enlarge the pending frame's buffer to ``next_capacity`` and move
        into it the bytes received past the old one.

        Raises:
            LocalProtocolError: no pending frame, or its buffer holds the whole frame already.
        """
        frame = self._pending_frame()
        size = self._size
        if frame is None or size is None or self.capacity == size:
            raise LocalProtocolError("grow_frame() needs a pending frame that can grow")
        more = self.next_capacity - self.capacity
        while more:  # zeros from one shared buffer: no temporary of the growth's size
            step = min(more, len(_ZEROS))
            frame += _ZEROS[:step]
            more -= step
        self._absorb(frame)

    def frame_filled(self, count: int) -> None:
        """Whole-frame mode: ``count`` bytes were written at the start of :meth:`frame_buffer`."""
        frame = self._frame
        if frame is None or not 0 <= count <= len(frame) - self._filled:
            raise LocalProtocolError(f"frame_filled({count}) does not fit the pending frame")
        self._filled += count

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Add bytes from the peer; ``b""`` marks the end of the stream.

        ``bytes`` are kept without copying; other buffers are copied, since the caller
        may reuse them.
        """
        if self._eof:
            raise LocalProtocolError("receive_data() after end of stream")
        if not data:
            self._eof = True
            return
        frame = self._pending_frame()
        if frame is not None and not self._buffered:  # whole-frame mode: into the frame
            taken = min(len(data), len(frame) - self._filled)
            view = memoryview(data)
            frame[self._filled : self._filled + taken] = view[:taken]
            self._filled += taken
            if taken == len(data):
                return
            data = view[taken:]
        if not isinstance(data, bytes):
            data = bytes(data)
        self._chunks.append(memoryview(data))
        self._buffered += len(data)

    def next_frame(self) -> memoryview | Sentinel:
        """The next complete frame, :data:`NEED_DATA`, or :data:`CLOSED` after a clean EOF.

        Returns:
            A memoryview of exactly one frame's payload (read-only when it is a view of a
            received chunk, writable when it had to be assembled); in whole-frame mode, of the
            whole frame, size prefix included, always a writable bytearray's.

        Raises:
            NegativeFrameSize, FrameTooLarge, LooksLikeTLS: the size prefix is bad.
            TruncatedFrame: the stream ended inside a frame.
            LocalProtocolError: a previous call already failed.
        """
        if self._failed is not None:
            raise LocalProtocolError(f"frame decoder already failed: {self._failed.msg}")
        try:
            return self._next_frame()
        except WireError as exc:
            self._failed = exc
            raise

    def _next_frame(self) -> memoryview | Sentinel:
        if self._whole:
            return self._next_whole_frame()
        size = self._size
        if size is None:
            if self._buffered < SIZE_PREFIX_BYTES:
                if not self._eof:
                    return NEED_DATA
                if self._buffered == 0:
                    return CLOSED
                raise TruncatedFrame(f"stream ended inside a size prefix ({self._buffered} of 4)")
            head = self._chunks[0]
            if len(head) > SIZE_PREFIX_BYTES:
                # Fast path: the prefix and more are in the first chunk.
                (size,) = _SIZE.unpack_from(head)
                if not 0 <= size <= self._max:
                    size = read_frame_size(head, self._max)  # raises the right error
                self._chunks[0] = head[SIZE_PREFIX_BYTES:]
                self._buffered -= SIZE_PREFIX_BYTES
            else:
                size = read_frame_size(self._take(SIZE_PREFIX_BYTES), self._max)
            self._size = size
        if self._buffered < size:
            if self._eof:
                raise TruncatedFrame(f"stream ended {size - self._buffered} bytes short of a frame")
            return NEED_DATA
        self._size = None
        return self._take(size)

    def _pending_frame(self) -> bytearray | None:
        """Whole-frame mode: the pending frame's buffer, allocated on first use (see Strategy:
        after the caller has reserved memory for it); None between frames or in plain mode."""
        frame = self._frame
        size = self._size
        if frame is None and size is not None and self._whole:
            frame = self._frame = bytearray(SIZE_PREFIX_BYTES + self.next_capacity)
            _SIZE.pack_into(frame, 0, size)
            self._filled = SIZE_PREFIX_BYTES
            self._absorb(frame)  # body bytes that came with the prefix (a read ahead)
        return frame

    def _absorb(self, frame: bytearray) -> None:
        """Move buffered bytes (received before the frame's buffer had room) into it."""
        if self._buffered:
            taken = min(self._buffered, len(frame) - self._filled)
            frame[self._filled : self._filled + taken] = self._take(taken)
            self._filled += taken

    def _next_whole_frame(self) -> memoryview | Sentinel:
        size = self._size
        if size is None and self._chunks:
            # Fast path: a whole frame inside the first chunk (small frames read ahead many
            # at a time) is copied out in one go, prefix included.
            head = self._chunks[0]
            if len(head) >= SIZE_PREFIX_BYTES:
                (size,) = _SIZE.unpack_from(head)
                end = SIZE_PREFIX_BYTES + size
                if 0 <= size <= self._max and end <= len(head):
                    whole = bytearray(head[:end])
                    if end == len(head):
                        self._chunks.popleft()
                    else:
                        self._chunks[0] = head[end:]
                    self._buffered -= end
                    return memoryview(whole)
            size = None
        if size is None:
            if self._buffered < SIZE_PREFIX_BYTES:
                if not self._eof:
                    return NEED_DATA
                if self._buffered == 0:
                    return CLOSED
                raise TruncatedFrame(f"stream ended inside a size prefix ({self._buffered} of 4)")
            prefix = self._take(SIZE_PREFIX_BYTES)
            (size,) = _SIZE.unpack_from(prefix)
            if not 0 <= size <= self._max:
                size = read_frame_size(prefix, self._max)  # raises the right error
            self._size = size
            if self._buffered >= size and self.next_capacity == size:
                self._pending_frame()  # the whole frame came with its prefix: assemble it
            # else its buffer waits for frame_buffer() or receive_data(): after the caller's
            # pool reservation, even when a read ahead brought part of the body along
        frame = self._frame
        missing = self.missing_bytes
        if missing or frame is None or len(frame) - SIZE_PREFIX_BYTES < size:
            # (all in hand but past a growing buffer: the caller grows it first)
            if self._eof and missing:
                raise TruncatedFrame(f"stream ended {missing} bytes short of a frame")
            return NEED_DATA
        assert frame is not None
        self._frame = None
        self._size = None
        return memoryview(frame)

    def _take(self, n: int) -> memoryview:
        """Remove and return the next n buffered bytes (a view when they are contiguous)."""
        self._buffered -= n
        chunks = self._chunks
        if n == 0:
            return memoryview(b"")
        head = chunks[0]
        if len(head) > n:
            chunks[0] = head[n:]
            return head[:n]
        if len(head) == n:
            chunks.popleft()
            return head
        out = bytearray(n)
        filled = 0
        while filled < n:
            head = chunks[0]
            take = min(len(head), n - filled)
            out[filled : filled + take] = head[:take]
            filled += take
            if take == len(head):
                chunks.popleft()
            else:
                chunks[0] = head[take:]
        return memoryview(out)
