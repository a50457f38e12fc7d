"""Synthetic request logs with the proxy's own record type, for the pipeline bench and tests.

Why: measuring the report at a day's volume (10 M lines) needs logs far larger than a test can
drive through the real proxy, and a cluster test needs a log whose every field is known. Lines
are made by ``proxy.observability.request_log.RequestRecord.to_json``, the proxy's own encoder, so
they have exactly the schema and formatting of a real log. The mix (mostly Fetch and Produce, a few
percent of group and metadata traffic, some muting, holds, expiries and top-level errors on
several brokers) is shaped like a busy proxy's, and it is seeded: one seed, one log.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

from proxy.observability.outcomes import Outcome
from proxy.observability.request_log import RequestRecord

__all__ = ["BROKERS", "START_TS", "synthetic_records", "write_log"]

#: 2026-11-20 00:00:00 UTC: the synthetic day starts here.
START_TS = 1_795_132_800.0
BROKERS = ("1", "2", "3", "bootstrap", "local")
# (api, weight, top-level error codes the API can carry in its response)
_APIS: tuple[tuple[str, int, tuple[int, ...]], ...] = (
    ("Fetch", 600, (1, 6)),
    ("Produce", 250, ()),
    ("Metadata", 40, ()),
    ("Heartbeat", 40, (25, 27)),
    ("OffsetCommit", 25, ()),
    ("ApiVersions", 15, (35,)),
    ("FindCoordinator", 10, (15,)),
    ("ListOffsets", 10, ()),
    ("JoinGroup", 5, (27, 79)),
    ("SyncGroup", 5, (27,)),
)
_CLIENTS = 200


def synthetic_records(
    count: int, *, seed: int = 18, lines_per_s: float = 120.0
) -> Iterator[RequestRecord]:
    """``count`` records, arrivals ``lines_per_s`` apart on average from :data:`START_TS`.

    120 lines/s is 10 M lines a day. About one request in 500 carries a top-level error code,
    one in 50 waited for pool memory, and most fetches are held in the purgatory (a tenth
    until they expire).
    """
    rng = random.Random(seed)
    names = [api for api, _, _ in _APIS]
    weights = [weight for _, weight, _ in _APIS]
    codes = {api: errors for api, _, errors in _APIS}
    ts = START_TS
    for _ in range(count):
        ts += rng.expovariate(lines_per_s)
        api = rng.choices(names, weights)[0]
        client = rng.randrange(_CLIENTS)
        broker = "local" if api == "ApiVersions" and rng.random() < 0.1 else rng.choice(BROKERS[:4])
        upstream_ms = 0.0 if broker == "local" else rng.lognormvariate(0.0, 0.8)
        held_ms = muted_ms = 0.0
        outcome: Outcome = "ok"
        error_code: int | None = None
        if api == "Fetch":
            error_code = 0
            if rng.random() < 0.7:
                expired = rng.random() < 0.1
                held_ms = 500.0 if expired else rng.uniform(0.0, 500.0)
                outcome = "expired" if expired else "ok"
        if rng.random() < 0.02:
            muted_ms = rng.expovariate(1 / 40.0)
        if codes[api] and rng.random() < 0.002:
            outcome, error_code = "error", rng.choice(codes[api])
        elif api == "Produce" and rng.random() < 0.0005:
            outcome = "timeout"
        yield RequestRecord(
            ts=round(ts, 6),
            api=api,
            api_version=12 if api == "Fetch" else 9,
            client_id=None if client == 0 else f"client-{client}",
            conn=client + 1,
            broker=broker,
            latency_ms=round(upstream_ms + held_ms + muted_ms + rng.uniform(0.05, 0.5), 3),
            upstream_ms=round(upstream_ms, 3),
            held_ms=round(held_ms, 3),
            muted_ms=round(muted_ms, 3),
            request_bytes=rng.randint(60, 16_384 if api == "Produce" else 400),
            response_bytes=rng.randint(40, 65_536 if api == "Fetch" else 200),
            outcome=outcome,
            error_code=error_code,
        )


def write_log(path: Path, count: int, *, seed: int = 18) -> int:
    """Write ``count`` synthetic lines to ``path``; returns its size in bytes."""
    with path.open("w", encoding="utf-8") as out:
        batch: list[str] = []
        for record in synthetic_records(count, seed=seed):
            batch.append(record.to_json())
            if len(batch) == 10_000:
                out.write("\n".join(batch) + "\n")
                batch.clear()
        if batch:
            out.write("\n".join(batch) + "\n")
    return path.stat().st_size
