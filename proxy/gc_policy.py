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
#     at rest without it, 3.7 MiB with it. A young collection costs in proportion to the young
#     objects, at most those 100,000: a few milliseconds a second under load, none at rest.
# Applied by the command line only (`purgatory-proxy run`); tests and library users keep the
# interpreter's defaults.
"""The proxy process's garbage-collector policy: freeze start-up objects, collect rarely."""

from __future__ import annotations

import gc

import trio

__all__ = ["YOUNG_INTERVAL_S", "YOUNG_THRESHOLD", "collect_young_regularly", "tune_for_serving"]

#: Net container allocations between young-generation collections (CPython's default: 700).
YOUNG_THRESHOLD = 100_000
#: Seconds between young-generation collections at the least (see the header).
YOUNG_INTERVAL_S = 1.0


def tune_for_serving() -> None:
    """Freeze what exists now and collect the young generation rarely (see the header)."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, older, oldest)


async def collect_young_regularly(interval_s: float = YOUNG_INTERVAL_S) -> None:
    """Collect the young generation every ``interval_s`` when it holds anything, so garbage
    cycles do not outlive a burst of connections by more than that (see the header). Runs
    until cancelled; start it beside the server."""
    while True:
        await trio.sleep(interval_s)
        if gc.get_count()[0]:
            gc.collect(0)
