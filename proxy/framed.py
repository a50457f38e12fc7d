# Strategy: Kafka frames are a 4-byte big-endian size and a body. KIP-72 wants the size read and
# checked *before* any memory is committed to the body, so this reader never reads past the
# piece it was asked for: first exactly 4 bytes, then (after the caller has allocated from the
# pool) exactly the body. Two receives per request is what Kafka's NetworkReceive does too.
"""Exact-size reads of Kafka frames from a trio stream."""

from __future__ import annotations

import trio

__all__ = ["PeerClosed", "receive_exactly"]


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
