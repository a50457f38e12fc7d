# Strategy: KIP-72's sensors, with their Kafka meanings. Depletion starts at the first failed
# allocation and ends at the next successful allocation or release after which no caller is
# still parked; the pool reports its total and its share of a recent window. Time is read only
# on those slow paths, through ``trio.current_time`` (or an injected clock), so MockClock
# drives the sensors in tests.
"""The memory pool's depletion sensor and the snapshot the pool reports (``statistics()``)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import final

__all__ = ["Depletion", "MemoryPoolStatistics"]


@final
class Depletion:
    """Spells of depletion: ``since`` is the current one's start (None: not depleted), closed
    spells are kept while they overlap the window, and their total is summed as they close."""

    __slots__ = ("_clock", "_closed_s", "_spells", "since", "window_s")

    def __init__(self, clock: Callable[[], float], window_s: float) -> None:
        self._clock = clock
        self.window_s = window_s
        self.since: float | None = None
        self._spells: deque[tuple[float, float]] = deque()
        self._closed_s = 0.0

    def start(self) -> None:
        """An allocation failed: a spell starts, unless one is under way."""
        if self.since is None:
            self.since = self._clock()

    def end(self) -> None:
        """Nobody is parked any more: the current spell (there is one) ends now."""
        start = self.since
        assert start is not None
        now = self._clock()
        self.since = None
        self._closed_s += now - start
        spells = self._spells
        spells.append((start, now))
        self._forget_before(now - self.window_s)

    def percent(self) -> float:
        """Percent (0-100) of the last ``window_s`` spent depleted."""
        now = self._clock()
        horizon = now - self.window_s
        self._forget_before(horizon)
        depleted = sum(end - max(start, horizon) for start, end in self._spells)
        if self.since is not None:
            depleted += now - max(self.since, horizon)
        return 100.0 * depleted / self.window_s

    def total_s(self) -> float:
        """Total seconds spent depleted, the current spell included."""
        if self.since is None:
            return self._closed_s
        return self._closed_s + (self._clock() - self.since)

    def _forget_before(self, horizon: float) -> None:
        spells = self._spells
        while spells and spells[0][1] <= horizon:
            spells.popleft()


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
