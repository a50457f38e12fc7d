# Strategy: the aggregated tables hold a row only where something happened (a window with no
# Fetch has no Fetch row, an empty held-time bucket has no row). Drawn as they are, lines join
# across the gaps and step plots stretch the last bucket over the empty ones, so a quiet period
# looks busy. These pure functions turn the rows into complete series first: every window from
# the first to the last, every bucket from 0 to the largest, zero where nothing happened (or
# None where a value is undefined, e.g. the share of muted requests in a window with none),
# and they decide which APIs get their own line. No matplotlib here, so they are tested alone.
"""Complete, gap-free series for the plots, from the report's aggregated tables."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

__all__ = [
    "HIGHLIGHTED",
    "OTHER_APIS",
    "Held",
    "Throughput",
    "held",
    "per_window",
    "throughput",
    "window_starts",
]

Rows = list[dict[str, Any]]

#: The APIs drawn on their own with fixed colours; the others are summed into OTHER_APIS.
HIGHLIGHTED = ("Fetch", "Produce")
OTHER_APIS = "other APIs"


def window_starts(rows: Rows, window_s: int) -> list[int]:
    """Every window start from the first to the last in ``rows`` (empty if no rows)."""
    starts = [row["window_start"] for row in rows]
    if not starts:
        return []
    return list(range(min(starts), max(starts) + window_s, window_s))


def per_window(rows: Rows, key: str, starts: list[int], empty: float | None) -> list[float | None]:
    """``row[key]`` for each window start, ``empty`` for windows with no row."""
    values = {row["window_start"]: row[key] for row in rows}
    return [values.get(start, empty) for start in starts]


@dataclass(frozen=True)
class Throughput:
    """Requests/s per window: one series per highlighted API, one for all the others.

    ``partial``: per window, whether the log covers only part of it (the first and last
    windows, usually); their rates are over the covered part, and the plot marks them.
    """

    starts: list[int]
    series: dict[str, list[float]]
    others: list[str]
    partial: list[bool]


def throughput(rows: Rows, window_s: int) -> Throughput:
    """Zero-filled requests/s of Fetch, Produce and the other APIs summed, per window."""
    starts = window_starts(rows, window_s)
    index = {start: i for i, start in enumerate(starts)}
    apis = {row["api"] for row in rows}
    others = sorted(apis - set(HIGHLIGHTED))
    names = [api for api in HIGHLIGHTED if api in apis] + ([OTHER_APIS] if others else [])
    series = {name: [0.0] * len(starts) for name in names}
    partial = [False] * len(starts)
    for row in rows:
        name = row["api"] if row["api"] in HIGHLIGHTED else OTHER_APIS
        series[name][index[row["window_start"]]] += row["requests_per_s"]
        partial[index[row["window_start"]]] |= row["covered_s"] < window_s
    return Throughput(starts, series, others, partial)


@dataclass(frozen=True)
class Held:
    """A held-time histogram: bucket edges (ms) and, per group, one count per bucket."""

    edges: list[int]
    counts: dict[str, list[int]]


def held(rows: Rows, bucket_ms: int, key: str) -> Held:
    """Per ``row[key]`` (an API, a kind of answer), requests per held-time bucket from 0 to
    the largest, empty buckets as 0."""
    if not rows:
        return Held([], {})
    buckets = max(row["bucket_ms"] for row in rows) // bucket_ms + 1
    counts: dict[str, list[int]] = defaultdict(lambda: [0] * buckets)
    for row in rows:
        counts[row[key]][row["bucket_ms"] // bucket_ms] += row["requests"]
    edges = [i * bucket_ms for i in range(buckets + 1)]
    return Held(edges, dict(sorted(counts.items())))
