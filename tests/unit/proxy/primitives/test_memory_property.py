"""Property tests: many trio tasks allocating and releasing at random, and the wake orders.

Each example runs a whole trio program under MockClock (virtual time), so hundreds of
examples take seconds.
"""

from __future__ import annotations

import random
from typing import Any, cast

import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.primitives.memory import MemoryPool
from proxy.primitives.memory_sensors import MemoryPoolStatistics
from proxy.primitives.wake_order import ArrivalOrder, RandomWhenTight, Waiter

# One step of one task: (kind, size fraction, start delay, hold time, give-up time).
_step = st.tuples(
    st.sampled_from(["allocate", "try", "give_up"]),
    st.floats(0.0, 1.0),
    st.integers(0, 3),
    st.integers(0, 4),
    st.integers(0, 3),
)


@settings(max_examples=150, deadline=None)
@given(
    limit=st.integers(1, 300),
    max_alloc=st.integers(1, 200),
    tight_fraction=st.sampled_from([0.0, 0.1, 0.5]),
    seed=st.integers(0, 2**16),
    plans=st.lists(st.lists(_step, min_size=1, max_size=8), min_size=1, max_size=32),
)
def test_concurrent_random_use_never_exceeds_the_bound_and_loses_nothing(
    limit: int,
    max_alloc: int,
    tight_fraction: float,
    seed: int,
    plans: list[list[tuple[str, float, int, int, int]]],
) -> None:
    pool = MemoryPool(limit, max_alloc, tight_fraction, rng=random.Random(seed))
    bound = limit + max_alloc - 1
    held = [0]  # bytes in leases that tasks have received and not yet released
    asking: dict[int, int] = {}  # task index -> size, while inside allocate()
    totals = {"granted": 0, "released": 0, "cancelled": 0}

    def check() -> None:
        used = pool.used_bytes
        assert used <= bound
        assert pool.available_bytes == limit - used
        # Bytes handed off to a parked task that has not run yet are counted by the
        # pool before the task sees its lease; nothing else may differ.
        assert 0 <= used - held[0] <= sum(asking.values())
        if pool.statistics().muted_now:
            assert pool.out_of_memory  # parked callers exist only while out of memory

    async def worker(index: int, plan: list[tuple[str, float, int, int, int]]) -> None:
        for kind, fraction, delay_s, hold_s, give_up_s in plan:
            size = max(1, round(fraction * max_alloc))
            await trio.sleep(delay_s)
            with trio.move_on_after(give_up_s if kind == "give_up" else 1e9):
                if kind == "try":
                    lease = pool.try_allocate(size)
                    if lease is None:
                        check()
                        continue
                else:
                    asking[index] = size
                    try:
                        lease = await pool.allocate(size)
                    except trio.Cancelled:
                        totals["cancelled"] += 1
                        raise
                    finally:
                        del asking[index]
                held[0] += size
                totals["granted"] += size
                check()
                try:
                    await trio.sleep(hold_s)
                finally:
                    held[0] -= size
                    totals["released"] += size
                    lease.release()
                    check()

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            for index, plan in enumerate(plans):
                nursery.start_soon(worker, index, plan)
        final.append(pool.statistics())  # the default clock needs the trio run

    final: list[MemoryPoolStatistics] = []
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    stats = final[0]
    assert (stats.used_bytes, stats.available_bytes) == (0, limit)
    assert (stats.outstanding_leases, stats.muted_now) == (0, 0)
    assert totals["granted"] == totals["released"]
    assert held[0] == 0


@settings(max_examples=300, deadline=None)
@given(
    policy=st.sampled_from(["random_when_tight", "arrival"]),
    seed=st.integers(0, 2**16),
    ops=st.lists(
        st.tuples(st.sampled_from(["push", "push", "discard", "pop"]), st.integers(0, 1000)),
        max_size=400,
    ),
)
def test_wake_orders_match_a_model(policy: str, seed: int, ops: list[tuple[str, int]]) -> None:
    # Model: an arrival-ordered list. Pops must return a queued waiter (the oldest one
    # unless tight and random), never twice; discards of gone waiters are harmless.
    order = (
        RandomWhenTight(random.Random(seed)) if policy == "random_when_tight" else ArrivalOrder()
    )
    model: list[Waiter] = []
    gone: list[Waiter] = []
    created = 0
    for op, arg in ops:
        if op == "push":
            waiter = Waiter(cast(Any, None), created, None)
            created += 1
            order.push(waiter)
            model.append(waiter)
        elif op == "discard" and (model or gone):
            pool_ = model + gone
            waiter = pool_[arg % len(pool_)]
            order.discard(waiter)
            if waiter in model:
                model.remove(waiter)
                gone.append(waiter)
        elif op == "pop" and model:
            tight = arg % 2 == 0
            waiter = order.pop(tight)
            assert waiter in model
            if not tight or policy == "arrival":
                assert waiter is model[0]
            model.remove(waiter)
            gone.append(waiter)
        assert len(order) == len(model)
    # Drain: in non-tight mode the rest come out in arrival order.
    drained = [order.pop(False) for _ in range(len(model))]
    assert drained == model
    assert len(order) == 0
