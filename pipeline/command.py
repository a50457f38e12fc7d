"""The ``purgatory-proxy report`` subcommand: its flags and its entry point.

Why a module of its own: proxy/cli.py must import without pyspark (the runtime install has no
[pipeline] extra), so it only asks this module to add the flags and to run; pyspark is imported
here, inside `run`, and its absence becomes one line that says what to install. Problems the
report diagnoses itself (a missing log, an empty log, an output it cannot write) are one line
on stderr and exit code 2, like a usage error, rather than a traceback; a missing or empty log
and an unwritable output on the local filesystem are found before Spark starts
(pipeline/inputs.py).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from pipeline.inputs import unusable_local_logs, unwritable_local_out

__all__ = ["add_arguments", "run"]

INSTALL_HINT = (
    "purgatory-proxy report needs the [pipeline] extra (pyspark, matplotlib): in the "
    "repository, `make report-deps` (or `.venv/bin/pip install -e '.[pipeline]'`)"
)
#: Exit code of a report the user can fix (as argparse's usage errors).
USER_ERROR = 2


def add_arguments(report: argparse.ArgumentParser) -> None:
    """Add the ``report`` flags to its subparser."""
    report.add_argument(
        "--logs",
        required=True,
        metavar="URI_OR_GLOB",
        help="request log(s): a path, a glob such as 'requests.jsonl*', or a Hadoop URI "
        "(file://, hdfs://, s3a:// when its jars are on Spark's classpath)",
    )
    report.add_argument(
        "--out",
        required=True,
        metavar="URI",
        help="output directory, a path or a Hadoop URI; tables, plots, summary.json and "
        "report.md are all written there through Hadoop's filesystem API",
    )
    report.add_argument(
        "--master", default="local[*]", help="Spark master URL (default local[*], loopback)"
    )
    report.add_argument(
        "--window-s", type=int, default=10, help="time window of the per-window tables (s)"
    )
    report.add_argument(
        "--verbose",
        action="store_true",
        help="show Spark's progress bar and the JVM's own log output",
    )


def run(args: argparse.Namespace, outcome_meanings: Sequence[tuple[str, str]]) -> int:
    """Run the report; returns the process exit code.

    ``outcome_meanings`` is the glossary of report.md's outcomes: every outcome the log's
    writer may write, in order, with what it means (the proxy's command line passes its own).
    """
    try:
        from pipeline.errors import ReportError
        from pipeline.report import run_report
    except ImportError:
        print(f"purgatory-proxy: {INSTALL_HINT}", file=sys.stderr)
        return USER_ERROR
    problem = unusable_local_logs(args.logs) or unwritable_local_out(args.out)
    if problem is not None:
        print(f"purgatory-proxy report: {problem}", file=sys.stderr)
        return USER_ERROR
    try:
        summary = run_report(
            args.logs,
            args.out,
            outcome_meanings=outcome_meanings,
            master=args.master,
            window_s=args.window_s,
            verbose=args.verbose,
        )
    except ReportError as exc:
        print(f"purgatory-proxy report: {exc}", file=sys.stderr)
        return USER_ERROR
    print(f"report written to {args.out} ({summary['lines']} requests)")
    return 0
