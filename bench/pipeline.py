"""Benchmark of ``purgatory-proxy report``: request-log lines per second on two cores.

Run ``python -m bench.pipeline``. It writes synthetic request logs (testbed/synthetic_log.py: the
proxy's own record encoder, a busy proxy's mix) of 100,000 and 1,000,000 lines, runs the report
on each through the command line, as an operator does, on ``local[2]``, and prints the wall
time, lines/s and the time of each of the report's stages (from its own progress lines). The
goal is a day of a busy proxy, 10 M lines, in a few minutes on two cores: the fixed cost (JVM
start, one Spark job per table) and the per-line cost are separated from the two sizes, and the
10 M figure is extrapolated from them, or measured with ``--sizes 100000,1000000,10000000``.
The results replace the "pipeline" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from testbed.report import machine_line, write_section
from testbed.synthetic_log import write_log

ROOT = Path(__file__).resolve().parent.parent
MASTER = "local[2]"
#: One progress line of the report: "[n/N] elapsed s  what: result (stage s)".
_STAGE = re.compile(r"^\[\s*\d+/\d+\]\s+[\d.]+ s  (?P<what>.*?): .* \((?P<s>[\d.]+) s\)$")


@dataclass
class Run:
    lines: int
    file_mb: float
    wall_s: float
    stages: dict[str, float]

    @property
    def lines_per_s(self) -> float:
        return self.lines / self.wall_s


def _stage_name(what: str) -> str:
    if what.startswith("reading "):
        return "read + cache (one pass)"
    return what


def run_report(log: Path, out: Path) -> Run:
    """Run ``purgatory-proxy report`` on ``log``; its wall time and per-stage seconds."""
    command = [
        sys.executable, "-m", "proxy", "report", "--logs", str(log), "--out", str(out),
        "--master", MASTER,
    ]  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    wall_s = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(f"report failed ({done.returncode}):\n{done.stderr[-3000:]}")
    stages = {}
    for line in done.stderr.splitlines():
        match = _STAGE.match(line)
        if match:
            stages[_stage_name(match["what"])] = float(match["s"])
    written = re.search(r"\((\d+) requests\)", done.stdout)
    if written is None:
        raise RuntimeError(f"no 'report written' line in the report's output: {done.stdout!r}")
    return Run(int(written[1]), log.stat().st_size / 1e6, wall_s, stages)


def markdown(runs: list[Run], command: str) -> str:
    """The docs/benchmarks.md section."""
    small, large = runs[0], runs[1]  # the two smallest sizes; a larger one checks the estimate
    per_line_s = (large.wall_s - small.wall_s) / (large.lines - small.lines)
    fixed_s = small.wall_s - small.lines * per_line_s
    ten_m_s = fixed_s + 10_000_000 * per_line_s
    measured_10m = next((run for run in runs if run.lines == 10_000_000), None)
    lines = [
        "## Request-log report: lines per second (`bench.pipeline`)",
        "",
        machine_line(),
        "",
        f"`{command}`",
        "",
        f"`purgatory-proxy report --master {MASTER}` on synthetic request logs made with the "
        "proxy's own record encoder (`testbed/synthetic_log.py`: 60 % Fetch, 25 % Produce, nine "
        "other APIs, 200 clients, 4 brokers, 120 lines/s of log time, i.e. 10 M lines a day). "
        "Wall time of the whole command, JVM start included, on the shared 2-core machine.",
        "",
        "| lines | log MB | wall s | lines/s |",
        "|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {r.lines:,} | {r.file_mb:,.0f} | {r.wall_s:.1f} | {r.lines_per_s:,.0f} |" for r in runs
    ]
    lines += ["", "Seconds per stage (the report's own progress lines):", ""]
    names = list(dict.fromkeys(name for run in runs for name in run.stages))
    lines += ["| stage | " + " | ".join(f"{r.lines:,} lines" for r in runs) + " |"]
    lines += ["|---|" + "---:|" * len(runs)]
    for name in names:
        cells = " | ".join(f"{r.stages.get(name, 0.0):.1f}" for r in runs)
        lines.append(f"| {name} | {cells} |")
    lines += [
        "",
        f"From the {small.lines:,}- and {large.lines:,}-line runs: a fixed cost of "
        f"{fixed_s:.0f} s (JVM start and one small Spark job per table) plus "
        f"{per_line_s * 1e6:.1f} µs per line ({1 / per_line_s:,.0f} lines/s at the margin). "
        f"Extrapolated to 10 M lines (a day of a busy proxy): about {ten_m_s / 60:.1f} min.",
    ]
    if measured_10m is not None:
        lines.append(
            f"Measured at 10 M lines: {measured_10m.wall_s / 60:.1f} min "
            f"({measured_10m.lines_per_s:,.0f} lines/s)."
        )
    else:
        lines.append(
            "Not measured at 10 M in this run (add 10000000 to `--sizes`). At 10 M the cached "
            "columns (about 60 MB per million lines) outgrow local mode's default storage "
            "memory, and the part that does not fit is kept on local disk."
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--sizes", default="100000,1000000", help="comma-separated log sizes in lines"
    )
    parser.add_argument("--no-write", action="store_true", help="do not touch docs/benchmarks.md")
    args = parser.parse_args(argv)
    sizes = sorted(int(size) for size in args.sizes.split(","))
    if len(sizes) < 2:
        parser.error("at least two sizes: the fixed and per-line costs come from two runs")
    runs = []
    with tempfile.TemporaryDirectory(prefix="bench-pipeline-") as work:
        for size in sizes:
            log = Path(work) / f"requests-{size}.jsonl"
            write_log(log, size)
            run = run_report(log, Path(work) / f"report-{size}")
            os.unlink(log)
            runs.append(run)
            print(
                f"{run.lines:>11,} lines  {run.file_mb:7,.0f} MB  {run.wall_s:7.1f} s  "
                f"{run.lines_per_s:9,.0f} lines/s  "
                + ", ".join(f"{name} {s:.1f}" for name, s in run.stages.items()),
                flush=True,
            )
    command = "python -m bench.pipeline" + (
        f" --sizes {args.sizes}" if args.sizes != "100000,1000000" else ""
    )
    section = markdown(runs, command)
    print(section)
    if not args.no_write:
        write_section("pipeline", section)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
