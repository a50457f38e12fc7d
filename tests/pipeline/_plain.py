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

__all__ = [
    "Log",
    "client_names",
    "connection_bytes",
    "fetch_answer",
    "jain_indexes",
    "percentile_bounds",
    "read_log",
]


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


def client_names(records: list[dict[str, Any]]) -> list[str]:
    """Each record's client as the report names it: its client id; else the client id of its
    connection's latest request that has one (the proxy's own ApiVersions answers carry
    none); else "(none)"."""
    latest: dict[int, tuple[float, str]] = {}
    for record in records:
        conn, client = record["conn"], record["client_id"]
        if client and (conn not in latest or record["ts"] >= latest[conn][0]):
            latest[conn] = (record["ts"], client)
    return [r["client_id"] or latest.get(r["conn"], (0.0, "(none)"))[1] for r in records]


def connection_bytes(records: list[dict[str, Any]], window_s: int) -> dict[int, dict[int, int]]:
    """Per window start, the bytes (request + response) each connection moved in it."""
    windows: dict[int, dict[int, int]] = collections.defaultdict(collections.Counter)
    for record in records:
        window = math.floor(record["ts"] / window_s) * window_s
        windows[window][record["conn"]] += record["request_bytes"] + record["response_bytes"]
    return dict(windows)


def jain_indexes(
    records: list[dict[str, Any]], window_s: int, least_connections: int
) -> dict[int, float | None]:
    """Jain's index over per-connection bytes per window start; None for a window with fewer
    than ``least_connections`` connections."""
    indexes: dict[int, float | None] = {}
    for window, per_connection in connection_bytes(records, window_s).items():
        values = list(per_connection.values())
        if len(values) < least_connections:
            indexes[window] = None
            continue
        indexes[window] = sum(values) ** 2 / (len(values) * sum(v * v for v in values))
    return indexes


def fetch_answer(record: dict[str, Any]) -> str:
    """How a Fetch was answered, by the rule docs/request-log.md gives, in the report's words."""
    if record["outcome"] == "error":
        return "error"
    if record["outcome"] == "expired":
        return "held to the deadline (expired)"
    if record["held_ms"] > 0:
        return "held, woken by data"
    if record["broker"] == "bootstrap":
        return "forwarded (bootstrap port)"
    return "not held"


def percentile_bounds(values: list[float], p: float, accuracy: int) -> tuple[float, float]:
    """The values percentile_approx may return for ``p``: its rank error, plus rounding."""
    ordered = sorted(values)
    n = len(ordered)
    slack = math.ceil(n / accuracy) + 1
    rank = max(0, math.ceil(p * n) - 1)
    return ordered[max(0, rank - slack)], ordered[min(n - 1, rank + slack)]
