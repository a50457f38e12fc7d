# Strategy: a held fetch as Kafka's DelayedFetch: a synchronous check over what the proxy knows,
# never awaiting (the purgatory's contract), and the wheel owns its deadline. It completes when
# a partition has something the client has not seen, unparking a lot its holder may share.
"""The delayed operation a held fetch waits as: DelayedFetch."""

from __future__ import annotations

import trio

from proxy.held.partition_state import PartitionKey, PartitionStates
from proxy.primitives.purgatory import DelayedOperation

__all__ = ["DelayedFetch"]


class DelayedFetch(DelayedOperation):
    """A client fetch waiting for new data on any of its partitions.

    Args:
        delay_ms: what is left of the fetch's max_wait_ms.
        states: the proxy's knowledge of partitions.
        reached: per partition (canonical key), the offset the client's view already covers:
            the fetch completes once a partition's readable end passes it.
        isolation_level: the fetch's (read_committed reads up to the last stable offset).
        wake: unparked (all of it) on completion; by default a lot of its own.
    """

    __slots__ = ("_isolation_level", "_reached", "_states", "_wake", "expired")

    def __init__(
        self,
        delay_ms: int,
        states: PartitionStates,
        reached: list[tuple[PartitionKey, int]],
        isolation_level: int,
        wake: trio.lowlevel.ParkingLot | None = None,
    ) -> None:
        super().__init__(delay_ms)
        self._states = states
        self._reached = reached
        self._isolation_level = isolation_level
        self._wake = trio.lowlevel.ParkingLot() if wake is None else wake
        self.expired = False

    async def wait(self) -> None:
        """Return once the operation is completed (at once, without a checkpoint, if it is).
        A shared lot may wake this for others' reasons: it parks again until completed."""
        while not self._completed:
            await self._wake.park()

    @property
    def keys(self) -> list[PartitionKey]:
        return [key for key, _ in self._reached]

    def try_complete(self) -> bool:
        states, isolation = self._states, self._isolation_level
        for key, offset in self._reached:
            state = states.get(key)
            if state is None:
                continue  # never answered for: the deadline (or a re-fetch) will tell
            if state.stale or state.error_code or state.available(isolation) > offset:
                return self.force_complete()
        return False

    def on_complete(self) -> None:
        if self._wake:
            self._wake.unpark_all()

    def on_expiration(self) -> None:
        self.expired = True
