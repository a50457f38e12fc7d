# Strategy: a timer task is its own list cell. Each task carries one back-reference, to the
# bucket that holds it, and each bucket keeps its tasks in an insertion-ordered dict used as
# an O(1) linked set. Cancelling is "delete me from the bucket I point at": O(1), no search.
#
# Kafka splits this into TimerTask -> TimerTaskEntry -> TimerTaskList (a cyclic doubly linked
# list with a sentinel root). The entry exists there so that a task re-added while an old
# entry is mid-flush can be told apart from its stale entry, under concurrent threads. Here
# everything runs on one trio thread, and a dict's delete runs in C where a Python-level
# pointer splice costs four attribute stores, so the task is the cell (a timer task saves a
# link cell in itself) and identity of `task._bucket` plays the part of Kafka's entry
# identity: a task whose back-reference no longer points at the bucket being flushed was
# cancelled or moved meanwhile, and is skipped.
"""Timer tasks and the buckets (task lists) of a timing wheel."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable

__all__ = ["TaskCounter", "TimerTask", "TimerTaskList"]


class TaskCounter:
    """The number of tasks held by all buckets of one timer (Kafka's shared AtomicInteger).

    Moving a task between buckets leaves it unchanged; the purgatory reads it as "pending".
    """

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0


class TimerTask(ABC):
    """Something that runs once when its delay has passed, unless cancelled first.

    Subclasses implement :meth:`run`. Tasks are hashed by identity (buckets are sets of
    tasks), so a subclass must not define ``__eq__``.

    Task-safety: not thread-safe; every method is meant for the one trio thread.
    """

    __slots__ = ("_bucket", "delay_ms", "expiration_ms")

    def __init__(self, delay_ms: int) -> None:
        self.delay_ms = delay_ms
        #: Absolute expiry in integer ms, set by ``Timer.add`` (KAFKA-3470: the timeout
        #: starts when the task is added, not when the request arrived).
        self.expiration_ms = 0
        self._bucket: TimerTaskList | None = None

    @abstractmethod
    def run(self) -> None:
        """Called by the timer once the task has expired."""

    def cancel(self) -> None:
        """Remove the task from its timer, in O(1). Harmless if it is not scheduled."""
        bucket = self._bucket
        if bucket is not None:
            self._bucket = None
            bucket.remove(self)

    @property
    def scheduled(self) -> bool:
        """True while the task sits in a timer bucket."""
        return self._bucket is not None


class TimerTaskList:
    """One bucket of a timing wheel: the tasks whose expiry falls in one tick-sized range.

    ``expiration_ms`` is the start of that range, or -1 while the bucket is not queued.
    """

    __slots__ = ("_counter", "_tasks", "expiration_ms")

    def __init__(self, counter: TaskCounter) -> None:
        self._counter = counter
        self._tasks: dict[TimerTask, None] = {}
        self.expiration_ms = -1

    def __len__(self) -> int:
        return len(self._tasks)

    def tasks(self) -> list[TimerTask]:
        """The tasks held, oldest first (only for testing)."""
        return list(self._tasks)

    def add(self, task: TimerTask) -> None:
        """Hold ``task``, which must not sit in any bucket (the timer cancels it first)."""
        task._bucket = self
        self._tasks[task] = None
        self._counter.count += 1

    def remove(self, task: TimerTask) -> None:
        """Forget ``task``. A miss is normal: the task's bucket is being flushed right now."""
        try:
            del self._tasks[task]
        except KeyError:
            return
        self._counter.count -= 1

    def set_expiration(self, expiration_ms: int) -> bool:
        """Set the bucket's expiry; True if it changed, so the caller queues the bucket.

        A bucket is reused once per wheel rotation, and it is queued once per rotation.
        """
        if self.expiration_ms == expiration_ms:
            return False
        self.expiration_ms = expiration_ms
        return True

    def flush(self, reinsert: Callable[[TimerTask], None]) -> None:
        """Empty the bucket and hand every live task to ``reinsert``.

        ``reinsert`` may run tasks, and a running task may cancel or re-add tasks that are
        still waiting in this flush. The dict is swapped out first, so those cancels miss
        (see :meth:`remove`), and a task whose back-reference has moved is skipped.
        """
        tasks = self._tasks
        self._tasks = {}
        self._counter.count -= len(tasks)
        self.expiration_ms = -1
        for task in tasks:
            if task._bucket is self:
                task._bucket = None
                reinsert(task)
