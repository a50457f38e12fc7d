# Strategy: report.md is made only from summary.json's dict and the collected tables, so the
# two can never disagree, and nothing here touches Spark. Sections follow the questions an
# operator asks after an incident: when does this log cover, how did each API and each broker
# do, what went wrong (outcomes, error codes), was memory or fairness a problem, who talked most.
"""The text of report.md."""

from __future__ import annotations

from typing import Any

__all__ = ["ERROR_CODES_URL", "report_markdown"]

Rows = list[dict[str, Any]]

#: Kafka's table of error codes: the log holds the numbers only.
ERROR_CODES_URL = "https://kafka.apache.org/protocol#protocol_error_codes"


def _latency_table(first: str, rows: dict[str, dict[str, Any]]) -> list[str]:
    lines = [
        f"| {first} | requests | p50 ms | p95 ms | p99 ms | errors |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, row in rows.items():
        lines.append(
            f"| {name} | {row['count']} | {row['p50_ms']:.2f} | {row['p95_ms']:.2f} | "
            f"{row['p99_ms']:.2f} | {row['errors']} |"
        )
    return lines


def _time_range(summary: dict[str, Any]) -> list[str]:
    span, malformed = summary["time_range"], summary["malformed_lines"]
    skipped = f", {malformed} malformed lines skipped" if malformed else ""
    return [
        f"- first request: {span['first_utc']}, last request: {span['last_utc']} "
        f"({span['duration_s']:.1f} s)",
        f"- {summary['lines']} requests from `{summary['logs']}`{skipped}; windows of "
        f"{summary['window_s']} s; computed in {summary['elapsed_s']} s",
    ]


def _errors_by_code(summary: dict[str, Any]) -> list[str]:
    rows = summary["errors_by_code"]
    lines = [
        "",
        "## Errors by code",
        "",
        "Top-level error codes the proxy could read (codes: [Kafka protocol]"
        f"({ERROR_CODES_URL})); per-partition errors, such as a Produce's, are not in the log.",
        "",
    ]
    if not rows:
        return [*lines, "No response carried a non-zero top-level error code."]
    lines += ["| error code | API | requests |", "| ---: | --- | ---: |"]
    lines += [f"| {r['error_code']} | {r['api']} | {r['requests']} |" for r in rows]
    return lines


def report_markdown(summary: dict[str, Any], tables: dict[str, Rows], plots: list[str]) -> str:
    """report.md for ``summary`` (see pipeline/report.py); ``plots`` are paths under --out."""
    lines = ["# Request-log report", "", *_time_range(summary), "", "## Per API", ""]
    lines += _latency_table("API", summary["apis"])
    lines += ["", "## Per broker", "", "`bootstrap`: the bootstrap port; `local`: answered by "
              "the proxy itself; a number: that upstream node's port.", ""]  # fmt: skip
    lines += _latency_table("broker", summary["brokers"])
    lines += ["", "## Outcomes", "", "| outcome | requests |", "| --- | ---: |"]
    lines += [f"| {name} | {count} |" for name, count in sorted(summary["outcomes"].items())]
    lines += _errors_by_code(summary)
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
    lines += [f"![{plot.rsplit('/', 1)[-1].removesuffix('.png')}]({plot})" for plot in plots]
    lines += ["", "Tables (Parquet): " + ", ".join(f"`tables/{name}`" for name in tables), ""]
    return "\n".join(lines)
