# Strategy: the two operations the proxy holds, as Kafka's DelayedFetch and DelayedProduce:
# synchronous checks over what the proxy knows, never awaiting (the purgatory's contract); the
# wheel owns both deadlines. A DelayedFetch completes when a partition has something the client
# has not seen, unparking a lot its holder may share. A DelayedProduce is completed by its
# upstream answer; on expiry it makes the REQUEST_TIMED_OUT answer and interrupts the holder.
"""The delayed operations the proxy's purgatories hold: fetches and produces."""

from __future__ import annotations

import trio

from proxy.held.partition_state import PartitionKey, PartitionStates
from proxy.primitives.purgatory import DelayedOperation
from proxy.routing.rewrite import RequestPlan, produce_timed_out

__all__ = ["DelayedFetch", "DelayedProduce"]


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


class DelayedProduce(DelayedOperation):
    """A forwarded produce waiting for its upstream answer, at most its timeout_ms.

    Args:
        delay_ms: what is left of the produce's timeout_ms.
        plan: the produce's plan, to build its REQUEST_TIMED_OUT answer on expiry.
        interrupt: the holder's wait for the broker's answer, cancelled on expiry.

    Attributes:
        answer: the frame the client gets: the broker's (``answered``) or, once the wheel
            expired it, REQUEST_TIMED_OUT (None while it waits).
    """

    __slots__ = ("_interrupt", "_plan", "answer", "expired")

    def __init__(self, delay_ms: int, plan: RequestPlan, interrupt: trio.CancelScope) -> None:
        super().__init__(delay_ms)
        self._plan = plan
        self._interrupt = interrupt
        self.answer: bytes | bytearray | None = None
        self.expired = False

    def answered(self, frame: bytearray) -> bool:
        """The broker's answer came: complete with it (True), unless the wheel expired the
        produce first (False: ``answer`` is the timeout's)."""
        if self._completed:
            return False
        self.answer = frame
        return self.force_complete()

    def try_complete(self) -> bool:
        return self.answer is not None and self.force_complete()

    def on_complete(self) -> None:
        pass  # the holder reads ``answer`` once its wait ends

    def on_expiration(self) -> None:
        self.expired = True
        self.answer = produce_timed_out(self._plan)
        self._interrupt.cancel()
