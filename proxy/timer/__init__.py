# Strategy: the public surface of the timer package; each private module holds one idea
# (a bucket, a wheel, the timer that queues buckets), as Kafka's timer classes do.
"""Hierarchical timing wheel (seed 000): O(1) add and cancel, clock-free.

Nothing in this package reads a clock or awaits: the caller passes integer milliseconds.
``proxy.purgatory`` owns the one trio task that drives it.
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
