# Strategy: KIP-72's process-wide bytes limit, as a trio primitive.
#
# The pool is a signed byte counter (``available``) plus a queue of parked callers. Every
# request the proxy reads from a client, and every fetch response it asks for, is paid for
# from it; when it is empty the readers park in ``allocate`` (the KIP-72 "mute": a reader
# that does not call ``receive_some`` lets TCP back-pressure the client).
#
# * Non-strict, as in Kafka's broker: an allocation succeeds whenever ``available >= 1`` and
#   subtracts the *whole* size, so ``available`` may go negative. A strict pool would
#   starve a 1 MiB request behind a stream of 1 KiB ones forever; the price is that the
#   true bound on outstanding bytes is ``limit + max_allocation - 1``.
# * Hand-off, not wake-and-retry: ``release`` gives memory directly to parked callers (it
#   subtracts their size and reschedules them with a Lease) while ``available >= 1``. So
#   a newcomer can never barge past a parked caller, and there is an invariant the fast
#   paths lean on: *callers are parked only while available <= 0.*
# * Wake order (proxy/wake_order.py): random while memory is tight (available below
#   ``tight_fraction`` of the limit, default 10%, which includes "out of memory"), in rounds
#   by connection (a caller's Turn: no connection served twice while another waits for its
#   turn), arrival order otherwise. This plays the role of Kafka's selection-key shuffle
#   (Selector.determineHandlingOrder): any fixed order starves whoever is always last. The
#   order is a small pluggable policy (``WakeOrder``) so the fairness benchmark can compare
#   it with FIFO and a fixed order.
# * Deadlock rule (KIP-72: never mute a channel that already holds pool memory): enforced.
#   ``allocate`` refuses, with ``WouldDeadlock``, a task that holds a lease from this pool,
#   whether or not it would have to wait, so the bug shows on the first call, not only under
#   load. A reader that passes a complete frame's lease on to another task (which releases
#   it once the bytes are written upstream) calls ``lease.hand_off()``: that release no
#   longer depends on the reader.
# * Honest growth (issue 29): a large frame is not paid for in full when its size is read,
#   but as its bytes arrive. Its lease starts at a first piece and ``grow``s before each
#   further piece is read (proxy/framed.py), so a client that declares 100 MiB and sends
#   nothing holds one piece, not 100 MiB. Growth is the one wait allowed to a lease holder,
#   and it could deadlock: frames half read, each waiting for memory the others hold. So a
#   growth that has to wait asks for all its frame still needs, and one lease at a time may
#   take the *overdraft*: with the pool out of memory, a growth is granted anyway if
#   ``available`` stays >= 1 - max_allocation_bytes after it; that frame completes, its lease
#   is released and the overdraft is free again. Every other grant needs ``available >= 1``
#   and takes at most max_allocation_bytes, so KIP-72's bound holds: outstanding bytes <=
#   limit + max_allocation_bytes - 1. And when every holder is a parked growth, the one
#   granted last before the pool ran dry always fits the overdraft (its grant started from
#   ``available >= 1``, and its frame is at most max_allocation_bytes), so frames never wait
#   for each other for ever. Freed memory goes to parked growth first, in arrival order
#   (those frames finish and free their memory), then to parked allocations.
# * Requests in processing (issue 29): a request the proxy has forwarded leaves its memory for
#   the kernel's and the broker's, but a Kafka broker counts a request until its processing
#   ends, and a client pipelining large requests through the proxy fills those buffers while
#   others wait for their first turn. So the client connection moves a forwarded request's
#   bytes from its lease to ``in_processing`` (``start_processing``) until the answer is written
#   (``end_processing``): they take room in the pool, not in ``used_bytes``; while memory is
#   short the connection keeps one request in processing (proxy/connection/client.py).
# * Sensors (KIP-72 meanings): available and used bytes; depletion, which starts at the
#   first failed allocation and ends at the next successful allocation or release after
#   which no caller is still parked; its total and its share of a recent window; callers
#   muted now and mutes in total. Time is read only on those slow paths, through
#   ``trio.current_time`` (or an injected clock), so MockClock drives the sensors.
#
# Worked example: MemoryPool(21, max_allocation_bytes=10), tight below 2.1 bytes.
#
#   step  call                      available      result
#   ----  ------------------------  -------------  ----------------------------------
#   1     try_allocate(10)          21 -> 11       lease A
#   2     try_allocate(10)          11 ->  1       lease B
#   3     try_allocate(10)           1 -> -9       lease C (1 byte free was enough)
#   4     try_allocate(1)           -9             None; depletion starts (t=4)
#   5     task T: allocate(5)       -9             T parks: muted_now=1, mutes_total=1
#   6     task U: allocate(5)       -9             U parks: muted_now=2, mutes_total=2
#   7     release(A)                -9 -> 1 -> -4  1 < 2.1 is tight: a random one of T, U
#                                                  gets a lease; the other stays parked
#   8     release(B)                -4 -> 6 -> 1   the other gets its lease; nobody is
#                                                  parked, so depletion ends (t=8)
#
# Growth, a fresh pool of the same size; leases G and H (4 bytes each, available 13) are
# each reading a 10-byte frame:
#
#   step  call                      available      result
#   ----  ------------------------  -------------  ----------------------------------
#   1     G.try_grow(4), H: (4)     13 -> 5        both at 8 bytes (available was >= 1)
#   2     G.grow(2)                  5 -> 3        G at 10: its frame is whole
#   3     C = try_allocate(10)       3 -> -7       lease C (non-strict)
#   4     H.grow(2)                 -7 -> -9       out of memory, but H takes the overdraft:
#                                                  -9 >= 1 - 10, so H grows and completes
#   5     G.release()               -9 -> 1        H's overdraft ends with H's release
#
# Task safety: trio runs one task at a time and no method here awaits in the middle of
# changing state, so no lock is needed. The pool must be used from one trio run.
"""A KIP-72 memory pool: one bytes limit, muting by parking, random wake order while tight."""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import final

import outcome
import trio

from proxy.errors import InvalidAllocation, InvalidRelease, PoolExhausted, WouldDeadlock
from proxy.wake_order import ArrivalOrder, RandomWhenTight, Turn, Waiter, WakeOrder

__all__ = [
    "ArrivalOrder",
    "Lease",
    "LeaseShare",
    "MemoryPool",
    "MemoryPoolStatistics",
    "RandomWhenTight",
    "SharedLease",
    "Turn",
    "Waiter",
    "WakeOrder",
]

_current_task = trio.lowlevel.current_task


def _task_or_none() -> trio.lowlevel.Task | None:
    """The calling trio task, or None outside a trio run (sync use of try_allocate)."""
    try:
        return _current_task()
    except RuntimeError:
        return None


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

    def __init__(
        self, pool: MemoryPool, size_bytes: int, holder: trio.lowlevel.Task | None
    ) -> None:
        self._pool = pool
        self.size_bytes = size_bytes
        self._holder = holder
        self._released = False

    @property
    def released(self) -> bool:
        """Whether this lease has been given back to its pool."""
        return self._released

    def release(self) -> None:
        """Give the memory back to the pool that issued this lease (once)."""
        self._pool.release(self)

    def try_grow(self, size_bytes: int) -> bool:
        """Add ``size_bytes`` to this lease if any memory is available; never blocks."""
        return self._pool._try_grow(self, size_bytes)

    async def grow(self, size_bytes: int) -> None:
        """Add ``size_bytes`` to this lease, parking until the pool can give them: the one
        wait a lease holder may make. Ask for all the frame still needs when ``try_grow``
        failed: only a growth that completes its frame may take the overdraft (see the
        module header), which keeps half-read frames from waiting for each other for ever.

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


@final
class _Growth:
    """A lease's holder parked in ``Lease.grow``."""

    __slots__ = ("lease", "size_bytes", "task")

    def __init__(self, task: trio.lowlevel.Task, lease: Lease, size_bytes: int) -> None:
        self.task = task
        self.lease = lease
        self.size_bytes = size_bytes


@final
@dataclass(frozen=True, slots=True)
class MemoryPoolStatistics:
    """A snapshot of a MemoryPool (trio's ``statistics()`` convention).

    Attributes:
        limit_bytes: the configured limit (-1: pool disabled).
        max_allocation_bytes: largest single allocation accepted.
        available_bytes: bytes that may still be allocated; negative when over-allocated.
        used_bytes: bytes allocated and not yet released (limit - available - in processing).
        in_processing_bytes: bytes of requests forwarded and not yet answered.
        outstanding_leases: leases issued and not yet released.
        muted_now: callers parked in ``allocate`` right now.
        mutes_total: times a caller had to park, since the pool was created.
        out_of_memory: ``available_bytes <= 0`` (Kafka's ``isOutOfMemory``).
        tight: available below the tight fraction: parked callers are woken at random.
        depleted_time_total_s: total time depleted, the current spell included.
        depleted_percent: share of the last ``depleted_window_s`` spent depleted, 0-100
            (Kafka's MemoryPoolAvgDepletedPercent is the same quantity as a 0-1 ratio).
        depleted_window_s: the window of ``depleted_percent``.
    """

    limit_bytes: int
    max_allocation_bytes: int
    available_bytes: int
    used_bytes: int
    in_processing_bytes: int
    outstanding_leases: int
    muted_now: int
    mutes_total: int
    out_of_memory: bool
    tight: bool
    depleted_time_total_s: float
    depleted_percent: float
    depleted_window_s: float


@final
class MemoryPool:
    """A bytes limit shared by every reader in the process (KIP-72).

    Args:
        limit_bytes: the limit (Kafka's ``queued.max.request.bytes``); -1 disables the
            pool: every allocation succeeds and no bytes are counted.
        max_allocation_bytes: the largest single allocation (Kafka's
            ``socket.request.max.bytes``); bigger requests are refused outright.
        tight_fraction: below this fraction of the limit, parked callers are woken in
            random order instead of arrival order (Kafka: 10%).
        rng: randomness for the default wake order (seed it in tests).
        wake_order: a WakeOrder to use instead of RandomWhenTight (benchmarks).
        clock: the time source for the depletion sensors, in seconds. Defaults to
            ``trio.current_time``, so MockClock drives it in tests.
        depleted_window_s: the window over which ``depleted_percent`` is reported.

    Error handling:
        Misuse raises a ``PoolMisuse`` subclass (InvalidAllocation, InvalidRelease,
        WouldDeadlock); running out of memory is not an error except in
        ``allocate_nowait`` (PoolExhausted).

    Resource handling:
        Every lease must be released exactly once; use it as a context manager. A caller
        cancelled while parked leaves the queue and is given nothing.
    """

    __slots__ = (
        "_available",
        "_clock",
        "_depleted_closed_s",
        "_disabled",
        "_dry_since",
        "_growers",
        "_held_by",
        "_in_processing",
        "_limit_bytes",
        "_max_allocation_bytes",
        "_mutes_total",
        "_outstanding",
        "_overdraft",
        "_queue",
        "_short_below_bytes",
        "_spells",
        "_tight_below_bytes",
        "_window_s",
    )

    def __init__(
        self,
        limit_bytes: int,
        max_allocation_bytes: int,
        tight_fraction: float = 0.10,
        rng: random.Random | None = None,
        *,
        wake_order: WakeOrder | None = None,
        clock: Callable[[], float] | None = None,
        depleted_window_s: float = 30.0,
    ) -> None:
        if limit_bytes != -1 and limit_bytes < 1:
            raise ValueError(f"limit_bytes must be -1 (disabled) or >= 1, not {limit_bytes}")
        if max_allocation_bytes < 1:
            raise ValueError(f"max_allocation_bytes must be >= 1, not {max_allocation_bytes}")
        if not 0.0 <= tight_fraction < 1.0:
            raise ValueError(f"tight_fraction must be in [0, 1), not {tight_fraction}")
        if depleted_window_s <= 0:
            raise ValueError(f"depleted_window_s must be > 0, not {depleted_window_s}")
        if wake_order is not None and rng is not None:
            raise ValueError("rng only seeds the default wake order; pass one or the other")
        self._limit_bytes = limit_bytes
        self._max_allocation_bytes = max_allocation_bytes
        self._disabled = limit_bytes == -1
        self._available = 0 if self._disabled else limit_bytes
        self._tight_below_bytes = tight_fraction * limit_bytes
        self._short_below_bytes = max(self._tight_below_bytes, 1)  # out of memory, at least
        self._in_processing = 0
        self._queue: WakeOrder = wake_order if wake_order is not None else RandomWhenTight(rng)
        self._clock: Callable[[], float] = clock if clock is not None else trio.current_time
        self._window_s = depleted_window_s
        self._outstanding = 0
        self._mutes_total = 0
        self._held_by: dict[trio.lowlevel.Task, int] = {}
        # Growth (see the module header): parked growth in arrival order, and the lease that
        # holds the overdraft (until it is released).
        self._growers: deque[_Growth] = deque()
        self._overdraft: Lease | None = None
        # Depletion: start of the current spell (None: not depleted), closed spells that
        # may still overlap the window, and the total of all closed spells.
        self._dry_since: float | None = None
        self._spells: deque[tuple[float, float]] = deque()
        self._depleted_closed_s = 0.0

    # -- the hot path ---------------------------------------------------------------

    def try_allocate(self, size_bytes: int, turn: Turn | None = None) -> Lease | None:
        """Take ``size_bytes`` if any memory is available; never blocks. ``turn``: the
        connection's (see RandomWhenTight), which this allocation uses.

        Returns:
            A Lease, or None when the pool is out of memory (``available <= 0``), which
            also starts a depletion spell.

        Raises:
            InvalidAllocation: ``size_bytes`` < 1 or > ``max_allocation_bytes``.
        """
        if not 0 < size_bytes <= self._max_allocation_bytes:
            raise self._invalid(size_bytes)
        if self._disabled:
            self._outstanding += 1
            return Lease(self, size_bytes, None)
        if self._available < 1:
            if self._dry_since is None:
                self._dry_since = self._clock()
            return None
        self._available -= size_bytes
        self._outstanding += 1
        if self._dry_since is not None:
            self._end_spell()
        if turn is not None:
            turn.served_in = self._queue.round
        task = _task_or_none()
        if task is not None:
            held = self._held_by
            held[task] = held.get(task, 0) + 1
        return Lease(self, size_bytes, task)

    def charge(self, size_bytes: int) -> Lease:
        """Account for ``size_bytes`` the caller already holds (a small frame a read-ahead
        brought in whole): taken even when the pool is out of memory, never waited for, since
        waiting would free nothing. The lease is handed off from the start.

        Raises:
            InvalidAllocation: ``size_bytes`` < 1 or > ``max_allocation_bytes``.
        """
        if not 0 < size_bytes <= self._max_allocation_bytes:
            raise self._invalid(size_bytes)
        self._outstanding += 1
        if not self._disabled:
            self._available -= size_bytes
        return Lease(self, size_bytes, None)

    def allocate_nowait(self, size_bytes: int) -> Lease:
        """Like try_allocate, but raises PoolExhausted instead of returning None."""
        lease = self.try_allocate(size_bytes)
        if lease is None:
            raise PoolExhausted(
                f"no memory for {size_bytes} bytes (available {self._available} "
                f"of {self._limit_bytes})"
            )
        return lease

    def release(self, lease: Lease) -> None:
        """Return a lease's bytes, handing them straight to parked callers if any.

        Raises:
            InvalidRelease: the lease was already released or came from another pool.
        """
        if lease._pool is not self:
            raise InvalidRelease(f"{lease!r} was not issued by {self!r}")
        if lease._released:
            raise InvalidRelease(f"{lease!r} released twice")
        lease._released = True
        self._outstanding -= 1
        if self._disabled:
            return
        self._available += lease.size_bytes
        holder = lease._holder
        if holder is not None:
            self._forget_holder(holder)
        if self._overdraft is lease:
            self._overdraft = None
        if self._dry_since is not None:  # depleted; parked callers exist only then
            self._after_release_while_depleted()

    async def allocate(self, size_bytes: int, turn: Turn | None = None) -> Lease:
        """Take ``size_bytes``, parking (muting the caller) until memory is available.

        Always a checkpoint, even when memory is available at once. While parked, the
        caller is woken with memory already reserved for it (in random order while memory
        is tight, in rounds by ``turn``, arrival order otherwise).

        Raises:
            InvalidAllocation: ``size_bytes`` < 1 or > ``max_allocation_bytes``.
            WouldDeadlock: the calling task holds a lease from this pool (KIP-72's rule);
                release it, or ``hand_off()`` it, first.
            trio.Cancelled: while parked; the caller then holds nothing new.
        """
        if not 0 < size_bytes <= self._max_allocation_bytes:
            raise self._invalid(size_bytes)
        await trio.lowlevel.checkpoint_if_cancelled()
        task = _current_task()
        if task in self._held_by:
            raise WouldDeadlock(
                f"{task.name!r} holds {self._held_by[task]} lease(s) from this pool and "
                "asked to wait for more; a pool full of such waiters never drains "
                "(KIP-72). Release or hand_off() the lease first."
            )
        lease = self.try_allocate(size_bytes, turn)
        if lease is not None:
            await trio.lowlevel.cancel_shielded_checkpoint()
            return lease
        waiter = Waiter(task, size_bytes, turn)
        self._queue.push(waiter)
        self._mutes_total += 1

        def abort(_: trio.lowlevel.RaiseCancelT) -> trio.lowlevel.Abort:
            # Still queued (a hand-off would have rescheduled us, and then trio would not
            # call abort): leave the queue; nothing was reserved, so nothing to return.
            self._queue.discard(waiter)
            return trio.lowlevel.Abort.SUCCEEDED

        result: Lease = await trio.lowlevel.wait_task_rescheduled(abort)
        return result

    # -- requests in processing ----------------------------------------------------------

    def start_processing(self, size_bytes: int) -> None:
        """A request of ``size_bytes`` is forwarded and its answer awaited: its bytes count as
        in processing until ``end_processing`` (see the module header), whatever its lease."""
        if not self._disabled:
            self._available -= size_bytes
            self._in_processing += size_bytes

    def end_processing(self, size_bytes: int) -> None:
        """Requests of ``size_bytes`` in all are answered (or their connection ended)."""
        if self._disabled or not size_bytes:
            return
        self._available += size_bytes
        self._in_processing -= size_bytes
        if self._dry_since is not None:
            self._after_release_while_depleted()

    @property
    def in_processing_bytes(self) -> int:
        """Bytes of requests forwarded and not yet answered (``start_processing``)."""
        return self._in_processing

    # -- growth (Lease.try_grow, grow, shrink_to) -----------------------------------------

    def _check_growth(self, lease: Lease, size_bytes: int) -> None:
        if lease._pool is not self or lease._released:
            raise InvalidRelease(f"{lease!r} is not a held lease of {self!r}")
        if size_bytes < 1 or lease.size_bytes + size_bytes > self._max_allocation_bytes:
            raise InvalidAllocation(
                f"growing {lease!r} by {size_bytes} bytes: a lease stays within "
                f"1..{self._max_allocation_bytes}"
            )

    def _try_grow(self, lease: Lease, size_bytes: int) -> bool:
        self._check_growth(lease, size_bytes)
        if self._disabled:
            lease.size_bytes += size_bytes
            return True
        if self._available < 1:
            if self._dry_since is None:
                self._dry_since = self._clock()
            return False
        self._available -= size_bytes
        lease.size_bytes += size_bytes
        if self._dry_since is not None:  # nobody is parked: available was >= 1
            self._end_spell()
        return True

    def _may_overdraw(self, size_bytes: int) -> bool:
        """Whether a growth of ``size_bytes`` may take the overdraft now: nobody holds it and
        KIP-72's bound still holds after."""
        return self._overdraft is None and (
            self._available - size_bytes >= 1 - self._max_allocation_bytes
        )

    async def _grow(self, lease: Lease, size_bytes: int) -> None:
        await trio.lowlevel.checkpoint_if_cancelled()
        if self._try_grow(lease, size_bytes):
            await trio.lowlevel.cancel_shielded_checkpoint()
            return
        if self._may_overdraw(size_bytes):
            self._overdraft = lease
            self._take_growth(lease, size_bytes)
            await trio.lowlevel.cancel_shielded_checkpoint()
            return
        growth = _Growth(_current_task(), lease, size_bytes)
        self._growers.append(growth)
        self._mutes_total += 1

        def abort(_: trio.lowlevel.RaiseCancelT) -> trio.lowlevel.Abort:
            # Still parked (a grant would have rescheduled us): leave; the lease keeps its size.
            self._growers.remove(growth)
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)

    def _take_growth(self, lease: Lease, size_bytes: int) -> None:
        self._available -= size_bytes
        lease.size_bytes += size_bytes

    def _give_growth(self, growth: _Growth) -> None:
        self._take_growth(growth.lease, growth.size_bytes)
        trio.lowlevel.reschedule(growth.task)

    def _shrink(self, lease: Lease, size_bytes: int) -> None:
        if lease._pool is not self or lease._released:
            raise InvalidRelease(f"{lease!r} is not a held lease of {self!r}")
        if not 0 < size_bytes <= lease.size_bytes:
            raise InvalidAllocation(f"shrinking {lease!r} to {size_bytes} bytes")
        freed = lease.size_bytes - size_bytes
        lease.size_bytes = size_bytes
        if self._disabled or not freed:
            return
        self._available += freed
        if self._dry_since is not None:
            self._after_release_while_depleted()

    # -- the slow paths ---------------------------------------------------------------

    def _after_release_while_depleted(self) -> None:
        """Hand freed memory to parked callers, growth first; end the spell if nobody is left
        parked."""
        if self._growers:
            self._serve_growth()
        queue = self._queue
        while len(queue) and self._available >= 1:
            waiter = queue.pop(self._available < self._tight_below_bytes)
            if waiter.turn is not None:
                waiter.turn.served_in = queue.round
            self._available -= waiter.size_bytes
            self._outstanding += 1
            task = waiter.task
            held = self._held_by
            held[task] = held.get(task, 0) + 1
            trio.lowlevel.reschedule(task, outcome.Value(Lease(self, waiter.size_bytes, task)))
        if not len(queue) and not self._growers:
            self._end_spell()

    def _serve_growth(self) -> None:
        """Grant parked growth in arrival order while memory is available; when it is not and
        nobody holds the overdraft, to the oldest parked growth that fits within the bound."""
        growers = self._growers
        while growers and self._available >= 1:
            self._give_growth(growers.popleft())
        if growers and self._overdraft is None:
            for growth in growers:
                if self._may_overdraw(growth.size_bytes):
                    growers.remove(growth)
                    self._overdraft = growth.lease
                    self._give_growth(growth)
                    return

    def _end_spell(self) -> None:
        start = self._dry_since
        assert start is not None
        now = self._clock()
        self._dry_since = None
        self._depleted_closed_s += now - start
        spells = self._spells
        spells.append((start, now))
        horizon = now - self._window_s
        while spells and spells[0][1] <= horizon:
            spells.popleft()

    def _parked_count(self) -> int:
        return len(self._queue) + len(self._growers)

    def _forget_holder(self, task: trio.lowlevel.Task) -> None:
        held = self._held_by
        left = held[task] - 1
        if left:
            held[task] = left
        else:
            del held[task]

    def _invalid(self, size_bytes: int) -> InvalidAllocation:
        return InvalidAllocation(
            f"allocation of {size_bytes} bytes outside 1..{self._max_allocation_bytes}"
        )

    # -- introspection ----------------------------------------------------------------

    @property
    def limit_bytes(self) -> int:
        """The configured limit; -1 when the pool is disabled."""
        return self._limit_bytes

    @property
    def max_allocation_bytes(self) -> int:
        """The largest single allocation accepted."""
        return self._max_allocation_bytes

    @property
    def available_bytes(self) -> int:
        """Bytes that may still be allocated (negative when over-allocated)."""
        return self._available

    @property
    def used_bytes(self) -> int:
        """Bytes allocated and not yet released (0 when disabled); requests in processing
        are counted apart (``in_processing_bytes``)."""
        return 0 if self._disabled else self._limit_bytes - self._available - self._in_processing

    @property
    def out_of_memory(self) -> bool:
        """Kafka's ``isOutOfMemory``: no allocation can succeed until a release."""
        return not self._disabled and self._available <= 0

    @property
    def tight(self) -> bool:
        """Less than the tight fraction of the limit is free (or none): parked callers are
        woken in random order."""
        return not self._disabled and self._available < self._short_below_bytes

    def depleted_percent(self) -> float:
        """Percent (0-100) of the last ``depleted_window_s`` the pool spent depleted."""
        if self._disabled:
            return 0.0
        now = self._clock()
        horizon = now - self._window_s
        spells = self._spells
        while spells and spells[0][1] <= horizon:
            spells.popleft()
        depleted = sum(end - max(start, horizon) for start, end in spells)
        if self._dry_since is not None:
            depleted += now - max(self._dry_since, horizon)
        return 100.0 * depleted / self._window_s

    def depleted_time_total_s(self) -> float:
        """Total seconds spent depleted since creation, the current spell included."""
        if self._dry_since is None:
            return self._depleted_closed_s
        return self._depleted_closed_s + (self._clock() - self._dry_since)

    def statistics(self) -> MemoryPoolStatistics:
        """A snapshot of the pool's state and sensors."""
        return MemoryPoolStatistics(
            limit_bytes=self._limit_bytes,
            max_allocation_bytes=self._max_allocation_bytes,
            available_bytes=self._available,
            used_bytes=self.used_bytes,
            in_processing_bytes=self._in_processing,
            outstanding_leases=self._outstanding,
            muted_now=self._parked_count(),
            mutes_total=self._mutes_total,
            out_of_memory=self.out_of_memory,
            tight=self.tight,
            depleted_time_total_s=self.depleted_time_total_s(),
            depleted_percent=self.depleted_percent(),
            depleted_window_s=self._window_s,
        )

    def __repr__(self) -> str:
        if self._disabled:
            return f"<MemoryPool disabled, {self._outstanding} leases outstanding>"
        return (
            f"<MemoryPool {self._available}/{self._limit_bytes} bytes available, "
            f"{self._outstanding} leases outstanding, {self._parked_count()} muted, "
            f"{self._mutes_total} mutes total>"
        )
