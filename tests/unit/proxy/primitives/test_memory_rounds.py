"""RandomWhenTight's rounds (issue 29): while memory is tight, a connection that was given
memory in the round being served waits for the next round, so nobody is served twice while
another waits for its first turn; within a round the order is random."""

from __future__ import annotations

import random

import pytest
import trio
import trio.testing

from proxy.primitives.lease import Lease
from proxy.primitives.memory import MemoryPool
from proxy.primitives.wake_order import Turn


@pytest.mark.parametrize("seed", range(20))
async def test_nobody_is_served_twice_while_another_waits_for_its_turn(
    seed: int, autojump_clock: trio.testing.MockClock
) -> None:
    """As in the proxy: a connection given memory passes it on (its request goes to the
    broker, which frees it later) and at once asks for more. Memory comes back one request at
    a time: each must go to a connection not yet served in the round."""
    pool = MemoryPool(100, 100, rng=random.Random(seed))
    # Others hold most of the pool, so what comes back leaves it tight (below 10 %); the
    # blocker holds the rest: everyone parks.
    others, blocker = pool.try_allocate(91), pool.try_allocate(9)
    assert others is not None and blocker is not None
    at_broker = trio.open_memory_channel[Lease](10)
    served: list[str] = []

    async def connection(name: str, requests: int) -> None:
        turn = Turn()
        for _ in range(requests):
            lease = await pool.allocate(9, turn)  # all that is free: one grant at a time
            lease.hand_off()
            served.append(name)
            await at_broker[0].send(lease)

    async def broker() -> None:
        async for lease in at_broker[1]:
            await trio.sleep(1)
            lease.release()  # one answer a second: its memory goes to a waiting connection

    async with trio.open_nursery() as nursery:
        nursery.start_soon(broker)
        nursery.start_soon(connection, "a", 3)
        nursery.start_soon(connection, "b", 2)
        nursery.start_soon(connection, "c", 1)
        await trio.testing.wait_all_tasks_blocked()
        blocker.release()
        while len(served) < 6:
            await trio.sleep(1)
        nursery.cancel_scope.cancel()
    assert sorted(served[:3]) == ["a", "b", "c"]  # the first round: everyone once
    assert sorted(served[3:5]) == ["a", "b"]  # the second: whoever still asks, once
    assert served[5:] == ["a"]


async def test_the_order_within_a_round_is_random(autojump_clock: trio.testing.MockClock) -> None:
    firsts = set()
    for seed in range(20):
        pool = MemoryPool(10, 10, rng=random.Random(seed))
        blocker = pool.try_allocate(10)
        assert blocker is not None
        served: list[int] = []

        async def connection(index: int, pool: MemoryPool = pool, into: list[int] = served) -> None:
            with await pool.allocate(10, Turn()):
                into.append(index)
                await trio.sleep(1)

        async with trio.open_nursery() as nursery:
            for index in range(5):
                nursery.start_soon(connection, index)
            await trio.testing.wait_all_tasks_blocked()
            blocker.release()
        firsts.add(served[0])
    assert len(firsts) > 1
