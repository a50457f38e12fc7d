# Strategy: the two pumps of one connection meet only here. The request pump owes slots (waiting
# while the client owes too many), the response pump takes them in order (waiting for one);
# while memory is short the request pump waits for every owed answer to be written. And a
# forwarded request's bytes stay counted in the pool as in processing until its answer is
# written (Kafka's rule: they left the proxy for the kernel's and the broker's memory).
"""What a connection's request and response pumps hand each other."""

from __future__ import annotations

import trio

from proxy.connection.state import Connection, Slot, Unanswered
from proxy.primitives.memory import MemoryPool
from proxy.primitives.stream_writer import Flushable

__all__ = ["Handoff"]


class Handoff:
    """The owed queue between the pumps, its wake-ups, and the bytes in processing.

    Args:
        conn: the connection's state (what is owed).
        pool: where bytes in processing are counted.
        upstream: flushed before the request pump waits for room (the answers that make room
            need their requests sent).

    Attributes:
        owed: the response pump parks here, waiting for a slot.
        room: the request pump parks here, waiting for room to owe another.
        answered: the request pump parks here, waiting for every owed answer to be written.
    """

    __slots__ = ("_conn", "_pool", "_upstream", "answered", "owed", "processing_bytes", "room")

    def __init__(self, conn: Connection, pool: MemoryPool, upstream: Flushable) -> None:
        self._conn = conn
        self._pool = pool
        self._upstream = upstream
        self.owed = trio.lowlevel.ParkingLot()
        self.room = trio.lowlevel.ParkingLot()
        self.answered = trio.lowlevel.ParkingLot()
        self.processing_bytes = 0

    async def owe(self, slot: Slot | Unanswered, *, wake: bool = True) -> None:
        """Queue ``slot`` for the response pump, waiting while the client owes too many.
        ``wake=False``: something else wakes the pump when the slot can be answered."""
        conn = self._conn
        while not conn.has_room:
            await self._upstream.flush()
            await self.room.park()
        conn.owe(slot)
        if wake and self.owed:  # the pump waits for it (unpark alone costs ~1 µs)
            self.owed.unpark()

    def processing(self, size_bytes: int) -> None:
        """``size_bytes`` more (or, negative, fewer) of this connection's requests are
        forwarded and not yet answered (MemoryPool.start_processing, end_processing)."""
        self.processing_bytes += size_bytes
        if size_bytes > 0:
            self._pool.start_processing(size_bytes)
        else:
            self._pool.end_processing(-size_bytes)

    def end(self) -> None:
        """The connection ended: what it had in processing is the pool's again."""
        self._pool.end_processing(self.processing_bytes)
        self.processing_bytes = 0
