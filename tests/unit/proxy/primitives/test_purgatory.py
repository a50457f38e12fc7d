"""The purgatory (Kafka's DelayedOperationTest), on trio's virtual clock.

Every test here runs under ``autojump_clock``: virtual time jumps to the next deadline as
soon as all tasks are blocked, so times asserted below are exact.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

import pytest
import trio
import trio.testing

from proxy.primitives.purgatory import (
    DEFAULT_PURGE_INTERVAL,
    DEFAULT_TICK_MS,
    DEFAULT_WHEEL_SIZE,
    DelayedOperation,
    Purgatory,
    current_time_ms,
)


class MockOp(DelayedOperation):
    """Completes when ``completable`` is set (Kafka's MockDelayedOperation)."""

    def __init__(self, delay_ms: int, name: str = "") -> None:
        super().__init__(delay_ms)
        self.name = name
        self.completable = False
        self.checks = 0
        self.completed_at_ms: int | None = None
        self.expired_at_ms: int | None = None
        self.completions = 0
        self.done = trio.Event()
        self.on_check: Callable[[MockOp], None] | None = None
        self.after_complete: Callable[[MockOp], None] | None = None

    def try_complete(self) -> bool:
        self.checks += 1
        if self.on_check is not None:
            self.on_check(self)
        if self.completable:
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        self.completions += 1
        self.completed_at_ms = current_time_ms()
        self.done.set()
        if self.after_complete is not None:
            self.after_complete(self)

    def on_expiration(self) -> None:
        self.expired_at_ms = current_time_ms()


@pytest.fixture
async def purgatory(nursery: trio.Nursery) -> Purgatory:
    p = Purgatory()
    await nursery.start(p.run)
    return p


def test_defaults_are_the_seeds() -> None:
    assert (DEFAULT_TICK_MS, DEFAULT_WHEEL_SIZE, DEFAULT_PURGE_INTERVAL) == (1, 20, 1000)


async def test_request_satisfaction(purgatory: Purgatory, autojump_clock: object) -> None:
    r1, r2 = MockOp(100_000), MockOp(100_000)
    assert purgatory.check_and_complete("test1") == 0
    assert purgatory.try_complete_else_watch(r1, ["test1"]) is False
    assert purgatory.check_and_complete("test1") == 0
    assert purgatory.try_complete_else_watch(r2, ["test2"]) is False
    assert purgatory.check_and_complete("test2") == 0
    r1.completable = True
    assert purgatory.check_and_complete("test1") == 1
    assert purgatory.check_and_complete("test1") == 0
    r2.completable = True
    assert purgatory.check_and_complete("test2") == 1
    assert purgatory.check_and_complete("test2") == 0
    stats = purgatory.statistics()
    assert (stats.pending, stats.watched, stats.watch_keys) == (0, 0, 0)
    assert (stats.completed, stats.expired) == (2, 0)


async def test_request_expiry_at_exact_virtual_time(
    purgatory: Purgatory, autojump_clock: object
) -> None:
    await trio.sleep(1.5)  # start away from zero
    r1, r2 = MockOp(20), MockOp(200_000)
    purgatory.try_complete_else_watch(r1, ["test1"])
    purgatory.try_complete_else_watch(r2, ["test1", "test2"])
    await r1.done.wait()
    assert trio.current_time() == 1.52
    assert (r1.completed_at_ms, r1.expired_at_ms) == (1520, 1520)
    assert not r2.is_completed
    assert purgatory.pending == 1
    assert purgatory.statistics().expired == 1


async def test_expiry_times_over_overflow_wheels(autojump_clock: object) -> None:
    # tick 1 / wheel 3: most deadlines live in overflow wheels and cascade down; each op
    # still expires exactly at its deadline, and the clock task only wakes for buckets.
    purgatory = Purgatory(tick_ms=1, wheel_size=3)
    delays = [1, 2, 3, 4, 5, 8, 9, 10, 26, 27, 28, 100, 243, 244, 999, 1000, 5000]
    async with trio.open_nursery() as nursery:
        await nursery.start(purgatory.run)
        await trio.sleep(0.0007)
        ops = [MockOp(d, str(d)) for d in delays]
        for op in ops:
            purgatory.try_complete_else_watch(op, [op.name])
        await trio.sleep(6)
        assert [op.expired_at_ms for op in ops] == [d + 0 for d in delays]
        assert purgatory.pending == 0
        nursery.cancel_scope.cancel()


async def test_negative_and_zero_delays_expire_at_once(
    purgatory: Purgatory, autojump_clock: object
) -> None:
    ops = [MockOp(d) for d in (-10, -1, 0)]
    for op in ops:
        assert purgatory.try_complete_else_watch(op, ["k"]) is False
        assert op.expired_at_ms == 0  # inside the call
    assert purgatory.pending == 0


async def test_earlier_deadline_wakes_the_sleeping_clock_task(
    purgatory: Purgatory, autojump_clock: object
) -> None:
    slow, fast = MockOp(60_000), MockOp(10)
    purgatory.try_complete_else_watch(slow, ["k"])
    await trio.sleep(0.005)  # the clock task is now asleep until 60 s
    purgatory.try_complete_else_watch(fast, ["k"])
    await fast.done.wait()
    assert trio.current_time() == 0.015
    assert fast.expired_at_ms == 15
    assert not slow.is_completed


async def test_handler_style_wait_for_event_or_deadline(
    purgatory: Purgatory, autojump_clock: object
) -> None:
    # How the proxy uses it: a handler parks an op and awaits its event; a producer
    # completes it through check_and_complete.
    async def producer() -> None:
        await trio.sleep(0.25)
        held.completable = True
        assert purgatory.check_and_complete(("topic", 0)) == 1

    held = MockOp(500)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(producer)
        purgatory.try_complete_else_watch(held, [("topic", 0), ("topic", 1)])
        await held.done.wait()
    assert trio.current_time() == 0.25
    assert held.expired_at_ms is None
    assert purgatory.pending == 0
    assert purgatory.watched_ops(("topic", 0)) == 0  # list emptied and removed
    assert purgatory.watched_ops(("topic", 1)) == 1  # lingers until checked or purged


async def test_completion_and_expiry_in_the_same_tick_complete_once(
    purgatory: Purgatory, autojump_clock: object
) -> None:
    # A completer wakes exactly at the op's deadline; the clock task wakes then too. Either
    # may run first; on_complete runs once and exactly one counter moves.
    ops = [MockOp(100) for _ in range(50)]

    async def completer(op: MockOp, key: int) -> None:
        await trio.sleep(0.1)
        op.completable = True
        purgatory.check_and_complete(key)

    async with trio.open_nursery() as nursery:
        for i, op in enumerate(ops):
            purgatory.try_complete_else_watch(op, [i])
            nursery.start_soon(completer, op, i)
    assert all(op.completions == 1 for op in ops)
    assert all(op.completed_at_ms == 100 for op in ops)
    stats = purgatory.statistics()
    assert stats.completed + stats.expired == 50
    assert stats.expired == sum(op.expired_at_ms is not None for op in ops)
    assert stats.pending == 0


async def test_force_complete_after_expiry_and_expiry_after_completion(
    autojump_clock: object,
) -> None:
    purgatory = Purgatory()
    first = MockOp(10)
    purgatory.try_complete_else_watch(first, ["k"], now_ms=0)
    purgatory.advance_clock(10)
    assert first.expired_at_ms is not None
    assert first.force_complete() is False
    second = MockOp(10)
    purgatory.try_complete_else_watch(second, ["k"], now_ms=10)
    assert second.force_complete() is True
    second.run()  # a late timer firing is a no-op
    purgatory.advance_clock(100)
    assert (first.completions, second.completions) == (1, 1)
    assert second.expired_at_ms is None
    stats = purgatory.statistics()
    assert (stats.completed, stats.expired, stats.pending) == (1, 1, 0)


async def test_double_check_catches_an_event_between_check_and_watch(
    autojump_clock: object,
) -> None:
    # The first check runs, then the event fires (a produce lands and checks the key)
    # before the op is in the watcher list: that check finds nobody. Only the second
    # check, after watching, sees the data.
    purgatory = Purgatory()
    log: list[bytes] = []
    op = MockOp(1000)
    missed: list[int] = []

    def on_check(o: MockOp) -> None:
        o.completable = bool(log)
        if o.checks == 1:
            log.append(b"record")
            missed.append(purgatory.check_and_complete("p0"))

    op.on_check = on_check
    assert purgatory.try_complete_else_watch(op, ["p0"], now_ms=0) is True
    assert missed == [0]
    assert op.checks == 2
    assert op.completions == 1
    assert purgatory.pending == 0  # never entered the timer


async def test_op_completed_by_another_while_being_watched(autojump_clock: object) -> None:
    # While the op is being watched, another op's completion force-completes it: the
    # remaining keys are not watched and it never enters the timer (Kafka's early return).
    purgatory = Purgatory()
    other = MockOp(1000)
    op = MockOp(1000)
    purgatory.try_complete_else_watch(other, ["a"], now_ms=0)
    other.completable = True
    other.after_complete = lambda _: op.force_complete()
    op.on_check = lambda o: purgatory.check_and_complete("a") if o.checks == 1 else None
    assert purgatory.try_complete_else_watch(op, ["x", "y"], now_ms=0) is False
    assert op.completions == 1
    assert purgatory.pending == 0


async def test_follow_on_completions_are_queued_not_recursed(
    purgatory: Purgatory, autojump_clock: object
) -> None:
    # A completed produce on p0 triggers a check of p1 from its on_complete, which
    # completes a fetch whose on_complete checks p2: no nesting, one call, count 3.
    depth = 0
    max_depth = 0
    nested_results: list[int] = []

    def chain(next_key: str | None) -> Callable[[MockOp], None]:
        def after(_: MockOp) -> None:
            nonlocal max_depth
            max_depth = max(max_depth, depth)
            if next_key is not None:
                nested_results.append(purgatory.check_and_complete(next_key))

        return after

    ops = []
    for key, nxt in (("p0", "p1"), ("p1", "p2"), ("p2", None)):
        op = MockOp(1000, key)
        op.after_complete = chain(nxt)
        purgatory.try_complete_else_watch(op, [key])
        ops.append(op)
    for op in ops:
        op.completable = True  # the data is there; only p0 gets checked by the caller
    depth = 1
    assert purgatory.check_and_complete("p0") == 3
    assert nested_results == [0, 0]  # queued, not run inside
    assert all(op.completions == 1 for op in ops)


async def test_request_purge_by_estimate(autojump_clock: object) -> None:
    # Kafka's testRequestPurge, plus the trigger: lists are purged when the estimate of
    # completed-but-watched ops passes the interval, not when they are long.
    purgatory = Purgatory(purge_interval=3)
    ops = [MockOp(100_000, str(i)) for i in range(8)]
    for op in ops:
        purgatory.try_complete_else_watch(op, ["a", "b"], now_ms=0)
    stats = purgatory.statistics()
    assert (stats.pending, stats.watched, stats.estimated_total, stats.purges) == (8, 16, 8, 0)
    for op in ops[:3]:
        op.force_complete()
    purgatory.advance_clock(1)
    stats = purgatory.statistics()
    # estimate 8 - pending 5 = 3: not above the interval yet; completed ones linger.
    assert (stats.pending, stats.watched, stats.purges) == (5, 16, 0)
    ops[3].force_complete()
    purgatory.advance_clock(2)
    stats = purgatory.statistics()
    assert (stats.pending, stats.watched, stats.estimated_total, stats.purges) == (4, 8, 4, 1)
    # Many pending ops in long lists never trigger a purge on their own.
    more = [MockOp(100_000) for _ in range(100)]
    for op in more:
        purgatory.try_complete_else_watch(op, ["a", "b", "c"], now_ms=2)
    purgatory.advance_clock(3)
    assert purgatory.statistics().purges == 1


async def test_checking_a_key_shrinks_its_list(autojump_clock: object) -> None:
    # testRequestPurge's shape: watched drops as each key is checked.
    purgatory = Purgatory()
    r1, r2, r3 = MockOp(100_000), MockOp(100_000), MockOp(100_000)
    purgatory.try_complete_else_watch(r1, ["k1"], now_ms=0)
    purgatory.try_complete_else_watch(r2, ["k1", "k2"], now_ms=0)
    purgatory.try_complete_else_watch(r3, ["k1", "k2", "k3"], now_ms=0)
    assert (purgatory.pending, purgatory.statistics().watched) == (3, 6)
    for op in (r1, r2, r3):
        op.force_complete()
    assert (purgatory.pending, purgatory.statistics().watched) == (0, 6)
    watched_after = []
    for key in ("k1", "k2", "k3"):
        purgatory.check_and_complete(key)
        watched_after.append(purgatory.statistics().watched)
    assert watched_after == [3, 1, 0]
    assert purgatory.statistics().watch_keys == 0


async def test_run_twice_is_refused(purgatory: Purgatory, autojump_clock: object) -> None:
    with pytest.raises(RuntimeError):
        await purgatory.run()


async def test_clock_task_sleeps_until_buckets_are_due(autojump_clock: object) -> None:
    # The clock task wakes once per non-empty bucket, not per tick: count its checkpoints
    # by counting advance_clock calls.
    calls: list[int] = []

    class CountingPurgatory(Purgatory):
        def advance_clock(self, now_ms: int) -> None:
            calls.append(now_ms)
            super().advance_clock(now_ms)

    purgatory = CountingPurgatory()
    async with trio.open_nursery() as nursery:
        await nursery.start(purgatory.run)
        ops = [MockOp(d) for d in (10, 10, 10, 500)]
        cancelled = MockOp(50)
        for op in [*ops, cancelled]:
            purgatory.try_complete_else_watch(op, ["k"])
        cancelled.force_complete()  # its bucket empties: no wake-up for it
        await trio.sleep(1)
        nursery.cancel_scope.cancel()
    # start, 10 ms bucket, the 400-ms level-1 bucket cascading 500 down, then 500.
    assert calls == [0, 10, 400, 500]


async def test_one_million_ops_ninety_percent_completed_early(autojump_clock: object) -> None:
    import gc
    import tracemalloc

    purgatory = Purgatory()
    keys: list[Hashable] = [("topic", p) for p in range(100)]

    class Op(DelayedOperation):
        __slots__ = ()

        def try_complete(self) -> bool:
            return False

        def on_complete(self) -> None:
            pass

    def fill(n: int, complete_every: int) -> None:
        for i in range(n):
            op = Op(30_000)
            purgatory.try_complete_else_watch(op, (keys[i % 100], keys[(i * 7 + 3) % 100]), 0)
            if i % 10 != 0 and complete_every:
                op.force_complete()

    async with trio.open_nursery() as nursery:
        await nursery.start(purgatory.run)
        gc.collect()
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        fill(1_000_000, complete_every=1)
        gc.collect()
        held_after_million = tracemalloc.get_traced_memory()[0] - base
        tracemalloc.stop()
        stats = purgatory.statistics()
        assert stats.pending == 100_000
        assert len(purgatory.timer) == 100_000
        assert stats.completed == 900_000
        # Purges keep at most about one interval of completed ops in the lists.
        assert stats.purges >= 850
        assert 2 * 100_000 <= stats.watched <= 2 * (100_000 + DEFAULT_PURGE_INTERVAL + 1)
        # No other reference keeps completed ops alive: the live ones are the pending ones
        # plus the few completed ones still waiting in watcher lists for the next purge.
        alive = sum(isinstance(o, Op) for o in gc.get_objects())
        assert 100_000 <= alive <= 100_000 + DEFAULT_PURGE_INTERVAL + 1

        # Reference: the same purgatory structures holding only 100,000 pending ops.
        reference = Purgatory()
        purgatory_under_test, purgatory = purgatory, reference
        gc.collect()
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        fill(100_000, complete_every=0)
        gc.collect()
        held_reference = tracemalloc.get_traced_memory()[0] - base
        tracemalloc.stop()
        assert reference.pending == 100_000
        # Memory tracks the pending ops, not the million that passed through.
        assert held_after_million < 1.3 * held_reference

        purgatory = purgatory_under_test
        await trio.sleep(31)
        stats = purgatory.statistics()
        assert (stats.pending, stats.expired, stats.watched, stats.watch_keys) == (0, 100_000, 0, 0)
        nursery.cancel_scope.cancel()
