"""MemoryPool: Kafka's pool and selector cases, muting, wake order, deadlock rule, cancellation.

All timing runs on trio's MockClock; times asserted are exact virtual times.
"""

from __future__ import annotations

import random

import pytest
import trio
import trio.testing

from proxy.errors import (
    InvalidAllocation,
    InvalidRelease,
    PoolExhausted,
    PoolMisuse,
    ProxyError,
    WouldDeadlock,
)
from proxy.primitives.lease import Lease
from proxy.primitives.memory import MemoryPool
from proxy.primitives.wake_order import RandomWhenTight, Waiter


class RecordingOrder:
    """Wraps a real wake order and records each decision: (waiter task name, tight)."""

    def __init__(self, inner: RandomWhenTight) -> None:
        self.inner = inner
        self.picks: list[tuple[str, bool]] = []
        self.arrivals: list[str] = []

    def __len__(self) -> int:
        return len(self.inner)

    def push(self, waiter: Waiter) -> None:
        self.arrivals.append(waiter.task.name)
        self.inner.push(waiter)

    def discard(self, waiter: Waiter) -> None:
        self.inner.discard(waiter)

    def pop(self, tight: bool) -> Waiter:
        waiter = self.inner.pop(tight)
        self.picks.append((waiter.task.name, tight))
        return waiter


async def park(pool: MemoryPool, size: int, sink: list[Lease]) -> None:
    """Allocate (possibly parking) and keep the lease for the test to release.

    Tests start it with ``name=...``: the task name is what RecordingOrder records.
    """
    sink.append(await pool.allocate(size))


# -- construction and arguments ---------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {"limit_bytes": 0, "max_allocation_bytes": 1},
        {"limit_bytes": -2, "max_allocation_bytes": 1},
        {"limit_bytes": 10, "max_allocation_bytes": 0},
        {"limit_bytes": 10, "max_allocation_bytes": 1, "tight_fraction": 1.0},
        {"limit_bytes": 10, "max_allocation_bytes": 1, "tight_fraction": -0.1},
        {"limit_bytes": 10, "max_allocation_bytes": 1, "depleted_window_s": 0},
    ],
)
def test_MemoryPool_rejects_bad_configuration(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        MemoryPool(**kwargs)  # type: ignore[arg-type]


def test_MemoryPool_rng_and_wake_order_are_exclusive() -> None:
    with pytest.raises(ValueError):
        MemoryPool(10, 10, rng=random.Random(0), wake_order=RandomWhenTight())


@pytest.mark.parametrize("size", [0, -1, 11])
async def test_allocation_size_is_checked(size: int) -> None:
    pool = MemoryPool(100, max_allocation_bytes=10)
    with pytest.raises(InvalidAllocation):
        pool.try_allocate(size)
    with pytest.raises(InvalidAllocation):
        pool.allocate_nowait(size)
    with pytest.raises(InvalidAllocation):
        await pool.allocate(size)
    # InvalidAllocation is a typed misuse error and still a ValueError.
    with pytest.raises(ValueError):
        pool.try_allocate(size)
    assert pool.used_bytes == 0
    assert pool.statistics().outstanding_leases == 0


def test_error_tree() -> None:
    assert issubclass(InvalidAllocation, PoolMisuse)
    assert issubclass(PoolMisuse, ProxyError)
    assert issubclass(PoolExhausted, ProxyError)
    with pytest.raises(TypeError):
        PoolMisuse("abstract")


# -- GarbageCollectedMemoryPoolTest ------------------------------------------------------


async def test_allocation_bound_GarbageCollectedMemoryPoolTest() -> None:
    # Kafka's testAllocationBound: pool 21, max single allocation 10.
    pool = MemoryPool(21, max_allocation_bytes=10)
    a = pool.try_allocate(10)
    b = pool.try_allocate(10)
    c = pool.try_allocate(10)  # 1 byte available is enough: non-strict
    assert a is not None and b is not None and c is not None
    assert pool.available_bytes == -9
    assert pool.used_bytes == 30  # the bound is limit + max - 1 = 30
    assert pool.out_of_memory
    assert pool.try_allocate(1) is None
    with pytest.raises(PoolExhausted):
        pool.allocate_nowait(1)
    pool.release(a)
    assert pool.available_bytes == 1
    d = pool.try_allocate(10)
    assert d is not None
    assert pool.available_bytes == -9
    for lease in (b, c, d):
        lease.release()
    assert pool.available_bytes == 21
    assert pool.used_bytes == 0


async def test_double_release_and_foreign_lease_are_refused() -> None:
    pool, other = MemoryPool(100, 10), MemoryPool(100, 10)
    lease = pool.allocate_nowait(5)
    with pytest.raises(InvalidRelease):
        other.release(lease)
    assert other.available_bytes == 100  # the foreign release changed nothing
    pool.release(lease)
    assert lease.released
    with pytest.raises(InvalidRelease):
        pool.release(lease)
    with pytest.raises(InvalidRelease):
        lease.release()
    assert pool.available_bytes == 100
    # The context manager releases once; releasing inside it too is a double release.
    with pytest.raises(InvalidRelease), pool.allocate_nowait(5) as inner:
        inner.release()
    assert pool.available_bytes == 100
    assert pool.statistics().outstanding_leases == 0


async def test_disabled_pool_counts_nothing() -> None:
    pool = MemoryPool(-1, max_allocation_bytes=1 << 20)
    leases = [pool.allocate_nowait(1 << 20) for _ in range(100)]
    leases.append(await pool.allocate(1 << 20))
    assert pool.used_bytes == 0
    assert not pool.out_of_memory
    stats = pool.statistics()
    assert stats.outstanding_leases == 101
    assert stats.muted_now == stats.mutes_total == 0
    assert stats.depleted_percent == 0.0
    for lease in leases:
        pool.release(lease)
    with pytest.raises(InvalidRelease):  # still exactly once, even when disabled
        pool.release(leases[0])
    with pytest.raises(InvalidAllocation):  # the size cap still applies
        pool.try_allocate((1 << 20) + 1)
    assert "disabled" in repr(pool)


# -- SelectorTest.testMuteOnOOM ----------------------------------------------------------


async def test_mute_on_OOM_SelectorTest_shape(autojump_clock: trio.testing.MockClock) -> None:
    # Pool 900, two 900-byte requests: the first is read, the second waits (muted)
    # until the first is released.
    pool = MemoryPool(900, max_allocation_bytes=900)
    served: list[tuple[str, float]] = []

    async def reader(name: str, start_s: float, hold_s: float) -> None:
        await trio.sleep(start_s)
        with await pool.allocate(900):
            served.append((name, trio.current_time()))
            await trio.sleep(hold_s)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader, "first", 0, 5)
        nursery.start_soon(reader, "second", 1, 1)
        await trio.sleep(2)
        assert pool.out_of_memory
        stats = pool.statistics()
        assert (stats.muted_now, stats.mutes_total) == (1, 1)
    assert served == [("first", 0.0), ("second", 5.0)]
    assert pool.used_bytes == 0
    assert pool.statistics().muted_now == 0


# -- trio conventions -------------------------------------------------------------------


async def test_allocate_is_a_checkpoint_even_on_the_fast_path() -> None:
    pool = MemoryPool(100, 10)
    with trio.testing.assert_checkpoints():
        lease = await pool.allocate(10)
    lease.release()
    # Cancelled before the call: raises, and takes nothing although memory is free.
    with trio.CancelScope() as scope:
        scope.cancel()
        await pool.allocate(10)
        pytest.fail("allocate did not raise Cancelled")  # pragma: no cover
    assert pool.used_bytes == 0
    assert pool.statistics().outstanding_leases == 0


async def test_statistics_and_repr(autojump_clock: trio.testing.MockClock) -> None:
    pool = MemoryPool(1000, 600, rng=random.Random(0))
    held = pool.allocate_nowait(600)
    stats = pool.statistics()
    assert (stats.available_bytes, stats.used_bytes, stats.outstanding_leases) == (400, 600, 1)
    assert not stats.out_of_memory and not stats.tight
    assert "400/1000 bytes available" in repr(pool)
    assert "1 leases outstanding" in repr(pool)
    second = pool.allocate_nowait(500)  # 400 available is enough: goes to -100
    assert pool.statistics().tight and pool.statistics().out_of_memory
    pool.release(held)
    assert pool.available_bytes == 500 and not pool.statistics().tight
    pool.release(second)
    assert repr(held) == "<Lease 600 bytes, released>"


# -- hand-off and wake order ------------------------------------------------------------


async def test_release_hands_memory_to_the_parked_caller_no_barging(
    autojump_clock: trio.testing.MockClock,
) -> None:
    pool = MemoryPool(10, 10)
    holder = pool.allocate_nowait(10)
    got: list[Lease] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(park, pool, 10, got, name="waiter")
        await trio.sleep(1)
        pool.release(holder)
        # The waiter has not run yet, but its 10 bytes are already reserved for it:
        # a newcomer cannot take them.
        assert pool.available_bytes == 0
        assert pool.try_allocate(1) is None
    assert [lease.size_bytes for lease in got] == [10]
    got[0].release()
    assert pool.available_bytes == 10


async def test_wake_order_is_fifo_when_memory_is_not_tight(
    autojump_clock: trio.testing.MockClock,
) -> None:
    order = RecordingOrder(RandomWhenTight(random.Random(1)))
    pool = MemoryPool(100, 100, tight_fraction=0.10, wake_order=order)
    holder = pool.allocate_nowait(100)
    got: list[Lease] = []
    async with trio.open_nursery() as nursery:
        for i in range(5):
            nursery.start_soon(park, pool, 10, got, name=f"w{i}")
            await trio.sleep(1)  # arrival order w0..w4
        pool.release(holder)  # 100 free, then 90, 80, ..., 60: never below 10
    assert order.arrivals == [f"w{i}" for i in range(5)]
    assert order.picks == [(f"w{i}", False) for i in range(5)]
    for lease in got:
        lease.release()
    assert pool.available_bytes == 100


async def test_wake_order_is_random_while_memory_is_tight(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Every release frees 5 bytes of a 100-byte pool: below the 10% threshold, so each
    # hand-off picks uniformly among the parked callers. Across seeds, the first pick
    # lands on every arrival position (missing one has probability < 1e-8).
    first_picks: set[str] = set()
    for seed in range(200):
        order = RecordingOrder(RandomWhenTight(random.Random(seed)))
        pool = MemoryPool(100, 100, wake_order=order)
        big = pool.allocate_nowait(95)
        small = pool.allocate_nowait(5)
        got: list[Lease] = []
        async with trio.open_nursery() as nursery:
            for i in range(10):
                nursery.start_soon(park, pool, 5, got, name=f"w{i}")
            await trio.sleep(1)
            pool.release(small)  # 5 free: tight
            await trio.sleep(1)
            pool.release(big)  # 95 free: FIFO down to 10, then tight again
        assert order.picks[0][1] is True
        first_picks.add(order.picks[0][0])
        # After the 95-byte release the nine others are picked with 95, 90, ..., 55
        # bytes free: never below 10, so in arrival order.
        assert [tight for _, tight in order.picks] == [True] + [False] * 9
        first = order.picks[0][0]
        assert [name for name, _ in order.picks[1:]] == [
            name for name in order.arrivals if name != first
        ]
        for lease in got:
            lease.release()
        assert pool.available_bytes == 100
    assert first_picks == {f"w{i}" for i in range(10)}


# -- the deadlock rule ------------------------------------------------------------------


async def test_holder_may_not_wait_for_more_memory() -> None:
    pool = MemoryPool(100, 10)
    lease = pool.allocate_nowait(10)
    # Refused even though memory is free: the rule is about the caller, not the load,
    # so the bug shows on the first call.
    with pytest.raises(WouldDeadlock):
        await pool.allocate(1)
    assert pool.used_bytes == 10
    second = pool.try_allocate(1)  # non-blocking calls cannot deadlock: allowed
    assert second is not None
    second.release()
    with pytest.raises(WouldDeadlock):
        await pool.allocate(1)
    lease.release()
    with await pool.allocate(10):
        pass
    assert pool.used_bytes == 0


async def test_hand_off_lets_a_reader_read_the_next_frame(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # A reader passes each complete frame's lease to a writer task, which releases it
    # once "written upstream"; hand_off() records that the reader no longer holds it.
    pool = MemoryPool(100, 50)
    send, receive = trio.open_memory_channel[Lease](0)
    written: list[tuple[int, float]] = []

    async def writer() -> None:
        async for lease in receive:
            with lease:
                await trio.sleep(1)
                written.append((lease.size_bytes, trio.current_time()))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(writer)
        async with send:
            for size in (40, 40, 40, 40):
                lease = await pool.allocate(size)
                lease.hand_off()
                lease.hand_off()  # idempotent
                await send.send(lease)
    assert written == [(40, 1.0), (40, 2.0), (40, 3.0), (40, 4.0)]
    assert pool.used_bytes == 0


async def test_waiter_woken_with_a_lease_holds_it_for_the_rule(
    autojump_clock: trio.testing.MockClock,
) -> None:
    pool = MemoryPool(10, 10)
    blocker = pool.allocate_nowait(10)
    outcome: list[str] = []

    async def greedy() -> None:
        lease = await pool.allocate(5)  # parks, then is handed 5 bytes
        try:
            await pool.allocate(5)
        except WouldDeadlock:
            outcome.append("refused")
        lease.release()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(greedy)
        await trio.sleep(1)
        blocker.release()
    assert outcome == ["refused"]
    assert pool.used_bytes == 0


# -- cancellation -----------------------------------------------------------------------


async def test_cancelled_waiter_gets_nothing_and_leaks_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    pool = MemoryPool(100, 100, rng=random.Random(3))
    blocker = pool.allocate_nowait(100)
    got: list[Lease] = []
    cancelled: list[str] = []

    async def waiter(name: str, give_up_after_s: float | None) -> None:
        with trio.move_on_after(give_up_after_s if give_up_after_s is not None else 1e9):
            got.append(await pool.allocate(60))
            return
        cancelled.append(name)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter, "patient", None)
        nursery.start_soon(waiter, "quitter", 2.0)
        await trio.sleep(1)
        assert pool.statistics().muted_now == 2
        await trio.sleep(2)  # the quitter gave up at t=2 and left the queue
        assert cancelled == ["quitter"]
        assert pool.statistics().muted_now == 1
        assert pool.available_bytes == 0
        pool.release(blocker)
    # Only the patient waiter was served; the freed 100 bytes did not go to the quitter.
    assert [lease.size_bytes for lease in got] == [60]
    assert pool.available_bytes == 40
    got[0].release()
    stats = pool.statistics()
    assert (stats.available_bytes, stats.outstanding_leases, stats.muted_now) == (100, 0, 0)
    assert stats.mutes_total == 2


async def test_context_manager_releases_on_cancellation(
    autojump_clock: trio.testing.MockClock,
) -> None:
    pool = MemoryPool(100, 100)
    with trio.move_on_after(5):
        with await pool.allocate(70):
            assert pool.used_bytes == 70
            await trio.sleep_forever()
    assert trio.current_time() == 5.0
    assert pool.used_bytes == 0
    assert pool.statistics().outstanding_leases == 0


async def test_all_waiters_cancelled_then_release_returns_everything(
    autojump_clock: trio.testing.MockClock,
) -> None:
    pool = MemoryPool(50, 50, rng=random.Random(0))
    blocker = pool.allocate_nowait(50)
    got: list[Lease] = []
    async with trio.open_nursery() as nursery:
        for i in range(20):
            nursery.start_soon(park, pool, 10 + i, got, name=f"w{i}")
        await trio.sleep(1)
        assert pool.statistics().muted_now == 20
        nursery.cancel_scope.cancel()
    assert got == []
    assert pool.statistics().muted_now == 0
    pool.release(blocker)
    assert pool.available_bytes == 50
    assert pool.statistics().outstanding_leases == 0


# -- no starvation ----------------------------------------------------------------------


async def test_every_one_of_K_contending_connections_is_served(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # K=40 connections each want 10-30 KiB for 5-50 ms, back to back, from a pool that
    # holds about 6 of them: sustained pressure. Every connection is served repeatedly.
    k = 40
    pool = MemoryPool(128 * 1024, 32 * 1024, rng=random.Random(7))
    served = [0] * k
    rng = random.Random(11)
    plans = [
        [(rng.randint(10, 30) * 1024, rng.randint(5, 50) / 1000) for _ in range(1000)]
        for _ in range(k)
    ]

    async def connection(i: int) -> None:
        for size, service_s in plans[i]:
            with await pool.allocate(size):
                served[i] += 1
                await trio.sleep(service_s)

    with trio.move_on_after(60):
        async with trio.open_nursery() as nursery:
            for i in range(k):
                nursery.start_soon(connection, i)
    assert pool.statistics().mutes_total > 1000  # the pool really was contended
    assert min(served) >= 50
    assert pool.used_bytes == 0


async def test_large_request_is_not_starved_by_small_ones(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Ten connections keep 10-byte requests flowing through a 100-byte pool, so it is
    # never empty of small users. A strict pool (needs `available >= size`) would never
    # find 100 free bytes for the big request; this one serves it.
    pool = MemoryPool(100, 100, rng=random.Random(5))
    big_served_at: list[float] = []

    async def small_stream() -> None:
        while True:
            with await pool.allocate(10):
                await trio.sleep(1)

    async def big() -> None:
        await trio.sleep(0.5)
        with await pool.allocate(100):
            big_served_at.append(trio.current_time())
            assert pool.available_bytes < 0  # over-allocated, within the bound
            assert pool.used_bytes <= 100 + 100 - 1

    # Bounded in virtual time, so starvation fails the test instead of hanging it.
    with trio.fail_after(600):
        async with trio.open_nursery() as nursery:
            for _ in range(11):
                nursery.start_soon(small_stream)
            await big()
            nursery.cancel_scope.cancel()
    assert len(big_served_at) == 1
    assert big_served_at[0] < 60
    assert pool.used_bytes == 0
