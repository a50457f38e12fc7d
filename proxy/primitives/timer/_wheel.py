# Strategy: Kafka's TimingWheel, clock-free. The wheel never reads a clock: it is told where
# time is (`advance_clock(time_ms)`) by its owner, which only ever advances it to the
# expiration of the bucket it is about to flush (never to "now": see advance_clock). `add`
# answers "held" or "already expired, run it now"; overflow wheels are created the first time
# they are needed.
"""Hierarchical timing wheel.

A simple timing wheel is a circular list of ``wheel_size`` buckets, each ``tick_ms`` wide,
covering ``interval_ms = tick_ms * wheel_size`` from ``current_time_ms``. A task expiring at
``exp`` goes into bucket ``(exp // tick_ms) % wheel_size``; insert and delete are O(1),
against O(log n) for a heap of tasks (Java's DelayQueue). A task beyond the interval is an
overflow: it goes to the next wheel up, whose tick is this wheel's whole interval. When an
overflow bucket expires its tasks are re-added from the bottom and fall into finer wheels
(or run). Insert is O(levels), delete stays O(1).

Worked example: tick 1 ms, wheel size 3, current time c = 0.

====================  ===========================  ==============================
task expires at (ms)  goes to                      bucket expiration (ms)
====================  ===========================  ==============================
0                     nowhere: expired, run now    -
1, 2                  level 0, buckets 1, 2        1, 2
3 .. 8                level 1 (tick 3), bucket     3 (for 3..5) or 6 (for 6..8)
9 .. 26               level 2 (tick 9)             9 or 18
====================  ===========================  ==============================

At c = 3 the level-1 bucket for 3..5 expires; its tasks are re-added: 3 runs, 4 and 5 go to
level-0 buckets 1 and 2 (which now mean 4 and 5, one rotation later).

A bucket expires at the *start* of its range, so with ``tick_ms > 1`` a task may run up to
``tick_ms - 1`` ms before its own expiration (Kafka behaves the same). The default tick of
1 ms with integer-ms expirations makes a task run exactly at its expiration.

Empty buckets stay allocated for the wheel's whole life ("a bit wasteful, but simplifies the
implementation", as Kafka's comment says).

Task-safety: not thread-safe and not reentrant across ``add``/``advance_clock``; the owning
timer is driven by a single trio task and never awaits in between.
"""

from __future__ import annotations

from collections.abc import Callable

from ._bucket import TaskCounter, TimerTask, TimerTaskList

__all__ = ["TimingWheel"]


class TimingWheel:
    """One level of the hierarchy (the bottom one owns the others through ``overflow``).

    Args:
        tick_ms: width of one bucket.
        wheel_size: number of buckets.
        start_ms: initial current time; rounded down to a multiple of ``tick_ms``.
        counter: shared count of held tasks.
        enqueue: called with a bucket whose expiration just changed, so the owner can
            queue it by that expiration.
    """

    __slots__ = (
        "_buckets",
        "_counter",
        "_enqueue",
        "current_time_ms",
        "interval_ms",
        "overflow",
        "tick_ms",
        "wheel_size",
    )

    def __init__(
        self,
        tick_ms: int,
        wheel_size: int,
        start_ms: int,
        counter: TaskCounter,
        enqueue: Callable[[TimerTaskList], None],
    ) -> None:
        if tick_ms < 1 or wheel_size < 2:
            raise ValueError(f"need tick_ms >= 1 and wheel_size >= 2, got {tick_ms}, {wheel_size}")
        self.tick_ms = tick_ms
        self.wheel_size = wheel_size
        self.interval_ms = tick_ms * wheel_size
        self.current_time_ms = start_ms - start_ms % tick_ms
        self._counter = counter
        self._enqueue = enqueue
        self._buckets = [TimerTaskList(counter) for _ in range(wheel_size)]
        self.overflow: TimingWheel | None = None

    def add(self, task: TimerTask) -> bool:
        """Hold ``task`` by its ``expiration_ms``; False means it has expired: run it now.

        This is the hot path of every timeout, so it walks up the levels in a loop rather
        than by recursion, and links the task into its bucket inline.
        """
        expiration_ms = task.expiration_ms
        wheel = self
        while True:
            current_ms = wheel.current_time_ms
            tick_ms = wheel.tick_ms
            if expiration_ms < current_ms + tick_ms:
                # Already expired.
                return False
            if expiration_ms < current_ms + wheel.interval_ms:
                # Fits this wheel: put it in its bucket (TimerTaskList.add, inlined).
                virtual_id = expiration_ms // tick_ms
                bucket = wheel._buckets[virtual_id % wheel.wheel_size]
                task._bucket = bucket
                bucket._tasks[task] = None
                wheel._counter.count += 1
                # Queue the bucket once per rotation (TimerTaskList.set_expiration, inlined:
                # its expiration changes once per rotation).
                bucket_ms = virtual_id * tick_ms
                if bucket.expiration_ms != bucket_ms:
                    bucket.expiration_ms = bucket_ms
                    wheel._enqueue(bucket)
                return True
            # Out of range: hand it to the overflow wheel, created on first use.
            overflow = wheel.overflow
            if overflow is None:
                overflow = wheel.overflow = TimingWheel(
                    wheel.interval_ms, wheel.wheel_size, current_ms, wheel._counter, wheel._enqueue
                )
            wheel = overflow

    def advance_clock(self, time_ms: int) -> None:
        """Move this wheel (and those above it) to ``time_ms``, rounded down to a tick.

        The owner calls this with the expiration of the bucket it is flushing, never with
        "now": advancing past a bucket that is due but not yet flushed would let new tasks
        land in it and mix two rotations.
        """
        if time_ms >= self.current_time_ms + self.tick_ms:
            self.current_time_ms = time_ms - time_ms % self.tick_ms
            if self.overflow is not None:
                self.overflow.advance_clock(self.current_time_ms)

    def levels(self) -> int:
        """How many wheels exist, this one included (only for testing)."""
        return 1 if self.overflow is None else 1 + self.overflow.levels()
