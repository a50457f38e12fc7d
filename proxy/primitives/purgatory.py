# Strategy: Kafka's DelayedOperationPurgatory on one trio thread.
#
# - An operation waits in two places: the timer (by deadline) and one watcher list per key
#   (by the event that may complete it). Completion removes it from the timer at once, O(1),
#   so the timer's size *is* the pending count. Watcher lists are cleaned lazily: when a key
#   is checked, and by a purge that runs only when the seed's estimate says there is enough
#   to remove (estimated total - pending > purge interval), never because lists are long.
# - Everything is synchronous: try_complete, on_complete and on_expiration never await, so
#   no per-operation lock is needed and completion vs. expiry cannot interleave; the
#   `_completed` flag alone makes force_complete exactly-once. The double check in
#   try_complete_else_watch is kept anyway: an operation's first check may itself cause the
#   event it waits for (it runs user code), and the check is cheap.
# - One task, `Purgatory.run`, drives the clock: it sleeps in a cancel scope until the
#   earliest non-empty bucket is due; watching an operation with an earlier deadline pulls
#   that scope's deadline in. Completion callbacks that check other keys are queued and run
#   after the current check, never recursively (Kafka's ActionQueue, KAFKA-8334).
"""The purgatory: operations that wait for an event or a deadline, whichever comes first.

How the proxy uses it: a handler subclasses :class:`DelayedOperation`, whose ``on_complete``
(or ``on_expiration``) wakes its holder; it calls
:meth:`Purgatory.try_complete_else_watch` with the operation's topic-partitions, then waits
(the proxy's two: proxy/held/fetch/delayed.py, proxy/held/produce.py). Whatever may satisfy a
waiting operation (a produce landing on a partition) calls
:meth:`Purgatory.check_and_complete` with that partition. The server starts
:meth:`Purgatory.run` in its nursery.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections import deque
from collections.abc import Hashable, Iterable
from dataclasses import dataclass

import trio

from proxy.primitives.timer import DEFAULT_TICK_MS, DEFAULT_WHEEL_SIZE, Timer, TimerTask

__all__ = [
    "DEFAULT_PURGE_INTERVAL",
    "DEFAULT_TICK_MS",
    "DEFAULT_WHEEL_SIZE",
    "DelayedOperation",
    "Purgatory",
    "PurgatoryStatistics",
    "current_time_ms",
]

#: Purge watcher lists once this many completed operations may linger in them; Kafka's
#: ``*.purgatory.purge.interval.requests`` default.
DEFAULT_PURGE_INTERVAL = 1000


def current_time_ms() -> int:
    """trio's clock in integer milliseconds, rounded down: the purgatory's only clock."""
    return math.floor(trio.current_time() * 1000)


class DelayedOperation(TimerTask):
    """An operation that completes when its condition holds or its delay passes.

    Subclasses implement:

    - :meth:`try_complete`: check the condition; if it holds, call :meth:`force_complete`
      and return what it returned, else return False. Called by the purgatory (twice when
      the operation is watched, then on each ``check_and_complete`` of one of its keys).
    - :meth:`on_complete`: deliver the result. Runs exactly once, whoever completed.
    - :meth:`on_expiration`: optional; runs after ``on_complete`` when the deadline won.

    All three are synchronous and must not await: they run inside the purgatory's clock
    task or inside whoever called ``check_and_complete``. Hand results over with
    ``trio.Event.set()`` or ``MemorySendChannel.send_nowait()``.

    Args:
        delay_ms: how long the operation may wait once it is watched.
    """

    __slots__ = ("_completed", "_purgatory")

    def __init__(self, delay_ms: int) -> None:
        # TimerTask.__init__ inlined: one call less per operation on the hot path.
        self.delay_ms = delay_ms
        self.expiration_ms = 0
        self._bucket = None
        self._completed = False
        self._purgatory: Purgatory | None = None

    @property
    def is_completed(self) -> bool:
        return self._completed

    @abstractmethod
    def try_complete(self) -> bool:
        """Check the condition; if it holds, return ``self.force_complete()``, else False."""

    @abstractmethod
    def on_complete(self) -> None:
        """Deliver the result; runs exactly once, whoever completed the operation."""

    def on_expiration(self) -> None:
        """Nothing by default (Kafka's DelayedFetch only counts expirations here)."""

    def force_complete(self) -> bool:
        """Complete the operation now; True only for the one call that did it.

        Completion and expiry race (a produce lands in the same tick the fetch expires):
        whichever calls first wins, the other gets False and does nothing. The operation
        leaves the timer here, so nothing of it remains there once completed.
        """
        if self._completed:
            return False
        self._completed = True
        bucket = self._bucket
        if bucket is not None:  # TimerTask.cancel, inlined
            self._bucket = None
            bucket.remove(self)
        purgatory = self._purgatory
        if purgatory is not None:
            purgatory._finished += 1
        self.on_complete()
        return True

    def run(self) -> None:
        """The timer's expiry callback: complete (if still possible), then on_expiration."""
        if self.force_complete():
            purgatory = self._purgatory
            if purgatory is not None:
                purgatory._expired += 1
            self.on_expiration()


@dataclass(frozen=True, slots=True)
class PurgatoryStatistics:
    """A snapshot of a purgatory's counters.

    Attributes:
        pending: operations waiting (exactly the timer's size).
        estimated_total: the seed's estimate of distinct operations in watcher lists,
            completed ones included; a purge resets it to ``pending``.
        watched: entries in all watcher lists right now (an operation counts once per key).
        watch_keys: keys that have a watcher list.
        completed: operations completed because their condition held.
        expired: operations completed because their deadline passed.
        purges: purges of watcher lists so far.
    """

    pending: int
    estimated_total: int
    watched: int
    watch_keys: int
    completed: int
    expired: int
    purges: int


class Purgatory:
    """Watcher lists plus a timer, for :class:`DelayedOperation` objects.

    Worked example: the fetch purgatory at c = 1000 ms. Fetch A waits on ("t", 0) with
    max_wait 500; fetch B on ("t", 0) and ("t", 1) with max_wait 300; a produce P with
    timeout 200 sits in the produce purgatory (no keys: only its answer or its deadline ends
    it).

    ============  =============================================  ======================
    at (ms)       what happens                                   A / B / P
    ============  =============================================  ======================
    1000          A, B, P ``try_complete_else_watch``: nothing   watched, timer 1500 /
                  new yet, so each is watched by its keys and    1300 / 1200
                  put in the timer at c + delay
    1100          a produce lands on ("t", 1):                   - / completed / -
                  ``check_and_complete(("t", 1))`` runs B's
                  ``try_complete``, which holds: B's
                  ``on_complete`` wakes its holder, B leaves
                  the timer at once (O(1)) and the ("t", 1)
                  list drops it
    1180          P's broker answers: ``answered`` completes P   - / - / completed
                  (``force_complete``), before its deadline
    1500          the clock task reaches A's bucket: ``run``     expired / - / -
                  completes A, then ``on_expiration``; A's
                  holder gets what there is. B is still in the
                  ("t", 0) list (completed), until that key is
                  checked or the next purge
    ============  =============================================  ======================

    Had P's answer not come, the clock would have expired P at 1200: its ``on_expiration``
    makes the REQUEST_TIMED_OUT answer and cancels its holder's wait. Completion and expiry
    race only between tasks, never inside one call: whichever calls ``force_complete`` first
    wins, the other does nothing.

    Args:
        tick_ms: timer tick (see :mod:`proxy.primitives.timer`).
        wheel_size: buckets per timing wheel.
        purge_interval: purge watcher lists when the estimated number of completed
            operations still in them exceeds this.

    Resource handling: completed operations leave the timer at once; they leave watcher
    lists when their key is checked or at the next purge, so at most about
    ``purge_interval`` completed operations stay referenced.

    Error handling: an exception from an operation's callback propagates to whoever caused
    the callback (the clock task, ``check_and_complete``, ``try_complete_else_watch``); the
    purgatory's own structures stay consistent.

    Task-safety: one trio thread; no method awaits except :meth:`run`.
    """

    # XXX: no periodic purge check (Kafka's reaper looks every 200 ms): the estimate is
    # checked on watch, on check_and_complete and when the clock task wakes, so after the
    # last watch completed entries can linger until the next of those. No cancel_for_key.

    def __init__(
        self,
        *,
        tick_ms: int = DEFAULT_TICK_MS,
        wheel_size: int = DEFAULT_WHEEL_SIZE,
        purge_interval: int = DEFAULT_PURGE_INTERVAL,
    ) -> None:
        self.purge_interval = purge_interval
        self._timer = Timer(tick_ms, wheel_size)
        self._pending = self._timer.counter  # read directly on the hot path
        self._watchers: dict[Hashable, dict[DelayedOperation, None]] = {}
        self._estimated_total = 0
        self._finished = 0
        self._expired = 0
        self._purges = 0
        self._checking = False
        self._deferred_keys: deque[Hashable] = deque()
        self._running = False
        # The clock task's sleep, while it sleeps; `add` may pull its deadline in.
        self._sleep_scope: trio.CancelScope | None = None
        self._sleep_until_ms: float = math.inf
        #: How late the clock task woke for its last due bucket, in seconds (a CPU-starved
        #: event loop shows here first: expirations fire that much late).
        self.clock_lag_s = 0.0

    def __repr__(self) -> str:
        stats = self.statistics()
        return (
            f"<Purgatory pending={stats.pending} watched={stats.watched} "
            f"completed={stats.completed} expired={stats.expired} purges={stats.purges}>"
        )

    # -- counters ------------------------------------------------------------------------

    @property
    def pending(self) -> int:
        """Operations waiting right now (the timer's size, exact at all times)."""
        return self._pending.count

    @property
    def timer(self) -> Timer:
        """The timer (only for testing)."""
        return self._timer

    def statistics(self) -> PurgatoryStatistics:
        """Counters; ``watched`` costs O(number of keys)."""
        return PurgatoryStatistics(
            pending=self._pending.count,
            estimated_total=self._estimated_total,
            watched=sum(len(ops) for ops in self._watchers.values()),
            watch_keys=len(self._watchers),
            completed=self._finished - self._expired,
            expired=self._expired,
            purges=self._purges,
        )

    def watched_keys(self) -> Iterable[Hashable]:
        """Every key with a watcher list (a live view; lists of completed operations linger
        until their key is checked or purged)."""
        return self._watchers.keys()

    def watched_ops(self, key: Hashable) -> int:
        """Entries in ``key``'s watcher list, completed ones included (0: nobody waits on it)."""
        ops = self._watchers.get(key)
        return 0 if ops is None else len(ops)

    def waiting_on(self, key: Hashable) -> bool:
        """Whether an operation not yet completed waits on ``key`` (completed ones linger in
        watcher lists until a purge)."""
        ops = self._watchers.get(key)
        return ops is not None and any(not op.is_completed for op in ops)

    # -- operations ----------------------------------------------------------------------

    def try_complete_else_watch(
        self, op: DelayedOperation, keys: Iterable[Hashable], now_ms: int | None = None
    ) -> bool:
        """Complete ``op`` now if it can, else watch it on every key and start its timeout.

        The check runs twice, around the watch: an event that fires after the first check
        but before the operation is in the watcher lists would otherwise be missed until
        the timeout (the lost-wakeup window). The timeout starts now (KAFKA-3470).

        Args:
            op: a fresh operation (not watched before).
            keys: what may complete it, e.g. topic-partitions; an operation with no keys
                can only complete by its deadline or by ``force_complete``.
            now_ms: the current time; defaults to :func:`current_time_ms`.

        Returns:
            True if this call completed the operation.
        """
        op._purgatory = self
        if op.try_complete():
            return True
        if op._completed:
            # Completed by someone else during the check. (Nothing else can run while the
            # keys are watched below: the loop calls no user code but hashing.)
            return False
        watchers = self._watchers
        watched = False
        for key in keys:
            ops = watchers.get(key)
            if ops is None:
                watchers[key] = {op: None}
            else:
                ops[op] = None
            watched = True
        if watched:
            self._estimated_total += 1
        if op.try_complete():
            return True
        if not op._completed:
            timer = self._timer
            timer.add(op, current_time_ms() if now_ms is None else now_ms)
            if self._sleep_scope is not None:
                earliest_ms = timer.earliest_queued_ms()
                if earliest_ms is not None and earliest_ms < self._sleep_until_ms:
                    self._wake_at(earliest_ms)
        if self._estimated_total - self._pending.count > self.purge_interval:
            self._purge()
        return False

    def check_and_complete(self, key: Hashable) -> int:
        """Try to complete the operations watching ``key``; how many completed.

        Completed operations found in the list are dropped from it, and a list left empty
        is removed. If an operation's ``on_complete`` checks another key, that check is
        queued and runs after this one (counted in this call's result), so callbacks never
        recurse into the purgatory.
        """
        if self._checking:
            self._deferred_keys.append(key)
            return 0
        self._checking = True
        try:
            completed = self._check_key(key)
            deferred = self._deferred_keys
            while deferred:
                completed += self._check_key(deferred.popleft())
        finally:
            self._checking = False
            self._deferred_keys.clear()
        if self._estimated_total - self._pending.count > self.purge_interval:
            self._purge()
        return completed

    def _check_key(self, key: Hashable) -> int:
        ops = self._watchers.get(key)
        if ops is None:
            return 0
        completed = 0
        for op in list(ops):
            if op._completed:
                ops.pop(op, None)
            elif op.try_complete():
                ops.pop(op, None)
                completed += 1
        if not ops and self._watchers.get(key) is ops:
            del self._watchers[key]
        return completed

    def _purge(self) -> None:
        """Drop completed operations from every watcher list (O(total watched)).

        Before the sweep the estimate is reset to the timer's size, the exact number of
        pending operations; operations watched later add to it again (as Kafka's purge does).
        """
        self._estimated_total = self._pending.count
        self._purges += 1
        watchers = self._watchers
        for key, ops in list(watchers.items()):
            live = {op: None for op in ops if not op._completed}
            if live:
                if len(live) != len(ops):
                    watchers[key] = live
            else:
                del watchers[key]

    # -- the clock -----------------------------------------------------------------------

    def advance_clock(self, now_ms: int) -> None:
        """Expire every operation due at ``now_ms`` and purge if the estimate says so.

        :meth:`run` calls this; so may a test or a benchmark driving time by hand. It never
        awaits.
        """
        self._timer.advance_clock(now_ms)
        if self._estimated_total - self._pending.count > self.purge_interval:
            self._purge()

    def _wake_at(self, due_ms: int) -> None:
        assert self._sleep_scope is not None
        self._sleep_until_ms = due_ms
        self._sleep_scope.deadline = due_ms / 1000

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Drive the timer with trio's clock until cancelled (start it in a nursery).

        The task sleeps until the earliest non-empty bucket is due, flushes what is due,
        and sleeps again; it does not wake up per tick or per operation. Only one ``run``
        may be active per purgatory.

        Raises:
            RuntimeError: if another ``run`` of this purgatory is active.
        """
        if self._running:
            raise RuntimeError("this purgatory's clock task is already running")
        self._running = True
        try:
            task_status.started()
            now_ms = current_time_ms()
            while True:
                self.advance_clock(now_ms)
                next_ms = self._timer.next_expiration_ms()
                due_ms = math.inf if next_ms is None else next_ms
                with trio.CancelScope(deadline=due_ms / 1000) as scope:
                    self._sleep_scope = scope
                    self._sleep_until_ms = due_ms
                    await trio.sleep_forever()
                self._sleep_scope = None
                self.clock_lag_s = max(0.0, trio.current_time() - self._sleep_until_ms / 1000)
                # Only the deadline ends the sleep, and trio wakes us at or after it; but
                # ms -> s -> ms may round down by one, so never call the bucket not yet due.
                now_ms = max(current_time_ms(), int(self._sleep_until_ms))
        finally:
            self._sleep_scope = None
            self._sleep_until_ms = math.inf
            self._running = False
