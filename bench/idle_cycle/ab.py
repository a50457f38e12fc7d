# Strategy: the proxy of this tree against the proxy of another checkout on the idle cycle, the
# A/B that a change to the held path owes (bench.throughput --baseline is its twin for the
# request path). Each window is bench.idle_cycle's proxy route run in a child process whose
# PYTHONPATH and working directory are one tree, so the two proxies differ only in their code.
# Windows go A B B A, A B B A, ...: this machine drifts by several µs per cycle over minutes,
# and in that order a drift falls on both trees alike, where A B A B would charge it to B.
"""Idle cycle, this tree against another checkout, windows alternated (ABBA)."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from pathlib import Path

from testbed.report import machine_line

__all__ = ["compare"]

ROOT = Path(__file__).resolve().parents[2]

#: Run inside the tree: since the benchmarks moved into folders the function is
#: bench.idle_cycle.proxy_route.proxy_us; before that it was bench.idle_cycle.proxy_us, and
#: before 2026-11-26 private (``_proxy_us``).
_WINDOW = (
    "try:\n"
    "    from bench.idle_cycle.proxy_route import proxy_us as f\n"
    "except ImportError:\n"
    "    import bench.idle_cycle as b; f = getattr(b, 'proxy_us', None) or b._proxy_us\n"
    "us, rate = f({n}, {seconds}, {broker!r}); print(us, rate)"
)


def _window(tree: Path, n: int, seconds: float, broker: str) -> float:
    """One proxy window with ``tree``'s code: the proxy's CPU µs per answer."""
    code = _WINDOW.format(n=n, seconds=seconds, broker=broker)
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(
        [sys.executable, "-P", "-c", code],
        cwd=tree, env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    us, _rate = done.stdout.split()[-2:]
    return float(us)


def compare(
    baseline: Path, label: str, n: int, seconds: float, pairs: int, broker: str, command: str
) -> tuple[str, dict[str, list[float]]]:
    """``pairs`` ABBA blocks of windows: this tree (A) and ``baseline`` (B); ``command`` is
    how it was run, for the section.

    Returns:
        The section's markdown and every window's µs per answer by tree.
    """
    trees = {"this tree": ROOT, label: baseline.resolve()}
    values: dict[str, list[float]] = {name: [] for name in trees}
    order = ["this tree", label, label, "this tree"]
    for block in range(pairs):
        for name in order:
            us = _window(trees[name], n, seconds, broker)
            values[name].append(us)
            print(f"idle_cycle --baseline: block {block + 1} {name}: {us:.1f} µs per answer",
                  file=sys.stderr)  # fmt: skip
    lines = [
        "## Idle long-poll cycle, this tree against an older proxy (`bench.idle_cycle --baseline`)",
        "",
        machine_line(),
        "",
        f"`{command}` (DIR: a checkout of the baseline commit). "
        f"bench.idle_cycle's proxy route ({n:,} idle "
        f"consumers, {seconds:g} s windows) with each tree's code, windows in the order A B B A, "
        f"{pairs} times. Proxy CPU µs per answer, median (range) over {2 * pairs} windows each.",
        "",
        "| proxy | CPU µs per answer | windows |",
        "|---|---:|---|",
    ]
    for name, us in values.items():
        lines.append(
            f"| {name} | {statistics.median(us):.1f} ({min(us):.0f}-{max(us):.0f}) "
            f"| {', '.join(f'{u:.0f}' for u in us)} |"
        )
    return "\n".join(lines) + "\n", values
