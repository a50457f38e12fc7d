"""proxy/primitives/gc_policy.py, in a fresh interpreter (it changes process-wide state)."""

from __future__ import annotations

import functools
import gc
import json
import subprocess
import sys
import weakref

import trio
import trio.testing

from proxy.primitives.gc_policy import YOUNG_THRESHOLD, collect_young_regularly


def test_serving_freezes_start_up_objects_and_collects_the_young_generation_rarely() -> None:
    script = (
        "import gc, json\n"
        "default = gc.get_threshold()\n"
        "from proxy.primitives.gc_policy import tune_for_serving\n"
        "tune_for_serving()\n"
        "print(json.dumps([default, gc.get_threshold(), gc.get_freeze_count()]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    default, tuned, frozen = json.loads(done.stdout)
    assert tuned == [YOUNG_THRESHOLD, default[1], default[2]]
    assert frozen > 1000  # the interpreter's and the proxy's modules, at least


async def test_garbage_cycles_are_collected_within_the_interval_without_allocations(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """With the young threshold out of reach, a cycle left behind is still collected once the
    regular collection runs; nothing else allocates in between."""
    collected = trio.Event()

    class Node:
        pass

    threshold = gc.get_threshold()
    gc.collect()
    gc.set_threshold(10**9, threshold[1], threshold[2])
    try:
        node = Node()
        node.self = node  # type: ignore[attr-defined]
        weakref.finalize(node, collected.set)
        del node
        async with trio.open_nursery() as nursery:
            nursery.start_soon(collect_young_regularly, 1.0)
            await trio.sleep(0.9)
            assert not collected.is_set()
            await trio.sleep(0.2)
            assert collected.is_set()
            nursery.cancel_scope.cancel()
    finally:
        gc.set_threshold(*threshold)


async def test_a_costly_collection_stretches_the_wait_before_the_next(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A collection that costs 20 ms of CPU is followed by 4 s without one (0.5 % budget); a
    cheap one by the interval again; never more than the longest wait."""
    costs = iter([0.020, 0.0001, 0.5, 0.0001])
    cpu = [0.0]
    collected_at: list[float] = []

    def collect() -> None:
        collected_at.append(trio.current_time())
        cpu[0] += next(costs, 0.0001)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            functools.partial(
                collect_young_regularly, 1.0, budget=0.005, longest_s=10.0,
                collect=collect, cpu_clock=lambda: cpu[0],
            )
        )  # fmt: skip
        await trio.sleep(17.5)
        nursery.cancel_scope.cancel()
    # (the test's own allocations keep the young generation non-empty: every round collects)
    assert collected_at == [1.0, 5.0, 6.0, 16.0, 17.0]
