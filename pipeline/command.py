"""The ``purgatory-proxy report`` subcommand: its flags and its entry point.

Why a module of its own: proxy/cli.py must import without pyspark (the runtime install has no
[pipeline] extra), so it only asks this module to add the flags and to run; pyspark is imported
here, inside `run`, and its absence becomes one line that says what to install.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = ["add_arguments", "run"]

INSTALL_HINT = (
    "purgatory-proxy report needs the [pipeline] extra (pyspark, matplotlib): "
    "pip install 'purgatory-proxy[pipeline]' (or run `make test`, which installs it)"
)


def add_arguments(report: argparse.ArgumentParser) -> None:
    """Add the ``report`` flags to its subparser."""
    report.add_argument("--logs", required=True, metavar="PATH_OR_GLOB", help="request log(s)")
    report.add_argument("--out", required=True, type=Path, metavar="DIR", help="output directory")
    report.add_argument(
        "--master", default="local[*]", help="Spark master URL (default local[*], loopback)"
    )
    report.add_argument(
        "--window-s", type=int, default=10, help="time window of the per-window tables (s)"
    )


def run(args: argparse.Namespace) -> int:
    """Run the report; returns the process exit code."""
    try:
        from pipeline.report import run_report
    except ImportError:
        print(f"purgatory-proxy: {INSTALL_HINT}", file=sys.stderr)
        return 2
    summary = run_report(args.logs, args.out, master=args.master, window_s=args.window_s)
    print(f"report written to {args.out} ({summary['lines']} requests)")
    return 0
