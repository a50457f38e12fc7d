# Strategy: KIP-72's process-wide bytes limit, as a trio primitive. Every request the proxy
# reads from a client, and every fetch response it asks for, is paid for from one signed byte
# counter (``available``); when it is empty the readers park in ``allocate`` (the KIP-72 "mute":
# a reader that does not call ``receive_some`` lets TCP back-pressure the client).
#
# * Non-strict, as in Kafka's broker: an allocation succeeds whenever ``available >= 1`` and
#   takes the *whole* size, so a 1 MiB request is never starved behind 1 KiB ones; the bound
#   on outstanding bytes is ``limit + max_allocation - 1``.
# * Hand-off, not wake-and-retry: ``release`` gives memory straight to parked callers, so a
#   newcomer never barges past them, and *callers are parked only while available <= 0*.
# * Wake order (proxy/primitives/wake_order.py): random while memory is tight, in rounds by
# connection,
#   arrival order otherwise: Kafka's selection-key shuffle, since any fixed order starves
#   whoever is always last.
# * Deadlock rule (KIP-72: never mute a channel that already holds pool memory): ``allocate``
#   refuses a task that holds a lease (``WouldDeadlock``), waiting or not, so the bug shows on
#   the first call; a reader that passes a whole frame on calls ``lease.hand_off()``.
# * Requests in processing: a forwarded request's bytes stay counted until its
#   answer is written (``start_processing``/``end_processing``), as a broker counts a request
#   until its processing ends; apart from ``used_bytes``.
# * Growth of a lease as a large frame arrives, and its overdraft:
# proxy/primitives/memory_growth.py.
#   Sensors (depletion, mutes): proxy/primitives/memory_sensors.py. Leases:
#   proxy/primitives/lease.py.
#
# Task safety: trio runs one task at a time and no method here awaits in the middle of
# changing state, so no lock is needed. The pool must be used from one trio run.
"""A KIP-72 memory pool: one bytes limit, muting by parking, random wake order while tight."""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable
from typing import final

import outcome
import trio

from proxy.errors import InvalidAllocation, InvalidRelease, PoolExhausted, WouldDeadlock
from proxy.primitives.lease import Lease
from proxy.primitives.memory_growth import PoolGrowth
from proxy.primitives.memory_sensors import Depletion, MemoryPoolStatistics
from proxy.primitives.wake_order import RandomWhenTight, Turn, Waiter, WakeOrder

__all__ = ["MemoryPool"]

_current_task = trio.lowlevel.current_task


def _task_or_none() -> trio.lowlevel.Task | None:
    """The calling trio task, or None outside a trio run (sync use of try_allocate)."""
    try:
        return _current_task()
    except RuntimeError:
        return None


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


@final
class MemoryPool(PoolGrowth):
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
        "_held_by",
        "_in_processing",
        "_limit_bytes",
        "_outstanding",
        "_queue",
        "_short_below_bytes",
        "_tight_below_bytes",
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
        self._outstanding = 0
        self._mutes_total = 0
        self._held_by: dict[trio.lowlevel.Task, int] = {}
        # Growth (see the module header): parked growth in arrival order, and the lease that
        # holds the overdraft (until it is released).
        self._growers = deque()
        self._overdraft: Lease | None = None
        self._depletion = Depletion(
            clock if clock is not None else trio.current_time, depleted_window_s
        )

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
            self._depletion.start()
            return None
        self._available -= size_bytes
        self._outstanding += 1
        if self._depletion.since is not None:
            self._depletion.end()
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
        if self._depletion.since is not None:  # depleted; parked callers exist only then
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
        if self._depletion.since is not None:
            self._after_release_while_depleted()

    @property
    def in_processing_bytes(self) -> int:
        """Bytes of requests forwarded and not yet answered (``start_processing``)."""
        return self._in_processing

    # -- growth (Lease.try_grow, grow, shrink_to) -----------------------------------------

    def _shrink(self, lease: Lease, size_bytes: int) -> None:
        if not lease.held_from(self):
            raise InvalidRelease(f"{lease!r} is not a held lease of {self!r}")
        if not 0 < size_bytes <= lease.size_bytes:
            raise InvalidAllocation(f"shrinking {lease!r} to {size_bytes} bytes")
        freed = lease.size_bytes - size_bytes
        lease.size_bytes = size_bytes
        if self._disabled or not freed:
            return
        self._available += freed
        if self._depletion.since is not None:
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
            self._depletion.end()

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
        return 0.0 if self._disabled else self._depletion.percent()

    def depleted_time_total_s(self) -> float:
        """Total seconds spent depleted since creation, the current spell included."""
        return self._depletion.total_s()

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
            depleted_window_s=self._depletion.window_s,
        )

    def __repr__(self) -> str:
        if self._disabled:
            return f"<MemoryPool disabled, {self._outstanding} leases outstanding>"
        return (
            f"<MemoryPool {self._available}/{self._limit_bytes} bytes available, "
            f"{self._outstanding} leases outstanding, {self._parked_count()} muted, "
            f"{self._mutes_total} mutes total>"
        )
