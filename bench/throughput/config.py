# Strategy: one frozen Config is what a run measures: the throughput cells (record size x
# count, and the one-record-per-request cell), the rounds, the offered loads of the latency
# phase and the routes. FULL, QUICK and SMOKE are the command's sizes; baseline_config is the
# A/B run against another checkout's proxy, whose routes name both trees.
"""What a throughput run measures: its cells, rounds, loads and routes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bench.throughput.routes import BASELINE_PREFIX, ROUTES

__all__ = ["FULL", "QUICK", "ROOT", "SMOKE", "Config", "baseline_config"]

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Config:
    """What one run measures."""

    #: (record bytes, records) for the throughput phase.
    sizes: tuple[tuple[int, int], ...]
    rounds: int
    #: Offered loads as fractions of the direct 1 KiB produce rate.
    load_fractions: tuple[float, ...]
    latency_duration_s: float
    latency_warmup_s: float
    #: (record bytes, records) produced one record per Produce request: the per-request path.
    per_request: tuple[int, int] | None
    #: Used when the run measures no 1 KiB direct produce rate to take fractions of.
    fallback_rate: float = 1000.0
    routes: tuple[str, ...] = ROUTES


FULL = Config(
    sizes=((100, 500_000), (1024, 200_000), (65536, 4_000)),
    per_request=(100, 40_000),
    rounds=3,
    # 5 % is added below the 10/50/80: at 50 % and above the open-loop client
    # (producer, delivery callbacks and the timing consumer share one GIL) plus the broker
    # already saturate the 2 cores on the direct route, so those points compare queues.
    load_fractions=(0.05, 0.1, 0.5, 0.8),
    latency_duration_s=5.0,
    latency_warmup_s=1.0,
)
QUICK = Config(
    sizes=((100, 50_000), (1024, 20_000), (65536, 400)),
    per_request=(100, 5_000),
    rounds=2,
    load_fractions=(0.1, 0.5, 0.8),
    latency_duration_s=2.0,
    latency_warmup_s=0.5,
)
#: Every route and phase on tiny sizes, in about a minute: proves the harness still runs end
#: to end (tests/integration/test_throughput_smoke.py runs it); its numbers mean nothing.
SMOKE = Config(
    sizes=((100, 300), (1024, 200)),
    per_request=(100, 50),
    rounds=1,
    load_fractions=(0.5,),
    latency_duration_s=1.0,
    latency_warmup_s=0.2,
)


def baseline_config(root: str, rounds: int = 3) -> Config:
    """Side by side with the proxy of another source tree: the 1 KiB cells and the
    one-record-per-request cell, routes interleaved, no latency phase (the request path's
    ratios)."""
    return Config(
        sizes=((1024, 100_000),),
        # 100,000 requests: about 7 s per cell. At 20,000 (1.3 s) one tree's rounds spread by
        # 40 % and three rounds showed a difference that longer cells did not reproduce.
        per_request=(100, 100_000),
        rounds=rounds,
        load_fractions=(),
        latency_duration_s=0.0,
        latency_warmup_s=0.0,
        # This tree runs through the same launcher as the baseline (`python -P`), so the two
        # proxies differ only in their code, not in how they were started.
        routes=("direct", BASELINE_PREFIX + str(ROOT), BASELINE_PREFIX + root),
    )
