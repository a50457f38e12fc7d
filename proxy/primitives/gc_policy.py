# Strategy: almost every container the proxy allocates per request is freed by reference
# counting the moment the request is answered, yet CPython's cyclic collector walks them all
# every 700 allocations: at 10,000 idle long-polling consumers that was most of the proxy's
# CPU (docs/history.md). So, once the proxy is configured and its long-lived objects exist:
#   - gc.freeze() moves everything alive to the permanent generation, never scanned again;
#   - the young generation is collected every 100,000 net allocations instead of 700 (cycles
#     are still collected, only less often);
#   - and at least once a second (`collect_young_regularly`), since a proxy that falls quiet
#     allocates nothing and would never collect what its last connections left in cycles; each
#     collection waits until the last one's cost is at most YOUNG_BUDGET of the time in
#     between, never more than YOUNG_LONGEST_S.
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
