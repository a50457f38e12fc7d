# Strategy: read the request log(s) once, with an explicit schema (no inference pass), into a
# cached DataFrame of only the columns the tables use; the first action (count, malformed lines,
# time range) fills the cache and every table is then computed from memory. Each table is written
# as Parquet by the cluster, then collected (it is an aggregate: a few thousand rows at most) for
# summary.json, report.md and the PNG plots, which the driver writes through the same Hadoop
# filesystem API. Nothing but aggregates ever leaves the cluster, so the driver's memory does not
# grow with the log. Every step is a numbered progress line (pipeline/progress.py).
#
# Two checks on what was read, before any table: connection ids that stand for several
# connections (logs of several proxy processes, each counting from 1) are a warning the report
# carries; and requests without a client id (the proxy's own answers) take their connection's,
# from a small per-connection table cached beside the log.
"""``purgatory-proxy report``: request logs -> Parquet tables, summary.json, report.md, PNGs."""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from py4j.protocol import Py4JJavaError
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pipeline import tables as t
from pipeline.errors import ReportError
from pipeline.inputs import empty_message, missing_message
from pipeline.markdown import report_markdown
from pipeline.plots import render_all
from pipeline.progress import Progress
from pipeline.session import spark_session
from pipeline.storage import HadoopFiles, java_message
from pipeline.waits import FETCH_ANSWERS, PROTOCOL_WAITS

__all__ = ["TABLES", "run_report"]

Rows = list[dict[str, Any]]


@dataclass(frozen=True)
class Span:
    """The log's time range (arrival of its first and last request) and the window width."""

    first_ts: float
    last_ts: float
    window_s: int


#: Every table: its name (the Parquet directory under tables/), what it is, how it is made.
TABLES: dict[str, tuple[str, Callable[[DataFrame, Span], DataFrame]]] = {
    "per_api": ("latency and errors per API", lambda log, _: t.per_api(log)),
    "per_client": ("latency and errors per client and API", lambda log, _: t.per_client(log)),
    "per_broker": ("latency and errors per broker", lambda log, _: t.per_broker(log)),
    "throughput": (
        "throughput per window and API",
        lambda log, span: t.throughput(log, span.window_s, span.first_ts, span.last_ts),
    ),
    "purgatory_outcomes": ("outcomes and held times", lambda log, _: t.purgatory_outcomes(log)),
    "fetch_answers": ("fetches by how they were answered", lambda log, _: t.fetch_answers(log)),
    "held_histogram": ("held-time histogram", lambda log, _: t.held_histogram(log)),
    "memory_pressure": (
        "memory pressure per window",
        lambda log, span: t.memory_pressure(log, span.window_s),
    ),
    "fairness": ("fairness per window", lambda log, span: t.fairness(log, span.window_s)),
    "top_talkers": ("top talkers", lambda log, _: t.top_talkers(log)),
    "errors_by_code": ("errors by error code", lambda log, _: t.errors_by_code(log)),
}


def run_report(
    logs: str,
    out: str,
    *,
    outcome_meanings: Sequence[tuple[str, str]],
    master: str = "local[*]",
    window_s: int = 10,
    shuffle_partitions: int = 8,
    verbose: bool = False,
) -> dict[str, Any]:
    """Analyse the request logs at ``logs`` (path, glob or Hadoop URI) into ``out`` (a URI).

    Returns:
        The summary also written to ``out/summary.json``.

    Raises:
        ReportError: ``logs`` names no file, holds no request-log line, or ``out`` cannot be
            written.
    """
    started_s = time.monotonic()
    progress = Progress(3 + len(TABLES))
    with contextlib.ExitStack() as stack:
        with progress.stage(f"starting Spark on {master}") as stage:
            spark = stack.enter_context(
                spark_session(master, shuffle_partitions=shuffle_partitions, verbose=verbose)
            )
            stage.result = "ready"
        session = spark.session
        progress.attach(session.sparkContext)
        files = HadoopFiles(session)
        if files.matching_files(logs) == 0:
            raise ReportError(missing_message(logs))
        with progress.stage(f"reading {logs} (one pass, cached)") as stage:
            log, read = _read(session_logs=t.read_logs(session, logs), window_s=window_s)
            stage.result = _read_result(read)
        if read["lines"] == 0:
            raise ReportError(empty_message(logs, read["malformed_lines"]))
        warnings = _warnings(read)
        for warning in warnings:
            print(f"purgatory-proxy report: warning: {warning}", file=sys.stderr, flush=True)
        clients = t.connection_clients(log).cache()  # small: one row per connection
        stack.callback(clients.unpersist)
        log = t.with_connection_clients(log, clients)
        span = Span(read["first_ts"], read["last_ts"], window_s)
        collected: dict[str, Rows] = {}
        for name, (what, build) in TABLES.items():
            with progress.stage(what) as stage:
                collected[name] = _table(build(log, span), files.child(out, "tables", name))
                stage.result = f"{len(collected[name])} rows"
        log.unpersist()
        with progress.stage("plots and report.md") as stage:
            plots = render_all(collected, window_s)
            for name, png in plots.items():
                files.write_bytes(files.child(out, "plots", f"{name}.png"), png)
            summary = _summary(collected, read, window_s, logs, time.monotonic() - started_s)
            summary["warnings"] = warnings
            files.write_bytes(
                files.child(out, "summary.json"), (json.dumps(summary, indent=2) + "\n").encode()
            )
            links = [f"plots/{name}.png" for name in plots]
            markdown = report_markdown(summary, collected, links, outcome_meanings)
            files.write_bytes(files.child(out, "report.md"), markdown.encode())
            stage.result = f"{len(plots)} plots, summary.json, report.md"
    return summary


def _read(session_logs: DataFrame, window_s: int) -> tuple[DataFrame, dict[str, Any]]:
    """The cached well-formed log, and its line count, malformed count and time range."""
    prepared = t.prepare(session_logs, window_s).cache()
    malformed = F.col(t.MALFORMED)
    good_ts = F.when(~malformed, F.col("ts"))
    row = prepared.agg(
        F.count(F.when(~malformed, 1)).alias("lines"),
        F.count(F.when(malformed, 1)).alias("malformed_lines"),
        F.min(good_ts).alias("first_ts"),
        F.max(good_ts).alias("last_ts"),
    ).first()
    assert row is not None  # a global aggregate always has one row
    log = t.well_formed(prepared)
    return log, {**row.asDict(), "shared_connection_ids": t.shared_connection_ids(log)}


def _warnings(read: dict[str, Any]) -> list[str]:
    """What the reader must know before trusting the figures (also in report.md)."""
    shared = read["shared_connection_ids"]
    if not shared:
        return []
    return [
        f"{shared:,} connection id(s) each carry the ApiVersions handshake of more than one "
        "connection: these logs look like more than one proxy process's (each numbers its "
        "connections from 1), so connection counts, fairness and top talkers count such "
        "connections as one; report on one process's logs at a time"
    ]


def _read_result(read: dict[str, Any]) -> str:
    text = f"{read['lines']:,} lines"
    if read["malformed_lines"]:
        text += f" ({read['malformed_lines']:,} malformed, skipped)"
    if read["lines"]:
        text += f", {_utc(read['first_ts'])} to {_utc(read['last_ts'])}"
    return text


def _utc(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def _table(frame: DataFrame, uri: str) -> Rows:
    """Write ``frame`` as one Parquet file under ``uri``; return its rows.

    Raises:
        ReportError: ``uri`` cannot be written (one line: Hadoop's exception and message).
    """
    frame = frame.coalesce(1).cache()
    try:
        try:
            frame.write.mode("overwrite").parquet(uri)
        except Py4JJavaError as exc:
            raise ReportError(f"cannot write {uri}: {java_message(exc)}") from None
        return [row.asDict() for row in frame.collect()]
    finally:
        frame.unpersist()


def _latency(row: dict[str, Any], prefix: str = "latency") -> dict[str, Any]:
    return {f"p{p}_ms": row[f"{prefix}_p{p}_ms"] for p in (50, 95, 99)}


def _apis(rows: Rows) -> dict[str, dict[str, Any]]:
    """Per API: count, latency percentiles, errors, and why it waits (None: it does not)."""
    return {
        row["api"]: {
            "count": row["requests"],
            **_latency(row),
            "errors": row["errors"],
            "wait": PROTOCOL_WAITS.get(row["api"]),
        }
        for row in rows
    }


def _brokers(rows: Rows) -> dict[str, dict[str, Any]]:
    """Per broker: every request counted, percentiles over its service requests only."""
    return {
        row["broker"]: {
            "count": row["requests"],
            "service_requests": row["service_requests"],
            **_latency(row, "service_latency"),
            "errors": row["errors"],
        }
        for row in rows
    }


def _fetch_answers(rows: Rows) -> dict[str, dict[str, Any]]:
    """Per kind of fetch answer, in pipeline/waits.py's order: count, share, percentiles."""
    fetches = sum(row["requests"] for row in rows)
    by_kind = {row["answer"]: row for row in rows}
    return {
        kind: {
            "requests": row["requests"],
            "share": row["requests"] / fetches,
            **_latency(row),
            "held_p50_ms": row["held_p50_ms"],
            "held_p99_ms": row["held_p99_ms"],
        }
        for kind in FETCH_ANSWERS
        if (row := by_kind.get(kind)) is not None
    }


def _fairness(rows: Rows) -> dict[str, Any]:
    """Jain's index over the windows it means something in, and the worst of them."""
    scored = [row for row in rows if row["jain_index"] is not None]
    summary: dict[str, Any] = {
        "windows": len(scored),
        "windows_skipped": len(rows) - len(scored),
        "min_connections": t.FAIRNESS_MIN_CONNECTIONS,
        "mean": None,
        "min": None,
        "worst": None,
    }
    if scored:
        worst = min(scored, key=lambda row: (row["jain_index"], row["window_start"]))
        summary["mean"] = sum(row["jain_index"] for row in scored) / len(scored)
        summary["min"] = worst["jain_index"]
        summary["worst"] = {
            "window_start": worst["window_start"],
            "window_utc": _utc(worst["window_start"]).replace(".000 UTC", " UTC"),
            "connections": worst["connections"],
            "top_conn": worst["top_conn"],
            "top_client": worst["top_client"],
            "top_share": worst["top_share"],
        }
    return summary


def _summary(
    tables: dict[str, Rows], read: dict[str, Any], window_s: int, logs: str, elapsed_s: float
) -> dict[str, Any]:
    lines = read["lines"]
    outcomes: dict[str, int] = {}
    for row in tables["purgatory_outcomes"]:
        outcomes[row["outcome"]] = outcomes.get(row["outcome"], 0) + row["requests"]
    pressure = tables["memory_pressure"]
    muted = sum(row["muted_requests"] for row in pressure)
    return {
        "logs": logs,
        "lines": lines,
        "malformed_lines": read["malformed_lines"],
        "time_range": {
            "first_ts": read["first_ts"],
            "last_ts": read["last_ts"],
            "first_utc": _utc(read["first_ts"]),
            "last_utc": _utc(read["last_ts"]),
            "duration_s": read["last_ts"] - read["first_ts"],
        },
        "window_s": window_s,
        "elapsed_s": round(elapsed_s, 2),
        "percentile_accuracy": t.ACCURACY,
        "apis": _apis(tables["per_api"]),
        "brokers": _brokers(tables["per_broker"]),
        "fetch_answers": _fetch_answers(tables["fetch_answers"]),
        "outcomes": outcomes,
        "errors_by_code": [
            {"error_code": row["error_code"], "api": row["api"], "requests": row["requests"]}
            for row in tables["errors_by_code"]
        ],
        "muted_requests": muted,
        "muted_share": muted / lines,
        "muted_ms_total": sum(row["muted_ms"] for row in pressure),
        "fairness": _fairness(tables["fairness"]),
        "top_talkers": [
            {
                "client": row["client"],
                "connections": row["connections"],
                "bytes": row["bytes"],
                "requests": row["requests"],
            }
            for row in tables["top_talkers"]
        ],
    }
