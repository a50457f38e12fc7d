"""The timing wheel and timer, clock-free (Kafka's TimerTest / TimerTaskListTest / TimingWheelTest).

Time is whatever integer the test passes; nothing sleeps.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.primitives.timer import (
    DEFAULT_TICK_MS,
    DEFAULT_WHEEL_SIZE,
    TaskCounter,
    Timer,
    TimerTask,
    TimerTaskList,
    TimingWheel,
)


class Recorder:
    """Shared clock and log of (task id, time it ran)."""

    def __init__(self) -> None:
        self.now_ms = 0
        self.fired: list[tuple[int, int]] = []


class Task(TimerTask):
    __slots__ = ("ident", "on_run", "rec")

    # type: ignore[no-untyped-def]
    def __init__(self, rec: Recorder, ident: int, delay_ms: int, on_run=None) -> None:
        super().__init__(delay_ms)
        self.rec = rec
        self.ident = ident
        self.on_run = on_run

    def run(self) -> None:
        self.rec.fired.append((self.ident, self.rec.now_ms))
        if self.on_run is not None:
            self.on_run(self)


def advance_to(timer: Timer, rec: Recorder, until_ms: int, step_ms: int = 1) -> None:
    while rec.now_ms < until_ms:
        rec.now_ms = min(rec.now_ms + step_ms, until_ms)
        timer.advance_clock(rec.now_ms)


def test_defaults_are_the_seeds() -> None:
    assert (DEFAULT_TICK_MS, DEFAULT_WHEEL_SIZE) == (1, 20)


def test_TimingWheel_worked_example() -> None:
    # The table in proxy/primitives/timer/_wheel.py: tick 1, size 3, c = 0.
    queued: list[TimerTaskList] = []
    counter = TaskCounter()
    wheel = TimingWheel(1, 3, 0, counter, queued.append)
    rec = Recorder()

    def placed(exp: int) -> int | None:
        task = Task(rec, exp, 0)
        task.expiration_ms = exp
        if not wheel.add(task):
            return None
        assert task._bucket is not None
        return task._bucket.expiration_ms

    assert placed(0) is None
    assert [placed(e) for e in (1, 2)] == [1, 2]
    assert [placed(e) for e in (3, 5, 6, 8)] == [3, 3, 6, 6]
    assert [placed(e) for e in (9, 17, 18, 26)] == [9, 9, 18, 18]
    assert wheel.levels() == 3
    assert counter.count == 10
    # Buckets are queued once per rotation: 1, 2, 3, 6, 9, 18.
    assert sorted(b.expiration_ms for b in queued) == [1, 2, 3, 6, 9, 18]
    wheel.advance_clock(3)
    assert wheel.current_time_ms == 3
    assert wheel.overflow is not None and wheel.overflow.current_time_ms == 3
    assert wheel.overflow.overflow is not None and wheel.overflow.overflow.current_time_ms == 0


def test_TimingWheel_rejects_bad_geometry() -> None:
    with pytest.raises(ValueError):
        TimingWheel(0, 20, 0, TaskCounter(), lambda b: None)
    with pytest.raises(ValueError):
        TimingWheel(1, 1, 0, TaskCounter(), lambda b: None)


def test_Timer_already_expired_tasks_run_in_add() -> None:
    rec = Recorder()
    timer = Timer(tick_ms=1, wheel_size=3)
    for delay in (-5, -1, 0):
        timer.add(Task(rec, delay, delay), rec.now_ms)
    assert rec.fired == [(-5, 0), (-1, 0), (0, 0)]
    assert len(timer) == 0
    timer.add(Task(rec, 1, 1), 0)
    assert len(timer) == 1
    assert timer.advance_clock(0) is False


def test_Timer_tick1_wheel3_every_task_fires_once_exactly_at_expiration() -> None:
    # Kafka's TimerTest.testTaskExpiration: tick 1 and wheel 3 force overflow wheels and
    # reinsertion; duplicates are added too and must still fire once.
    rec = Recorder()
    timer = Timer(tick_ms=1, wheel_size=3)
    tasks = [Task(rec, i, d) for i, d in enumerate(range(0, 500, 7))]
    for task in tasks:
        timer.add(task, 0)
    for task in tasks[1::3]:
        timer.add(task, 0)  # duplicate add: moved, not doubled
    assert timer.wheel.levels() >= 5  # 3 ** 5 = 243 < 500
    assert len(timer) == len(tasks) - 1  # delay 0 ran in add
    advance_to(timer, rec, 600)
    assert sorted(rec.fired) == [(t.ident, t.delay_ms) for t in tasks]
    assert len(timer) == 0


def test_Timer_duplicate_add_reschedules() -> None:
    rec = Recorder()
    timer = Timer(tick_ms=1, wheel_size=3)
    task = Task(rec, 1, 10)
    timer.add(task, 0)
    rec.now_ms = 5
    timer.advance_clock(5)
    timer.add(task, 5)  # the timeout restarts from 5
    assert len(timer) == 1
    advance_to(timer, rec, 30)
    assert rec.fired == [(1, 15)]


@settings(max_examples=60, deadline=None)
@given(
    tick_ms=st.sampled_from([1, 1, 2]),
    wheel_size=st.integers(2, 8),
    delays=st.lists(st.integers(-3, 3000), min_size=1, max_size=80),
    steps=st.lists(st.integers(1, 700), min_size=1, max_size=60),
    seed=st.integers(0, 2**16),
)
def test_Timer_never_early_never_more_than_a_tick_late(
    tick_ms: int, wheel_size: int, delays: list[int], steps: list[int], seed: int
) -> None:
    # The owner may advance in jumps of any size. Each task must run at the first advance
    # whose time reaches its expiration, rounded down to the tick (a bucket expires at its
    # start: with tick 1 this is exactly the expiration).
    rng = random.Random(seed)
    rec = Recorder()
    timer = Timer(tick_ms=tick_ms, wheel_size=wheel_size)
    expected: dict[int, int] = {}
    ident = 0
    for step in steps:
        before = len(rec.fired)
        for _ in range(rng.randrange(3)):
            if delays:
                delay = delays.pop()
                timer.add(Task(rec, ident, delay), rec.now_ms)
                expected[ident] = rec.now_ms + delay
                ident += 1
        # Due tasks run inside add (no bucket is due right after an advance).
        for task_ident, fired_ms in rec.fired[before:]:
            due_ms = expected[task_ident]
            assert fired_ms == rec.now_ms >= due_ms - (due_ms % tick_ms)
        before = len(rec.fired)
        rec.now_ms += step
        timer.advance_clock(rec.now_ms)
        for task_ident, fired_ms in rec.fired[before:]:
            due_ms = expected[task_ident]
            assert fired_ms >= due_ms - (due_ms % tick_ms)
            assert fired_ms - step < due_ms  # not already due at the previous advance
    rec.now_ms += 10_000
    timer.advance_clock(rec.now_ms)
    assert sorted(i for i, _ in rec.fired) == sorted(expected)
    assert len(timer) == 0


def test_Timer_cancel_is_exact_and_cancelled_tasks_never_run() -> None:
    rec = Recorder()
    timer = Timer()
    tasks = [Task(rec, i, 1 + i % 300) for i in range(3000)]
    for task in tasks:
        timer.add(task, 0)
    assert len(timer) == 3000
    for task in tasks[::2]:
        task.cancel()
        task.cancel()  # idempotent
    assert len(timer) == 1500
    assert not tasks[0].scheduled and tasks[1].scheduled
    advance_to(timer, rec, 400)
    assert sorted(i for i, _ in rec.fired) == [t.ident for t in tasks[1::2]]
    assert len(timer) == 0


def test_Timer_task_cancels_a_later_task_of_the_same_bucket() -> None:
    # Kafka's KAFKA-2226 in single-threaded form: a running task cancels another task that
    # is still waiting in the bucket being flushed; that one must not run.
    rec = Recorder()
    timer = Timer()
    victim = Task(rec, 2, 5)
    killer = Task(rec, 1, 5, on_run=lambda _: victim.cancel())
    timer.add(killer, 0)
    timer.add(victim, 0)
    advance_to(timer, rec, 10)
    assert rec.fired == [(1, 5)]
    assert len(timer) == 0


def test_Timer_task_readds_a_task_of_the_same_bucket() -> None:
    rec = Recorder()
    timer = Timer()
    moved = Task(rec, 2, 5)
    mover = Task(rec, 1, 5, on_run=lambda _: timer.add(moved, rec.now_ms))
    timer.add(mover, 0)
    timer.add(moved, 0)
    advance_to(timer, rec, 20)
    assert rec.fired == [(1, 5), (2, 10)]


def test_Timer_task_added_from_a_callback_during_a_big_jump() -> None:
    # Pitfall 16: the owner jumps from 0 to 1000 in one call. The wheel advances bucket by
    # bucket, so when the task due at 50 runs, the wheel stands at 50 while the callback
    # schedules relative to the owner's 1000; the new task must still land in the right
    # rotation and run at 1005, not at some earlier bucket's time.
    rec = Recorder()
    timer = Timer(tick_ms=1, wheel_size=20)
    follow_up = Task(rec, 5, 5)
    timer.add(Task(rec, 50, 50, on_run=lambda _: timer.add(follow_up, rec.now_ms)), 0)
    for d in (400, 999):
        timer.add(Task(rec, d, d), 0)
    rec.now_ms = 1000
    timer.advance_clock(1000)
    assert rec.fired == [(50, 1000), (400, 1000), (999, 1000)]
    assert follow_up.expiration_ms == 1005
    assert len(timer) == 1
    assert timer.next_expiration_ms() == 1005
    advance_to(timer, rec, 1100)
    assert rec.fired[-1] == (5, 1005)
    late = Task(rec, 1, 30)
    timer.add(late, 1100)
    assert timer.next_expiration_ms() == 1120  # a level-1 bucket opens at its start
    advance_to(timer, rec, 1200)
    assert rec.fired[-1] == (1, 1130)


def test_Timer_queues_buckets_not_tasks() -> None:
    rec = Recorder()
    timer = Timer()
    for i in range(100_000):
        timer.add(Task(rec, i, 1 + i % 200), 0)
    # 200 distinct ms over 20 ms and 400 ms wheels: 19 level-0 buckets + 10 level-1 ones.
    assert timer.queued_buckets() == 29
    assert len(timer) == 100_000


def test_Timer_next_expiration_skips_buckets_emptied_by_cancel() -> None:
    rec = Recorder()
    timer = Timer()
    early = Task(rec, 1, 5)
    late = Task(rec, 2, 15)
    timer.add(early, 0)
    timer.add(late, 0)
    assert timer.next_expiration_ms() == 5
    early.cancel()
    assert timer.next_expiration_ms() == 15
    # The dropped bucket is reusable: a new task for ms 5 re-queues it.
    again = Task(rec, 3, 5)
    timer.add(again, 0)
    assert timer.next_expiration_ms() == 5
    advance_to(timer, rec, 20)
    assert rec.fired == [(3, 5), (2, 15)]
    assert timer.next_expiration_ms() is None


def test_Timer_idle_timer_jumps_to_now() -> None:
    # A timer created at 0 and first used at a large time does not build overflow wheels.
    rec = Recorder()
    timer = Timer()
    timer.add(Task(rec, 1, 10), 123_456_789)
    assert timer.wheel.levels() == 1
    assert timer.next_expiration_ms() == 123_456_799


def test_TimerTaskList_move_keeps_shared_counter() -> None:
    # Kafka's TimerTaskListTest.testAll.
    rec = Recorder()
    counter = TaskCounter()
    first, second = TimerTaskList(counter), TimerTaskList(counter)
    tasks = [Task(rec, i, 10) for i in range(10)]
    for task in tasks:
        first.add(task)
    assert counter.count == 10
    for task in tasks[:4]:
        task.cancel()
        second.add(task)
    assert (len(first), len(second), counter.count) == (6, 4, 10)
    assert second.tasks() == tasks[:4]
    for task in tasks:
        task.cancel()
    assert (len(first), len(second), counter.count) == (0, 0, 0)
    assert first.set_expiration(7) is True
    assert first.set_expiration(7) is False


def test_TimerTaskList_flush_hands_over_live_tasks_in_order() -> None:
    rec = Recorder()
    counter = TaskCounter()
    bucket = TimerTaskList(counter)
    tasks = [Task(rec, i, 1) for i in range(5)]
    for task in tasks:
        bucket.add(task)
    bucket.set_expiration(3)
    seen: list[int] = []

    def reinsert(task: TimerTask) -> None:
        assert isinstance(task, Task)
        seen.append(task.ident)
        if task.ident == 1:
            tasks[3].cancel()

    bucket.flush(reinsert)
    assert seen == [0, 1, 2, 4]
    assert (len(bucket), counter.count, bucket.expiration_ms) == (0, 0, -1)


def test_Timer_cancel_touches_only_the_cancelled_task() -> None:
    # O(1) cancel without timing anything: a search through the bucket would compare the
    # task with its neighbours; a hashed delete hashes it once and compares nothing.
    calls = {"hash": 0, "eq": 0}

    class Counted(Task):
        __slots__ = ()

        def __hash__(self) -> int:
            calls["hash"] += 1
            return id(self) >> 4

        def __eq__(self, other: object) -> bool:
            calls["eq"] += 1
            return self is other

    rec = Recorder()
    timer = Timer()
    tasks = [Counted(rec, i, 7) for i in range(10_000)]  # all in one bucket
    for task in tasks:
        timer.add(task, 0)
    calls.update(hash=0, eq=0)
    tasks[5_000].cancel()
    assert calls == {"hash": 1, "eq": 0}
    assert len(timer) == 9_999
