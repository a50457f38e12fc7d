# Strategy: the design the timing wheel replaced, copied faithfully so the benchmark compares
# designs rather than implementations: Kafka 0.8.2's RequestPurgatory, a heap of individual
# requests plus watcher lists purged whenever their total size reaches the purge interval,
# with its reaper thread's turns played on the one thread the harness runs.
"""Kafka 0.8.2's RequestPurgatory, the baseline of the purgatory benchmark."""

from __future__ import annotations

import heapq
import time
from collections.abc import Hashable
from typing import Any

from bench.purgatory.workload import PAYLOAD_BYTES, TIMEOUT_MS
from proxy.primitives.purgatory import DEFAULT_PURGE_INTERVAL

__all__ = ["REAPER_POLL_MS", "REAPER_SLICE_S", "BaselineImpl"]

REAPER_POLL_MS = 200  # 0.8's reaper polls its DelayQueue for at most 200 ms
REAPER_SLICE_S = 0.005  # the reaper thread's turn on the one core, like an OS time slice


class OldRequest:
    """0.8's DelayedRequest: an AtomicBoolean ``satisfied`` and a deadline."""

    __slots__ = ("completes_at_ms", "deadline_ms", "payload", "satisfied")

    def __init__(self, completes_at_ms: float) -> None:
        self.completes_at_ms = completes_at_ms
        self.deadline_ms = 0
        self.satisfied = False
        self.payload = bytes(PAYLOAD_BYTES)


class OldPurgatory:
    """Kafka 0.8.2's RequestPurgatory on one thread (see kafka/server/RequestPurgatory.scala).

    - ``check_and_maybe_watch``: for each key, if the request is not satisfied and its
      check fails, append it to the key's list (a LinkedList there); then put the request
      itself into the reaper's DelayQueue (a heap of individual requests).
    - Completion only flips ``satisfied``; the request stays in the heap and in every list.
    - The reaper loop: poll one expired, unsatisfied request (satisfied ones popped on the
      way are dropped) and expire it; then, on every iteration, purge all watcher lists if
      their total size is >= purge_interval, and purge the heap if its size is >=
      purge_interval. An iteration also happens when the poll times out (200 ms).
    """

    def __init__(self, purge_interval: int = DEFAULT_PURGE_INTERVAL) -> None:
        self.purge_interval = purge_interval
        self.watchers: dict[Hashable, list[OldRequest]] = {}
        self.delayed: list[tuple[int, int, OldRequest]] = []
        self.seq = 0
        self.unsatisfied = 0
        self.finished = 0  # completed or expired
        self.last_poll_ms = 0
        self.purges = 0

    def check_and_maybe_watch(self, request: OldRequest, keys: Any, now_ms: int) -> bool:
        for key in keys:
            lst = self.watchers.get(key)
            if lst is None:
                lst = self.watchers[key] = []
            # Watchers.checkAndMaybeAdd
            if request.satisfied or now_ms >= request.completes_at_ms:
                if not request.satisfied:
                    request.satisfied = True
                    return True
                return False
            lst.append(request)
        request.deadline_ms = now_ms + TIMEOUT_MS
        self.seq += 1
        heapq.heappush(self.delayed, (request.deadline_ms, self.seq, request))
        self.unsatisfied += 1
        return False

    def complete(self, request: OldRequest) -> None:
        if not request.satisfied:  # satisfied.compareAndSet(false, true)
            request.satisfied = True
            self.unsatisfied -= 1
            self.finished += 1

    def watched(self) -> int:
        return sum(len(lst) for lst in self.watchers.values())

    def reaper_step(self, now_ms: int) -> None:
        """Run reaper iterations until none is due, or for one scheduler slice at most.

        In Kafka the reaper is its own thread; on one core it shares the CPU with the
        generator and the completer. The slice gives them their turn, as the OS would.
        """
        delayed = self.delayed
        slice_end = time.perf_counter() + REAPER_SLICE_S
        while time.perf_counter() < slice_end:
            expired = None
            while delayed and delayed[0][0] <= now_ms:  # pollExpired
                _, _, request = heapq.heappop(delayed)
                if not request.satisfied:
                    request.satisfied = True
                    self.unsatisfied -= 1
                    self.finished += 1
                    expired = request
                    break
            if expired is None:
                if now_ms - self.last_poll_ms < REAPER_POLL_MS:
                    return
                self.last_poll_ms = now_ms  # the 200 ms poll timed out: one idle iteration
            self._maybe_purge()
            if expired is None:
                return

    def _maybe_purge(self) -> None:
        if self.watched() >= self.purge_interval:
            self.purges += 1
            for lst in self.watchers.values():
                lst[:] = [r for r in lst if not r.satisfied]
        if len(self.delayed) >= self.purge_interval:
            self.delayed = [e for e in self.delayed if not e[2].satisfied]
            heapq.heapify(self.delayed)


class BaselineImpl:
    def __init__(self) -> None:
        self.purgatory = OldPurgatory()
        self.watch = self.purgatory.check_and_maybe_watch
        self.tick = self.purgatory.reaper_step
        self.complete = self.purgatory.complete

    @staticmethod
    def new(completes_at_ms: float) -> OldRequest:
        return OldRequest(completes_at_ms)

    def next_due(self) -> int | None:
        p = self.purgatory
        due = p.last_poll_ms + REAPER_POLL_MS
        return min(p.delayed[0][0], due) if p.delayed else due

    def pending(self) -> int:
        return self.purgatory.unsatisfied

    def finished(self) -> int:
        return self.purgatory.finished
