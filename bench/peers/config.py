"""What one run of bench.peers measures: the families, their sizes and rounds.

Why one frozen record: a saved run (``--json``) carries it, so ``--render`` rebuilds the
report of exactly that run, and the smoke test checks the harness against the same sizes the
run used.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

__all__ = ["FAMILIES", "FULL", "SMOKE", "Config"]

#: Every family, in the order a run measures them (see bench.peers).
FAMILIES = ("throughput", "latency", "memory", "fanin", "tls")


@dataclass(frozen=True)
class Config:
    """Sizes and repetitions of every family."""

    families: tuple[str, ...]
    rounds: int
    #: (record bytes, records) produced then consumed, per route.
    sizes: tuple[tuple[int, int], ...]
    #: (record bytes, records) produced one record per Produce request (acks=all).
    per_request: tuple[int, int]
    #: 1 KiB records through each fresh forwarder before its first measured cell (JIT, pools).
    warmup_records: int
    #: 1 KiB records produced straight to the three-node cluster to learn direct's rate.
    calibration_records: int
    #: Offered loads of the open-loop latency rows, as fractions of direct's rate.
    load_fractions: tuple[float, ...]
    latency_duration_s: float
    latency_warmup_s: float
    #: Idle client connections held open to price a forwarder's memory per connection.
    idle_connections: int
    #: Memory and fan-in: the pause before a forwarder is weighed, idle and then holding.
    settle_s: float
    #: Idle consumers per fan-in measurement, and their fetch.max.wait.ms values.
    fanin_ns: tuple[int, ...]
    fanin_waits_ms: tuple[int, ...]
    fanin_window_s: float
    fanin_probes: int
    fanin_rounds: int
    #: purgatory-proxy's connections.upstream_idle_timeout_ms in the fan-in (bench.fanin).
    fanin_upstream_idle_ms: int
    #: 1 KiB records produced then consumed per route and TLS mode.
    tls_records: int

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Config:
        """The inverse of :meth:`to_json` (JSON turned the tuples into lists)."""

        def tuples(value: Any) -> Any:
            return tuple(tuples(item) for item in value) if isinstance(value, list) else value

        return cls(**{key: tuples(value) for key, value in data.items()})


FULL = Config(
    families=FAMILIES,
    rounds=3,
    sizes=((100, 500_000), (1024, 200_000), (65536, 4_000)),
    per_request=(100, 40_000),
    warmup_records=20_000,
    calibration_records=100_000,
    load_fractions=(0.1, 0.5),
    latency_duration_s=10.0,
    latency_warmup_s=2.0,
    idle_connections=1_000,
    settle_s=2.0,
    fanin_ns=(1_000, 10_000),
    fanin_waits_ms=(500, 5_000),
    fanin_window_s=60.0,
    fanin_probes=5,
    fanin_rounds=1,
    fanin_upstream_idle_ms=2_000,
    tls_records=100_000,
)
#: Every family and route on tiny sizes: proves the harness runs end to end
#: (tests/integration/test_peers_smoke.py); its numbers mean nothing.
SMOKE = Config(
    families=FAMILIES,
    rounds=1,
    sizes=((100, 300), (1024, 200), (65536, 20)),
    per_request=(100, 50),
    warmup_records=0,
    calibration_records=300,
    load_fractions=(0.5,),
    latency_duration_s=1.0,
    latency_warmup_s=0.2,
    idle_connections=20,
    settle_s=0.3,
    fanin_ns=(5,),
    fanin_waits_ms=(500,),
    fanin_window_s=1.0,
    fanin_probes=1,
    fanin_rounds=1,
    fanin_upstream_idle_ms=300,
    tls_records=200,
)
