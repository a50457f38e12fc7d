"""The idle cycle's proxy route: bench.fanin's proxy measurement at N, as CPU µs per answer.

Why a module of its own: the A/B run (bench/idle_cycle/ab.py) calls it by name in a child
process whose code is another checkout, so it must import without the command line.
"""

from __future__ import annotations

from bench.fanin.config import Config
from bench.fanin.runner import run as run_fanin

__all__ = ["proxy_us"]


def proxy_us(n: int, seconds: float, broker: str) -> tuple[float, float]:
    """The proxy's CPU µs per answer and its answers/s, from one fan-in window."""
    config = Config(ns=(n,), seconds=seconds, probes=1, settle_s=2.0, routes=("proxy",),
                    broker=broker)  # fmt: skip
    result = run_fanin(config, log=False)
    m = result.get("proxy", n)
    if m is None or not m.answers_per_s:
        raise SystemExit(f"idle_cycle: the proxy route measured nothing: {result.skipped}")
    return m.cpu_percent.get("proxy", 0.0) / 100 / m.answers_per_s * 1e6, m.answers_per_s
