"""Medians over rounds, and ratios to the same round's direct, from bench.peers's rows.

Why per round: the machine drifts between rounds (other work, the broker's log, a JVM's
collector), and a forwarder measured minutes after direct in the same round is compared with
that direct, not with another round's; the median over rounds then drops one disturbed round.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any

from bench.peers.load import Row

__all__ = ["added", "by_round", "matching", "median", "ratio", "why_not"]


def matching(rows: Sequence[Row], **match: Any) -> list[Row]:
    return [row for row in rows if all(row.get(key) == value for key, value in match.items())]


def by_round(rows: Sequence[Row], key: str, **match: Any) -> dict[int, float]:
    """Round -> the value of ``key`` in the matching row that measured it (no error)."""
    return {
        row["round"]: float(row[key])
        for row in matching(rows, **match)
        if row.get("error") is None and row.get(key) is not None
    }


def median(rows: Sequence[Row], key: str, **match: Any) -> float | None:
    values = list(by_round(rows, key, **match).values())
    return statistics.median(values) if values else None


def _paired(
    rows: Sequence[Row],
    key: str,
    route: str,
    combine: Callable[[float, float], float],
    **match: Any,
) -> float | None:
    mine = by_round(rows, key, route=route, **match)
    direct = by_round(rows, key, route="direct", **match)
    values = [combine(mine[r], direct[r]) for r in mine if r in direct]
    return statistics.median(values) if values else None


def ratio(rows: Sequence[Row], key: str, route: str, **match: Any) -> float | None:
    """Median over rounds of ``route``'s value / direct's value in the same round."""
    return _paired(rows, key, route, lambda a, b: a / b if b else float("nan"), **match)


def added(rows: Sequence[Row], key: str, route: str, **match: Any) -> float | None:
    """Median over rounds of ``route``'s value - direct's value in the same round."""
    return _paired(rows, key, route, lambda a, b: a - b, **match)


def why_not(rows: Sequence[Row], route: str, **match: Any) -> str | None:
    """The error of ``route``'s rows when none of them measured anything, else None."""
    # A route that never ran has only its error rows, without the cell's keys.
    mine = matching(rows, route=route, **match) or matching(rows, route=route)
    if mine and all(row.get("error") for row in mine):
        return str(mine[0]["error"])
    return None
