# Strategy: a lease is the proof that bytes were taken from the KIP-72 pool
# (proxy/primitives/memory.py), given back exactly once, on every path (it is a context manager).
# Most leases have one holder, the task that allocated them (the deadlock rule counts them); an
# upstream read whose answer many clients are given is charged once and shared (SharedLease), back
# when the last lets go.
"""Leases of the memory pool: held by one task, or shared by the readers of one answer."""

from __future__ import annotations

from types import TracebackType
from typing import Protocol, final

import trio

from proxy.errors import InvalidRelease

__all__ = ["Lease", "LeasePool", "LeaseShare", "SharedLease"]


class LeasePool(Protocol):
    """What a lease asks of the pool that issued it (proxy.primitives.memory.MemoryPool)."""

    def release(self, lease: Lease) -> None: ...

    def _try_grow(self, lease: Lease, size_bytes: int) -> bool: ...

    async def _grow(self, lease: Lease, size_bytes: int) -> None: ...

    def _shrink(self, lease: Lease, size_bytes: int) -> None: ...

    def _forget_holder(self, task: trio.lowlevel.Task) -> None: ...


@final
class Lease:
    """Proof of an allocation: ``size_bytes`` taken from one pool, to be released once.

    A lease is also a context manager that releases it on exit, so memory comes back on
    every ``finally`` path, cancellation included::

        with await pool.allocate(frame_bytes):
            ...   # read the body, forward it

    (There is no checkpoint between ``allocate`` returning and the ``with`` taking hold,
    so a cancellation cannot slip in between.)

    Error handling:
        Releasing twice, or through a pool that did not issue it, raises InvalidRelease.
    """

    __slots__ = ("_holder", "_pool", "_released", "size_bytes")

    def __init__(self, pool: LeasePool, size_bytes: int, holder: trio.lowlevel.Task | None) -> None:
        self._pool = pool
        self.size_bytes = size_bytes
        self._holder = holder
        self._released = False

    @property
    def released(self) -> bool:
        """Whether this lease has been given back to its pool."""
        return self._released

    def held_from(self, pool: object) -> bool:
        """Whether this lease was issued by ``pool`` and is not released yet."""
        return self._pool is pool and not self._released

    def release(self) -> None:
        """Give the memory back to the pool that issued this lease (once)."""
        self._pool.release(self)

    def try_grow(self, size_bytes: int) -> bool:
        """Add ``size_bytes`` to this lease if any memory is available; never blocks."""
        return self._pool._try_grow(self, size_bytes)

    async def grow(self, size_bytes: int) -> None:
        """Add ``size_bytes`` to this lease, parking until the pool can give them: the one
        wait a lease holder may make. Ask for all the frame still needs when ``try_grow``
        failed: only a growth that completes its frame may take the overdraft (see
        proxy/primitives/memory.py), which keeps half-read frames from waiting for each other for
        ever.

        Raises:
            InvalidAllocation: the lease would exceed ``max_allocation_bytes``.
            trio.Cancelled: while parked; the lease then keeps its size.
        """
        await self._pool._grow(self, size_bytes)

    def shrink_to(self, size_bytes: int) -> None:
        """Give back all but ``size_bytes`` (>= 1) of this lease: what it covers is smaller
        now (a fetch answer read, which takes less than its budget)."""
        self._pool._shrink(self, size_bytes)

    def hand_off(self) -> None:
        """Declare that releasing this lease no longer depends on the allocating task.

        Why: the deadlock rule refuses ``allocate`` to a task that holds a lease. A reader
        that has read a whole frame and passed it (and its lease) to a writer task may
        safely read the next frame, because the writer releases the first lease whatever
        the reader does. Calling this records that fact; it is idempotent.
        """
        holder = self._holder
        if holder is not None and not self._released:
            self._pool._forget_holder(holder)
        self._holder = None

    def __enter__(self) -> Lease:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._pool.release(self)

    def __repr__(self) -> str:
        state = "released" if self._released else "held"
        return f"<Lease {self.size_bytes} bytes, {state}>"


@final
class SharedLease:
    """One lease that several holders keep together: an upstream read whose answer many
    clients are given is charged once, and given back when the last of them lets go.

    Args:
        lease: the reader's lease, handed off (its release no longer depends on one task).
        holders: how many parts (``part``) will be taken; each is released once.
    """

    __slots__ = ("_holders", "_lease")

    def __init__(self, lease: Lease, holders: int) -> None:
        lease.hand_off()
        self._lease = lease
        self._holders = holders

    @property
    def size_bytes(self) -> int:
        return self._lease.size_bytes

    def part(self) -> LeaseShare:
        """One holder's part (counted in ``holders``)."""
        return LeaseShare(self)

    def let_go(self) -> None:
        """A holder counted in ``holders`` is done with it (without having taken a part, or
        through its part's ``release``)."""
        self._holders -= 1
        if not self._holders:
            self._lease.release()

    def __repr__(self) -> str:
        return f"<SharedLease {self.size_bytes} bytes, {self._holders} holders>"


@final
class LeaseShare:
    """One holder's part of a SharedLease; what a Lease is to one holder (``release``)."""

    __slots__ = ("_shared", "released")

    def __init__(self, shared: SharedLease) -> None:
        self._shared = shared
        self.released = False

    @property
    def size_bytes(self) -> int:
        return self._shared.size_bytes

    def release(self) -> None:
        """Let go of this part (once); the last part gives the memory back."""
        if self.released:
            raise InvalidRelease(f"{self!r} released twice")
        self.released = True
        self._shared.let_go()

    def __repr__(self) -> str:
        return f"<LeaseShare of {self._shared!r}>"
