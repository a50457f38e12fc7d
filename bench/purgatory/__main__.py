# Strategy: reproduce the purgatory redesign's benchmark (Kafka's TestPurgatoryPerformance) for
# our timing-wheel purgatory and, in the same run, for a faithful copy of the design it
# replaced (Kafka 0.8.2's RequestPurgatory: a heap of individual requests plus watcher lists
# purged whenever their total size reaches the purge interval).
#
# The workload is bench/purgatory/workload.py, the old design bench/purgatory/baseline.py;
# each point runs in a fresh subprocess (bench/purgatory/point.py) and the report is
# bench/purgatory/report.py.
"""Purgatory enqueue-rate benchmark: timing wheel vs. the 0.8 DelayQueue design.

Run ``python -m bench.purgatory`` (``--quick`` for 200,000 requests per point, ``--json FILE``
for machine-readable rows). Results go to docs/benchmarks.md and docs/img/purgatory.png.

Where the time goes (cProfile, wheel, high-timeout, at saturation, 2026-11-22): about 60 % in
the purgatory and 30 % in this harness (building the fake operation and its 100-byte
payload, the completer's heap, the loop). Of the purgatory's share: try_complete_else_watch
itself 27 % (two checks, three dict inserts), the estimate-triggered purges 24 % (each
sweeps ~3 x pending entries to drop ~1000; the seed's design, unchanged), wheel insert and
cascade 31 % (a 200 ms timeout lands in the 400 ms wheel and is re-added once to the 20 ms
one before it fires), completion and expiry 16 %. The structures are already __slots__
classes, the wheel insert is iterative with the bucket link inlined, and buckets are dicts
(deletes run in C), so what is left is CPython's per-call cost.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from bench.purgatory.point import run_point, saturation, sweep
from bench.purgatory.report import CHART, chart, markdown
from bench.purgatory.workload import IMPLS, RATES, SCENARIOS

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.purgatory", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="200,000 requests per point")
    parser.add_argument("--json", type=Path, help="write rows and saturation summaries here")
    parser.add_argument("--requests", type=int, help="requests per point (default 1,000,000)")
    parser.add_argument("--cap-s", type=float, help="max enqueue seconds per point")
    parser.add_argument("--rates", type=str, help="comma-separated target rates")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-report", action="store_true", help="skip docs/ outputs")
    parser.add_argument("--point", nargs=6, metavar="ARG", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.point:
        scenario, impl, rate, requests, cap_s, seed = args.point
        point = run_point(scenario, impl, int(rate), int(requests), float(cap_s), int(seed))
        print(json.dumps(point.__dict__))
        return 0

    requests = args.requests or (200_000 if args.quick else 1_000_000)
    cap_s = args.cap_s or (6.0 if args.quick else 15.0)
    rates = tuple(int(r) for r in args.rates.split(",")) if args.rates else RATES
    points = sweep(requests, cap_s, rates, args.seed)
    command = "python -m bench.purgatory" + (" --quick" if args.quick else "")
    print()
    for scenario in SCENARIOS:
        for impl in IMPLS:
            print(f"saturation {scenario:12} {impl:8} {saturation(points, scenario, impl)}")
    if args.json:
        rows: list[dict[str, Any]] = [
            {
                "scenario": p.scenario,
                "impl": p.impl,
                "target_rps": p.target_rps,
                "achieved_rps": round(p.achieved_rps, 1),
                "cpu_s": round(p.cpu_s, 3),
                "peak_rss_mb": round(p.peak_rss_mb, 1),
            }
            for p in points
        ]
        rows += [
            {"scenario": s, "impl": i, "saturation_rps": saturation(points, s, i)}
            for s in SCENARIOS
            for i in IMPLS
        ]
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    if not args.no_report:
        from testbed.report import write_section

        chart(points, CHART)
        write_section("purgatory", markdown(points, requests, cap_s, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
