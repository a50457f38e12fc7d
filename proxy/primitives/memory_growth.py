# Strategy: honest growth. A large frame is not paid for in full when its size is
# read, but as its bytes arrive: its lease starts at a first piece and grows before each further
# piece is read (proxy/primitives/framed.py), so a client that declares 100 MiB and sends nothing
# holds one piece, not 100 MiB. Growth is the one wait allowed to a lease holder, and it could
# deadlock: frames half read, each waiting for memory the others hold. So a growth that has to wait
# asks for all its frame still needs, and one lease at a time may take the *overdraft*: with the
# pool out of memory, a growth is granted anyway if ``available`` stays >= 1 - max_allocation_bytes
# after it; that frame completes, its lease is released and the overdraft is free again. Every
# other grant needs ``available >= 1`` and takes at most max_allocation_bytes, so KIP-72's bound
# holds: outstanding bytes <= limit + max_allocation_bytes - 1. And when every holder is a parked
# growth, the one granted last before the pool ran dry always fits the overdraft, so frames
# never wait for each other for ever. Freed memory goes to parked growth first, in arrival
# order (those frames finish and free their memory), then to parked allocations.
"""The memory pool's growth of held leases (Lease.try_grow, Lease.grow) and its overdraft."""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, final

import trio

from proxy.errors import InvalidAllocation, InvalidRelease

if TYPE_CHECKING:
    from proxy.primitives.lease import Lease
    from proxy.primitives.memory_sensors import Depletion

__all__ = ["PoolGrowth"]


@final
class _Growth:
    """A lease's holder parked in ``Lease.grow``."""

    __slots__ = ("lease", "size_bytes", "task")

    def __init__(self, task: trio.lowlevel.Task, lease: Lease, size_bytes: int) -> None:
        self.task = task
        self.lease = lease
        self.size_bytes = size_bytes


# Worked example: MemoryPool(21, max_allocation_bytes=10); leases G and H (4 bytes each,
# available 13) are each reading a 10-byte frame:
#
#   step  call                      available      result
#   ----  ------------------------  -------------  ----------------------------------
#   1     G.try_grow(4), H: (4)     13 -> 5        both at 8 bytes (available was >= 1)
#   2     G.grow(2)                  5 -> 3        G at 10: its frame is whole
#   3     C = try_allocate(10)       3 -> -7       lease C (non-strict)
#   4     H.grow(2)                 -7 -> -9       out of memory, but H takes the overdraft:
#                                                  -9 >= 1 - 10, so H grows and completes
#   5     G.release()               -9 -> 1        H's overdraft ends with H's release


class PoolGrowth:
    """MemoryPool's half that grows leases: parked growth in arrival order, and the lease that
    holds the overdraft (until it is released). The counters it shares with the pool are
    declared here, as slots, and set by MemoryPool.__init__."""

    __slots__ = (
        "_available",
        "_depletion",
        "_disabled",
        "_growers",
        "_max_allocation_bytes",
        "_mutes_total",
        "_overdraft",
    )

    _available: int
    _disabled: bool
    _max_allocation_bytes: int
    _mutes_total: int
    _depletion: Depletion
    _growers: deque[_Growth]
    _overdraft: Lease | None

    def _check_growth(self, lease: Lease, size_bytes: int) -> None:
        if not lease.held_from(self):
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
            self._depletion.start()
            return False
        self._available -= size_bytes
        lease.size_bytes += size_bytes
        if self._depletion.since is not None:  # nobody is parked: available was >= 1
            self._depletion.end()
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
        growth = _Growth(trio.lowlevel.current_task(), lease, size_bytes)
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
