# Strategy: read the request log(s) once into a cached DataFrame with an explicit schema (no
# inference pass over the files), compute every table (pipeline/tables.py) on the cluster, write
# each as Parquet, then collect the small aggregates to the driver for summary.json, report.md
# and the PNG plots. Nothing but aggregates ever leaves the cluster, so the driver's memory does
# not grow with the log.
"""``purgatory-proxy report``: request logs -> Parquet tables, summary.json, report.md, PNGs."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame

from pipeline import tables as t
from pipeline.plots import plot_all
from pipeline.session import spark_session

__all__ = ["run_report"]


def run_report(
    logs: str,
    out: Path,
    *,
    master: str = "local[*]",
    window_s: int = 10,
    shuffle_partitions: int = 8,
) -> dict[str, Any]:
    """Analyse the request logs matching ``logs`` (a path or a glob) into ``out``.

    Returns:
        The summary also written to ``out/summary.json``.

    Raises:
        ValueError: ``logs`` matched no line.
    """
    started_s = time.monotonic()
    session = spark_session(master, shuffle_partitions=shuffle_partitions)
    try:
        log = t.with_window(session.read.schema(t.LOG_SCHEMA).json(logs), window_s).cache()
        lines = log.count()
        if lines == 0:
            raise ValueError(f"no request-log lines in {logs}")
        frames: dict[str, Callable[[], DataFrame]] = {
            "per_api": lambda: t.per_api(log),
            "per_client": lambda: t.per_client(log),
            "throughput": lambda: t.throughput(log, window_s),
            "purgatory_outcomes": lambda: t.purgatory_outcomes(log),
            "held_histogram": lambda: t.held_histogram(log),
            "memory_pressure": lambda: t.memory_pressure(log, window_s),
            "fairness": lambda: t.fairness(log, window_s),
            "top_talkers": lambda: t.top_talkers(log),
        }
        collected: dict[str, list[dict[str, Any]]] = {}
        for name, build in frames.items():
            frame = build().cache()
            frame.write.mode("overwrite").parquet(str(out / "tables" / name))
            collected[name] = [row.asDict() for row in frame.collect()]
            frame.unpersist()
        log.unpersist()
    finally:
        session.stop()
    plots = plot_all(collected, out / "plots")
    summary = _summary(collected, lines, window_s, logs, time.monotonic() - started_s)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out / "report.md").write_text(_markdown(summary, collected, plots, out))
    return summary


def _summary(
    tables: dict[str, list[dict[str, Any]]], lines: int, window_s: int, logs: str, elapsed_s: float
) -> dict[str, Any]:
    outcomes: dict[str, int] = {}
    for row in tables["purgatory_outcomes"]:
        outcomes[row["outcome"]] = outcomes.get(row["outcome"], 0) + row["requests"]
    pressure = tables["memory_pressure"]
    muted = sum(row["muted_requests"] for row in pressure)
    fairness = [row["jain_index"] for row in tables["fairness"]]
    return {
        "logs": logs,
        "lines": lines,
        "window_s": window_s,
        "elapsed_s": round(elapsed_s, 2),
        "percentile_accuracy": t.ACCURACY,
        "apis": {
            row["api"]: {
                "count": row["requests"],
                "p50_ms": row["latency_p50_ms"],
                "p95_ms": row["latency_p95_ms"],
                "p99_ms": row["latency_p99_ms"],
                "errors": row["errors"],
            }
            for row in tables["per_api"]
        },
        "outcomes": outcomes,
        "muted_requests": muted,
        "muted_share": muted / lines,
        "muted_ms_total": sum(row["muted_ms"] for row in pressure),
        "jain_index_min": min(fairness, default=1.0),
        "jain_index_mean": sum(fairness) / len(fairness) if fairness else 1.0,
        "top_talkers": [
            {"client": row["client"], "bytes": row["bytes"], "requests": row["requests"]}
            for row in tables["top_talkers"]
        ],
    }


def _markdown(
    summary: dict[str, Any], tables: dict[str, list[dict[str, Any]]], plots: list[Path], out: Path
) -> str:
    lines = [
        "# Request-log report",
        "",
        f"{summary['lines']} requests from `{summary['logs']}`, windows of "
        f"{summary['window_s']} s, computed in {summary['elapsed_s']} s.",
        "",
        "## Per API",
        "",
        "| API | requests | p50 ms | p95 ms | p99 ms | errors |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for api, row in summary["apis"].items():
        lines.append(
            f"| {api} | {row['count']} | {row['p50_ms']:.2f} | {row['p95_ms']:.2f} | "
            f"{row['p99_ms']:.2f} | {row['errors']} |"
        )
    lines += ["", "## Outcomes", "", "| outcome | requests |", "| --- | ---: |"]
    lines += [f"| {name} | {count} |" for name, count in sorted(summary["outcomes"].items())]
    lines += [
        "",
        "## Memory pressure and fairness",
        "",
        f"- requests muted (waited for pool memory): {summary['muted_requests']} "
        f"({summary['muted_share']:.1%}), {summary['muted_ms_total']:.0f} ms in total",
        f"- Jain's index over per-client bytes per window: mean "
        f"{summary['jain_index_mean']:.3f}, worst {summary['jain_index_min']:.3f}",
        "",
        "## Top talkers",
        "",
        "| client | requests | bytes |",
        "| --- | ---: | ---: |",
    ]
    lines += [f"| {r['client']} | {r['requests']} | {r['bytes']} |" for r in tables["top_talkers"]]
    lines += ["", "## Plots", ""]
    lines += [f"![{p.stem}]({p.relative_to(out)})" for p in plots]
    lines += ["", "Tables (Parquet): " + ", ".join(f"`tables/{name}`" for name in tables), ""]
    return "\n".join(lines)
