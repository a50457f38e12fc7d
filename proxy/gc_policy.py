# Strategy: CPython's cyclic garbage collector starts a young-generation collection every 700
# net container allocations, and a proxy allocates containers for every request (slots,
# records, decoded messages, trio's own bookkeeping). Almost all of them are freed by reference
# counting the moment a request is answered; the collector finds nothing in them, but walks them
# anyway. Measured at 10,000 idle long-polling consumers (bench.fanin, py-spy --native): 62 % of
# the proxy's samples were in gc_collect_main, and raising the young threshold to 100,000 took
# the proxy from 2,952 to 6,624 answers/s at the same CPU.
#
# So, once the proxy is configured and its long-lived objects exist (codec tables, the config,
# imported modules):
#   - gc.freeze() moves everything alive to the permanent generation, never scanned again;
#   - the young generation is collected every 100,000 net allocations instead of 700, the older
#     ones at their usual ratios. Cycles are still collected, only less often: what a cycle
#     holds lives a little longer, bounded by those 100,000 allocations' worth of objects;
#   - and at least once a second (`collect_young_regularly`): a proxy that falls quiet makes no
#     allocations, so nothing would trigger the collection of what its last connections left
#     in cycles (trio's tasks, cancel scopes and exceptions make some for every connection).
#     The 20,000-connection storm (tests/reliability, make soak) left the proxy 17 MiB larger
#     at rest without it, 3.7 MiB with it.
#   - that regular collection keeps within a budget of the process's time: a young collection
#     walks every object made since the last one that is still alive, and under load that is
#     every connection's suspended coroutine chain (10 coroutines, locals, trio's waiters: ~45
#     objects per connection, measured with gc.get_objects(0) at 1,000 idle long-pollers). Each
#     took ~20 ms there; once a second that was 8 % of the proxy's CPU, ~10 µs per idle cycle.
#     So the next collection waits until the last one's cost is at most YOUNG_BUDGET of the
#     time in between (20 ms -> 4 s), never more than YOUNG_LONGEST_S; at rest a collection
#     costs microseconds and the interval is back to one second.
# Applied by the command line only (`purgatory-proxy run`); tests and library users keep the
# interpreter's defaults.
"""The proxy process's garbage-collector policy: freeze start-up objects, collect rarely."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

import trio

__all__ = [
    "YOUNG_BUDGET",
    "YOUNG_INTERVAL_S",
    "YOUNG_LONGEST_S",
    "YOUNG_THRESHOLD",
    "collect_young_regularly",
    "tune_for_serving",
]

#: Net container allocations between young-generation collections (CPython's default: 700).
YOUNG_THRESHOLD = 100_000
#: Seconds between regular young-generation collections at the least (see the header).
YOUNG_INTERVAL_S = 1.0
#: The share of the process's time regular young collections may take (see the header).
YOUNG_BUDGET = 0.005
#: Seconds between regular young-generation collections at the most, however costly.
YOUNG_LONGEST_S = 10.0


def tune_for_serving() -> None:
    """Freeze what exists now and collect the young generation rarely (see the header)."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, older, oldest)


async def collect_young_regularly(
    interval_s: float = YOUNG_INTERVAL_S,
    *,
    budget: float = YOUNG_BUDGET,
    longest_s: float = YOUNG_LONGEST_S,
    collect: Callable[[], object] = lambda: gc.collect(0),
    cpu_clock: Callable[[], float] = time.process_time,
) -> None:
    """Collect the young generation every ``interval_s`` when it holds anything, so garbage
    cycles do not outlive a burst of connections by much; a costly collection stretches the
    wait before the next one to keep within ``budget`` (see the header). Runs until
    cancelled; start it beside the server. ``collect`` and ``cpu_clock`` are for tests."""
    wait_s = interval_s
    while True:
        await trio.sleep(wait_s)
        if gc.get_count()[0]:
            started = cpu_clock()
            collect()
            spent_s = cpu_clock() - started
            wait_s = min(max(interval_s, spent_s / budget), longest_s)
