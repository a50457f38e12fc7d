# Strategy: Kafka's SystemTimer without the thread. A heap orders *buckets* (never tasks) by
# expiration, so it holds at most wheel_size x levels live entries however many tasks there
# are. A bucket is pushed when its expiration changes; an entry whose expiration no longer
# matches its bucket is stale and skipped when popped (lazy deletion, as trio's own deadline
# heap does). The owner asks `next_expiration_ms()` to know how long it may sleep, and calls
# `advance_clock(now_ms)`, which flushes due buckets one by one, each time moving the wheel
# only to that bucket's expiration (never to "now": _wheel.py says why).
"""The timer: a hierarchical timing wheel plus the priority queue of its buckets."""

from __future__ import annotations

import heapq
import itertools

from ._bucket import TaskCounter, TimerTask, TimerTaskList
from ._wheel import TimingWheel

__all__ = ["DEFAULT_TICK_MS", "DEFAULT_WHEEL_SIZE", "Timer"]

#: Bucket width of the finest wheel; Kafka's SystemTimer default.
DEFAULT_TICK_MS = 1
#: Buckets per wheel; Kafka's SystemTimer default.
DEFAULT_WHEEL_SIZE = 20


class Timer:
    """Runs each added task once its delay has passed, unless the task is cancelled first.

    The timer never reads a clock: ``add`` and ``advance_clock`` take the current time in
    integer milliseconds from the caller (in the proxy, the purgatory's clock task).

    Args:
        tick_ms: bucket width of the finest wheel.
        wheel_size: buckets per wheel.
        start_ms: the time the wheel starts at.

    Error handling: an exception raised by a task's ``run`` propagates out of ``add`` or
    ``advance_clock``; the timer's own state is consistent at that point (the bucket being
    flushed keeps its not-yet-visited tasks held, see ``TimerTaskList.flush``).

    Task-safety: single trio thread; ``add``, ``advance_clock`` and task ``run`` methods
    never await. Tasks may add and cancel other tasks from inside ``run``.
    """

    __slots__ = ("_counter", "_heap", "_seq", "_wheel")

    def __init__(
        self,
        tick_ms: int = DEFAULT_TICK_MS,
        wheel_size: int = DEFAULT_WHEEL_SIZE,
        start_ms: int = 0,
    ) -> None:
        self._counter = TaskCounter()
        self._heap: list[tuple[int, int, TimerTaskList]] = []
        self._seq = itertools.count()
        self._wheel = TimingWheel(tick_ms, wheel_size, start_ms, self._counter, self._push)

    def __len__(self) -> int:
        """Tasks held right now: exactly the pending ones (completed tasks leave at once)."""
        return self._counter.count

    @property
    def counter(self) -> TaskCounter:
        """The live count behind ``len()``, for callers that read it on a hot path."""
        return self._counter

    @property
    def wheel(self) -> TimingWheel:
        """The finest wheel (only for testing)."""
        return self._wheel

    def queued_buckets(self) -> int:
        """Heap entries, stale ones included (only for testing)."""
        return len(self._heap)

    def _push(self, bucket: TimerTaskList) -> None:
        heapq.heappush(self._heap, (bucket.expiration_ms, next(self._seq), bucket))

    def add(self, task: TimerTask, now_ms: int) -> None:
        """Schedule ``task`` to run at ``now_ms + task.delay_ms``.

        A task that is already scheduled is moved (it still runs once). A task whose
        expiration is already due (zero or negative delay) runs before ``add`` returns,
        unless a bucket is due and not yet flushed: then it joins that bucket and runs at
        the next ``advance_clock``, in expiration order with the others.
        """
        if task._bucket is not None:
            task.cancel()
        wheel = self._wheel
        if now_ms >= wheel.current_time_ms + wheel.tick_ms:
            heap = self._heap
            if not heap or heap[0][0] > now_ms:
                # No queued bucket is due, so moving the wheel to now cannot mix rotations
                # (every held task lies after now). It lets a task that is due now run at
                # once, and keeps an idle timer from cascading through overflow wheels.
                wheel.advance_clock(now_ms)
        task.expiration_ms = now_ms + task.delay_ms
        if not wheel.add(task):
            task.run()

    def _reinsert(self, task: TimerTask) -> None:
        if not self._wheel.add(task):
            task.run()

    def advance_clock(self, now_ms: int) -> bool:
        """Flush every bucket due at ``now_ms``; True if at least one was flushed.

        Tasks in a flushed bucket either run (their expiration has come) or move down to a
        finer wheel. The wheel is advanced to each bucket's own expiration, in order.
        """
        heap = self._heap
        wheel = self._wheel
        flushed = False
        while heap and heap[0][0] <= now_ms:
            expiration_ms, _, bucket = heapq.heappop(heap)
            if bucket.expiration_ms != expiration_ms:
                continue  # stale entry: the bucket was emptied and dropped earlier
            wheel.advance_clock(expiration_ms)
            bucket.flush(self._reinsert)
            flushed = True
        if not heap:
            wheel.advance_clock(now_ms)
        return flushed

    def next_expiration_ms(self) -> int | None:
        """When the earliest non-empty bucket is due, or None if the timer holds nothing.

        Buckets that emptied because their tasks were cancelled are dropped here, so the
        clock task does not wake up for them.
        """
        heap = self._heap
        while heap:
            expiration_ms, _, bucket = heap[0]
            if bucket.expiration_ms != expiration_ms:
                heapq.heappop(heap)  # stale
            elif not bucket:
                heapq.heappop(heap)  # emptied by cancellations: forget it
                bucket.expiration_ms = -1
            else:
                return expiration_ms
        return None

    def earliest_queued_ms(self) -> int | None:
        """The heap's first expiration, possibly of an empty bucket; O(1).

        Used after ``add`` to learn whether the clock task must wake up earlier.
        """
        heap = self._heap
        return heap[0][0] if heap else None
