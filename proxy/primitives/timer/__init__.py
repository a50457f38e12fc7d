# Strategy: the public surface of the timer package; each private module holds one idea
# (a bucket, a wheel, the timer that queues buckets), as Kafka's timer classes do.
"""Hierarchical timing wheel (Kafka's): O(1) add and cancel, clock-free.

Nothing in this package reads a clock or awaits: the caller passes integer milliseconds.
``proxy.primitives.purgatory`` owns the one trio task that drives it.

_bucket.py  TimerTask, TimerTaskList (one bucket of the wheel) and the TaskCounter
_wheel.py   TimingWheel: one level of buckets, overflowing into a coarser wheel
_timer.py   Timer: the wheels and the queue of buckets by expiry (Kafka's SystemTimer)
"""

from ._bucket import TaskCounter, TimerTask, TimerTaskList
from ._timer import DEFAULT_TICK_MS, DEFAULT_WHEEL_SIZE, Timer
from ._wheel import TimingWheel

__all__ = [
    "DEFAULT_TICK_MS",
    "DEFAULT_WHEEL_SIZE",
    "TaskCounter",
    "Timer",
    "TimerTask",
    "TimerTaskList",
    "TimingWheel",
]
