"""MemoryPool sensors under a scripted timeline: depleted time and percent, mutes.

Depletion (KIP-72): starts at the first failed allocation, ends at the next successful
allocation or release after which no caller is still parked.
"""

from __future__ import annotations

import random

import trio
import trio.testing

from proxy.primitives.lease import Lease
from proxy.primitives.memory import MemoryPool


async def test_depleted_time_and_percent_scripted(mock_clock: trio.testing.MockClock) -> None:
    pool = MemoryPool(100, 100, rng=random.Random(0), depleted_window_s=10)
    t0 = trio.current_time()

    async def at(t: float) -> None:
        """Jump the virtual clock to t0 + t and let woken tasks run."""
        mock_clock.jump(t0 + t - trio.current_time())
        await trio.testing.wait_all_tasks_blocked()

    def sensors() -> tuple[float, float]:
        stats = pool.statistics()
        return stats.depleted_time_total_s, stats.depleted_percent

    # t=0: full but not depleted: nobody has been refused yet.
    a = pool.allocate_nowait(100)
    assert pool.out_of_memory
    assert sensors() == (0.0, 0.0)
    # t=1: first refusal starts the spell; a second refusal at t=3 does not restart it.
    await at(1)
    assert pool.try_allocate(1) is None
    await at(3)
    assert pool.try_allocate(1) is None
    assert sensors() == (2.0, 20.0)  # the ongoing spell counts up to now
    # t=4: the release ends it.
    await at(4)
    pool.release(a)
    assert sensors() == (3.0, 30.0)
    await at(6)
    assert sensors() == (3.0, 30.0)

    # t=8: two callers park for 100 bytes each while 60 + 40 are held.
    await at(8)
    a, b = pool.allocate_nowait(60), pool.allocate_nowait(40)
    got: list[Lease] = []

    async def waiter() -> None:
        got.append(await pool.allocate(100))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        nursery.start_soon(waiter)
        await at(8)
        stats = pool.statistics()
        assert (stats.muted_now, stats.mutes_total) == (2, 2)
        # t=10: releasing 40 hands them to one waiter (-> -60); the other is still muted,
        # so the pool is still depleted.
        await at(10)
        pool.release(b)
        await at(10)
        assert len(got) == 1 and pool.available_bytes == -60
        # t=12: releasing 60 brings available to 0: nothing to hand off, still depleted.
        await at(12)
        pool.release(a)
        assert pool.statistics().muted_now == 1
        # Window (2, 12]: (1, 4) overlaps by 2, the ongoing spell (8, 12] by 4.
        assert sensors() == (3.0 + 4.0, 60.0)
        # t=13: releasing the first waiter's 100 serves the second: the spell ends.
        await at(13)
        pool.release(got[0])
    assert len(got) == 2
    assert sensors() == (8.0, 60.0)  # window (3, 13]: 1 of (1, 4) and all of (8, 13)
    await at(14)
    assert sensors() == (8.0, 50.0)  # (1, 4) has left the window

    # Kafka's rule: a release ends the spell even if the pool is still over-allocated,
    # when nobody is parked waiting.
    pool.release(got[1])
    d, e = pool.allocate_nowait(50), pool.allocate_nowait(100)  # available -50
    await at(15)
    assert pool.try_allocate(1) is None
    await at(17)
    pool.release(d)
    assert pool.available_bytes == 0
    assert pool.statistics().out_of_memory
    assert sensors() == (10.0, 100.0 * (5 + 2) / 10)
    await at(20)
    assert sensors() == (10.0, 50.0)  # (8, 13) clipped to (10, 13], plus (15, 17)
    await at(40)
    assert sensors() == (10.0, 0.0)
    # A spell longer than the window reads 100%.
    assert pool.try_allocate(1) is None
    await at(55)
    assert sensors() == (25.0, 100.0)
    pool.release(e)
    assert sensors() == (25.0, 100.0)
    assert pool.available_bytes == 100


def test_sensors_with_an_injected_clock_outside_trio() -> None:
    # The clock is injectable; try_allocate and release work in plain sync code too.
    now = [1000.0]
    pool = MemoryPool(10, 10, clock=lambda: now[0], depleted_window_s=4)
    lease = pool.allocate_nowait(10)
    assert pool.try_allocate(5) is None
    now[0] += 1
    stats = pool.statistics()
    assert (stats.depleted_time_total_s, stats.depleted_percent) == (1.0, 25.0)
    now[0] += 1
    second = pool.try_allocate(1)
    assert second is None
    pool.release(lease)
    assert pool.depleted_time_total_s() == 2.0
    now[0] += 3  # window (1001, 1005]: the spell (1000, 1002) overlaps by 1
    assert pool.depleted_percent() == 25.0
    now[0] += 1
    assert pool.depleted_percent() == 0.0
    assert pool.depleted_time_total_s() == 2.0
