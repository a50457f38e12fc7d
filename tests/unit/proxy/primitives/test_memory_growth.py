"""The pool's honest growth (issue 29): leases that grow as a frame's bytes arrive, the
overdraft that keeps half-read frames from waiting for each other, and KIP-72's bound."""

from __future__ import annotations

import random

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.errors import InvalidAllocation
from proxy.primitives.lease import Lease
from proxy.primitives.memory import MemoryPool


def test_growth_takes_memory_while_any_is_available() -> None:
    pool = MemoryPool(21, 10)
    lease = pool.try_allocate(4)
    assert lease is not None
    assert lease.try_grow(4)
    assert (lease.size_bytes, pool.available_bytes) == (8, 13)
    lease.release()
    assert pool.available_bytes == 21


async def test_growth_fails_without_memory_and_past_the_largest_allocation() -> None:
    pool = MemoryPool(10, 10)
    whole = pool.try_allocate(10)
    assert whole is not None
    with pytest.raises(InvalidAllocation):
        whole.try_grow(1)  # 11 > max_allocation_bytes
    whole.shrink_to(6)
    assert pool.available_bytes == 4
    other = pool.try_allocate(6)
    assert other is not None and pool.available_bytes == -2
    assert not whole.try_grow(1)
    assert pool.out_of_memory
    for lease in (whole, other):
        lease.release()
    assert pool.available_bytes == 10


async def test_the_worked_example_of_the_module_header() -> None:
    pool = MemoryPool(21, 10)
    g, h = pool.try_allocate(4), pool.try_allocate(4)
    assert g is not None and h is not None
    assert g.try_grow(4) and h.try_grow(4)
    assert pool.available_bytes == 5
    await g.grow(2)
    assert pool.available_bytes == 3
    c = pool.try_allocate(10)
    assert c is not None and pool.available_bytes == -7
    await h.grow(2)  # out of memory, but h takes the overdraft: -9 >= 1 - 10
    assert (h.size_bytes, pool.available_bytes) == (10, -9)
    g.release()
    assert pool.available_bytes == 1
    for lease in (h, c):
        lease.release()
    assert pool.available_bytes == 21


async def test_half_read_frames_never_wait_for_each_other_for_ever(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Three frames of 10 in a pool of 21: each gets 7 in, then all need more with the pool
    out of memory. Without the overdraft each would wait for memory only the others can free;
    with it one completes, releases, and the others follow."""
    pool = MemoryPool(21, 10)
    done: list[int] = []

    async def frame(index: int) -> None:
        lease = await pool.allocate(7)
        await trio.sleep(1)  # every frame is 7 bytes in before any grows
        while lease.size_bytes < 10:
            if not lease.try_grow(1):
                await lease.grow(10 - lease.size_bytes)
            await trio.sleep(1)
        done.append(index)
        await trio.sleep(1)
        lease.release()

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            for index in range(3):
                nursery.start_soon(frame, index)
    assert sorted(done) == [0, 1, 2]
    assert pool.available_bytes == 21
    assert pool.statistics().muted_now == 0


async def test_parked_growth_comes_before_parked_allocations(
    autojump_clock: trio.testing.MockClock,
) -> None:
    pool = MemoryPool(10, 10)
    a, b = pool.try_allocate(2), pool.try_allocate(2)
    filler = pool.try_allocate(10)
    assert a is not None and b is not None and filler is not None
    assert pool.available_bytes == -4
    order: list[str] = []

    async def grow(name: str, lease: Lease, size_bytes: int, hold_s: float) -> None:
        await lease.grow(size_bytes)
        order.append(name)
        await trio.sleep(hold_s)
        lease.release()

    async def allocate() -> None:
        with await pool.allocate(5):
            order.append("allocated")

    async with trio.open_nursery() as nursery:
        # Neither growth fits the overdraft (-4 - 6 < 1 - 10): both park, and the allocation
        # behind them.
        nursery.start_soon(grow, "a", a, 6, 1)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(grow, "b", b, 6, 0)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(allocate)
        await trio.testing.wait_all_tasks_blocked()
        assert pool.statistics().muted_now == 3
        filler.release()  # 6 free: a's growth, then b's in the overdraft (0 - 6 >= -9)
    assert sorted(order[:2]) == ["a", "b"] and order[2:] == ["allocated"]
    assert pool.available_bytes == 10


async def test_growth_cancelled_while_parked_keeps_the_lease(
    autojump_clock: trio.testing.MockClock,
) -> None:
    pool = MemoryPool(10, 10)
    mine, filler = pool.try_allocate(2), pool.try_allocate(10)
    assert mine is not None and filler is not None
    with trio.move_on_after(1):
        await mine.grow(8)  # -2 - 8 < 1 - 10: not even the overdraft fits; it parks
    assert mine.size_bytes == 2
    assert pool.statistics().muted_now == 0
    filler.release()
    mine.release()
    assert pool.available_bytes == 10


def test_shrinking_returns_memory_to_parked_callers() -> None:
    async def main() -> None:
        pool = MemoryPool(10, 10)
        lease = pool.try_allocate(10)
        assert lease is not None
        got = []

        async def wait() -> None:
            got.append(await pool.allocate(4))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait)
            await trio.testing.wait_all_tasks_blocked()
            assert pool.statistics().muted_now == 1
            lease.shrink_to(3)  # 7 free: the waiter gets its 4
        assert pool.available_bytes == 3
        got[0].release()
        lease.release()
        assert pool.available_bytes == 10

    trio.run(main)


# One task's frame: (size fraction, first piece fraction, pieces, hold time, delay).
_frame = st.tuples(
    st.floats(0.0, 1.0),
    st.floats(0.0, 1.0),
    st.integers(1, 6),
    st.integers(0, 3),
    st.integers(0, 3),
)


@settings(max_examples=150, deadline=None)
@given(
    limit=st.integers(1, 300),
    max_alloc=st.integers(1, 200),
    seed=st.integers(0, 2**16),
    frames=st.lists(st.lists(_frame, min_size=1, max_size=5), min_size=1, max_size=24),
)
def test_growing_frames_keep_kip72s_bound_and_all_complete(
    limit: int, max_alloc: int, seed: int, frames: list[list[tuple[float, float, int, int, int]]]
) -> None:
    """Tasks read frames as the proxy does (a first piece, then growth piece by piece, and
    all the rest when growth has to wait), with the pool at any size: every frame completes
    (no deadlock) and the outstanding bytes never exceed limit + max_allocation_bytes - 1."""
    pool = MemoryPool(limit, max_alloc, rng=random.Random(seed))
    bound = limit + max_alloc - 1
    completed = [0]

    def check() -> None:
        assert pool.used_bytes <= bound

    async def reader(plan: list[tuple[float, float, int, int, int]]) -> None:
        for size_fraction, first_fraction, pieces, hold_s, delay_s in plan:
            await trio.sleep(delay_s)
            size = max(1, round(size_fraction * max_alloc))
            first = max(1, min(size, round(first_fraction * size)))
            lease = await pool.allocate(first)
            check()
            rest = size - first
            for piece in range(pieces):
                step = rest // (pieces - piece)
                if step and not lease.try_grow(step):
                    # The protocol (proxy/primitives/framed.py): a growth that has to wait asks for
                    # all the frame still needs, so the overdraft can complete it.
                    await lease.grow(rest)
                    step = rest
                rest -= step
                check()
                await trio.sleep(0)
            assert lease.size_bytes == size
            await trio.sleep(hold_s)
            lease.release()
            completed[0] += 1

    async def main() -> None:
        with trio.fail_after(10_000):
            async with trio.open_nursery() as nursery:
                for plan in frames:
                    nursery.start_soon(reader, plan)
        assert pool.statistics().outstanding_leases == 0

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert completed[0] == sum(len(plan) for plan in frames)
    assert pool.available_bytes == limit
