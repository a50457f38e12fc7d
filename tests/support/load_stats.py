# Strategy: the two summaries the reliability verdicts use, written out so their definitions
# are in one place: Jain's fairness index (Jain, Chiu and Hawe, DEC-TR-301, 1984) and the
# nearest-rank percentile (no interpolation: a p99 is a latency some request really had).
"""Jain's fairness index and nearest-rank percentiles."""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["jain_index", "percentile"]


def jain_index(shares: Sequence[float]) -> float:
    """(sum x)^2 / (n * sum x^2): 1.0 when all shares are equal, 1/n when one has everything.

    A share of zero counts (a starved connection drags the index down); no shares at all, or
    all zero, is 0.0, so an idle run cannot pass as fair.
    """
    total = sum(shares)
    squares = sum(x * x for x in shares)
    if not shares or squares == 0:
        return 0.0
    return total * total / (len(shares) * squares)


def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank ``fraction`` percentile (0 < fraction <= 1) of ``values``."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]
