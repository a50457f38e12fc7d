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
#     holds lives a little longer, bounded by those 100,000 allocations' worth of objects.
# Applied by the command line only (`purgatory-proxy run`); tests and library users keep the
# interpreter's defaults.
"""The proxy process's garbage-collector policy: freeze start-up objects, collect rarely."""

from __future__ import annotations

import gc

__all__ = ["YOUNG_THRESHOLD", "tune_for_serving"]

#: Net container allocations between young-generation collections (CPython's default: 700).
YOUNG_THRESHOLD = 100_000


def tune_for_serving() -> None:
    """Freeze what exists now and collect the young generation rarely (see the header)."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, older, oldest)
