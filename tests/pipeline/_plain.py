"""What the report must say about a request log, computed in plain Python from the same lines.

Why: every number the Spark report prints is checked against an independent computation that
shares no code with it (json.loads, Counter, sorted), so a wrong aggregation, a lost partition
or a misread field shows up as a mismatch rather than being compared with itself.
"""

from __future__ import annotations

import collections
import json
import math
from pathlib import Path
from typing import Any

__all__ = ["Log", "jain_indexes", "percentile_bounds", "read_log"]


class Log:
    """The well-formed records of some request-log files, and how many lines were not."""

    def __init__(self, records: list[dict[str, Any]], malformed: int) -> None:
        self.records = records
        self.malformed = malformed

    def count(self, field: str) -> dict[Any, int]:
        return dict(collections.Counter(record[field] for record in self.records))

    def errors(self, field: str) -> dict[Any, int]:
        """Requests with outcome ``error``, by ``field``."""
        return dict(collections.Counter(r[field] for r in self.records if r["outcome"] == "error"))

    def error_codes(self) -> dict[tuple[int, str], int]:
        """Requests per (non-zero top-level error code, API)."""
        return dict(
            collections.Counter(
                (r["error_code"], r["api"]) for r in self.records if r["error_code"]
            )
        )


def read_log(paths: list[Path]) -> Log:
    """Parse ``paths`` line by line; a line that is not a JSON object with ts and api is
    malformed (blank lines are not lines, as for Spark's JSON reader)."""
    records, malformed = [], 0
    for path in paths:
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                malformed += 1
                continue
            if not isinstance(record, dict) or record.get("ts") is None or not record.get("api"):
                malformed += 1
                continue
            records.append(record)
    return Log(records, malformed)


def jain_indexes(records: list[dict[str, Any]], window_s: int, no_client: str) -> list[float]:
    """Jain's index over per-client bytes, one per window that has requests."""
    windows: dict[int, dict[str, float]] = collections.defaultdict(collections.Counter)
    for record in records:
        window = math.floor(record["ts"] / window_s) * window_s
        moved = record["request_bytes"] + record["response_bytes"]
        windows[window][record["client_id"] or no_client] += moved
    indexes = []
    for per_client in windows.values():
        values = list(per_client.values())
        squares = sum(v * v for v in values)
        indexes.append(sum(values) ** 2 / (len(values) * squares) if squares else 1.0)
    return indexes


def percentile_bounds(values: list[float], p: float, accuracy: int) -> tuple[float, float]:
    """The values percentile_approx may return for ``p``: its rank error, plus rounding."""
    ordered = sorted(values)
    n = len(ordered)
    slack = math.ceil(n / accuracy) + 1
    rank = max(0, math.ceil(p * n) - 1)
    return ordered[max(0, rank - slack)], ordered[min(n - 1, rank + slack)]
