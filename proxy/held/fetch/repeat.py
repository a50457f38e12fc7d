# Strategy: an idle consumer sends the same fetch every max_wait_ms, but for its correlation
# id and session epoch; decoding and planning it again was a measurable share of an idle
# cycle. So a connection keeps its bytes as a template, and recognises the next one by
# comparing bytes (where the epoch sits is found with the generated codec). What a match means
# is the holder's business (FetchHolding.hold_repeat). Pure.
"""An idle consumer's repeated fetch, recognised by its bytes."""

from __future__ import annotations

from dataclasses import replace

from proxy.held.fetch.session import FetchContext, FetchSession
from wire.codec import encode
from wire.messages.fetch_request import FetchRequest

__all__ = ["FetchRepeat"]

_CORRELATION_AT = 4  # after the api key and version: the same in every request header
_INT32 = 4
#: Two epochs that differ in each of their four bytes, to find where the epoch is encoded.
_PROBES = (0x01020304, 0x7A6B5C4D)


class FetchRepeat:
    """The bytes of one fetch an idle consumer repeats (incremental, changing nothing in its
    session; or sessionless), without its correlation id and session epoch; ``match``
    recognises its repeats.

    Attributes:
        request: the learnt request, decoded (its epoch is the learnt one; nothing that reads
            a ticket's request looks at the epoch).
        version: its Fetch version.
        context: its context, the same for every repeat: incremental (it refers to the
            session's partitions, which the session keeps up to date) or sessionless (the
            partitions and offsets its bytes name).
    """

    __slots__ = ("_epoch_at", "_head", "_middle", "_tail", "context", "request", "version")

    def __init__(
        self,
        frame_body: bytes,
        epoch_at: int,
        request: FetchRequest,
        version: int,
        context: FetchContext,
    ) -> None:
        self._head = frame_body[:_CORRELATION_AT]
        self._middle = frame_body[_CORRELATION_AT + _INT32 : epoch_at]
        self._tail = frame_body[epoch_at + _INT32 :]
        self._epoch_at = epoch_at
        self.request = request
        self.version = version
        self.context = context

    @classmethod
    def learn(
        cls,
        frame_body: bytes | bytearray | memoryview,
        body_offset: int,
        request: FetchRequest,
        version: int,
        context: FetchContext,
    ) -> FetchRepeat | None:
        """The template of ``frame_body`` (header and request, no size prefix), or None when
        the codec does not reproduce the client's bytes exactly."""
        body = bytes(frame_body[body_offset:])
        probes = [encode(replace(request, session_epoch=epoch), version) for epoch in _PROBES]
        if encode(request, version) != body or len(probes[0]) != len(probes[1]):
            return None
        differ = [i for i, (a, b) in enumerate(zip(*probes, strict=True)) if a != b]
        if len(differ) != _INT32 or differ[-1] - differ[0] != _INT32 - 1:
            return None
        epoch_at = body_offset + differ[0]
        return cls(bytes(frame_body), epoch_at, request, version, context)

    @property
    def session(self) -> FetchSession | None:
        """The session it goes on (None: sessionless)."""
        return self.context.session

    def match(self, frame_body: bytes | bytearray | memoryview) -> tuple[int, int] | None:
        """(correlation id, session epoch) if ``frame_body`` is this request again with only
        those two changed; None otherwise."""
        epoch_at = self._epoch_at
        if (
            len(frame_body) != epoch_at + _INT32 + len(self._tail)
            or frame_body[:_CORRELATION_AT] != self._head
            or frame_body[_CORRELATION_AT + _INT32 : epoch_at] != self._middle
            or frame_body[epoch_at + _INT32 :] != self._tail
        ):
            return None
        correlation_id = int.from_bytes(
            frame_body[_CORRELATION_AT : _CORRELATION_AT + _INT32], "big", signed=True
        )
        epoch = int.from_bytes(frame_body[epoch_at : epoch_at + _INT32], "big", signed=True)
        return correlation_id, epoch
