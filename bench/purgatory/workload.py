# Strategy: the purgatory redesign's benchmark (Kafka's TestPurgatoryPerformance) fixes the
# workload: each request waits on 3 keys drawn once from 100, carries a 100-byte payload and times
# out after 200 ms; arrivals are exponential at the target rate and completion latencies log-normal,
# given by their p50 and p75. Both implementations run exactly this workload (same seed).
"""The purgatory benchmark's workload: scenarios, rates, arrivals and completion latencies."""

from __future__ import annotations

import math
from collections.abc import Iterator

__all__ = [
    "IMPLS",
    "KEYS_PER_REQUEST",
    "KEY_SPACE",
    "PAYLOAD_BYTES",
    "RATES",
    "SATURATED",
    "SCENARIOS",
    "TIMEOUT_MS",
    "samples",
]

TIMEOUT_MS = 200
PAYLOAD_BYTES = 100
KEY_SPACE = 100  # TestPurgatoryPerformance defaults: 3 keys drawn once from 100
KEYS_PER_REQUEST = 3

SCENARIOS = {
    # name: (p50 ms, p75 ms) of the log-normal completion latency
    "low-timeout": (20.0, 60.0),
    "high-timeout": (200.0, 400.0),
}
IMPLS = ("wheel", "baseline")
RATES = (
    2_500,
    5_000,
    10_000,
    20_000,
    40_000,
    60_000,
    80_000,
    100_000,
    120_000,
    150_000,
    200_000,
    250_000,
    300_000,
)
SATURATED = 0.95


def samples(rate: int, p50: float, p75: float, seed: int) -> Iterator[tuple[float, float]]:
    """(arrival ms, latency ms) pairs, drawn in chunks to keep memory flat."""
    import numpy as np

    rng = np.random.default_rng(seed)
    sigma = (math.log(p75) - math.log(p50)) / 0.674490
    arrival = 0.0
    while True:
        gaps = rng.exponential(1000.0 / rate, 8192)
        cumulative = arrival + np.cumsum(gaps)
        arrival = float(cumulative[-1])
        # Whole milliseconds, the residue carried over (as TestPurgatoryPerformance does):
        # requests arrive in per-ms batches and the generator sleeps between them.
        arrivals = np.floor(cumulative).tolist()
        latencies = np.floor(rng.lognormal(math.log(p50), sigma, 8192)).tolist()
        yield from zip(arrivals, latencies, strict=True)
