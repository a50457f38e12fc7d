# Strategy: report.md is made only from summary.json's dict and the collected tables, so the
# two can never disagree, and nothing here touches Spark. Sections follow the questions an
# operator asks after an incident: when does this log cover, how fast were requests served
# (apart from the waits the protocol asks for), what did the purgatory do with the fetches,
# how did each broker do, what went wrong (outcomes, error codes), was memory or fairness a
# problem, who talked most. Every word a reader could look up is defined where it is used:
# the outcomes from the glossary the report is given (the command line passes the proxy's own,
# proxy/observability/outcomes.py; the pipeline imports nothing of the proxy) and the waits and
# kinds of fetch answers from pipeline/waits.py, the same lists the proxy and the tables use.
"""The text of report.md."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pipeline.waits import EXPIRED, FETCH, FETCH_ANSWERS, NOT_HELD, WOKEN

__all__ = ["ERROR_CODES_URL", "report_markdown"]

Rows = list[dict[str, Any]]

#: Kafka's table of error codes: the log holds the numbers only.
ERROR_CODES_URL = "https://kafka.apache.org/protocol#protocol_error_codes"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _percentiles(row: dict[str, Any]) -> str:
    return f"{_ms(row['p50_ms'])} | {_ms(row['p95_ms'])} | {_ms(row['p99_ms'])}"


def _time_range(summary: dict[str, Any]) -> list[str]:
    span, malformed = summary["time_range"], summary["malformed_lines"]
    skipped = f", {malformed} malformed lines skipped" if malformed else ""
    return [
        f"- first request: {span['first_utc']}, last request: {span['last_utc']} "
        f"({span['duration_s']:.1f} s)",
        f"- {summary['lines']} requests from `{summary['logs']}`{skipped}; windows of "
        f"{summary['window_s']} s; computed in {summary['elapsed_s']} s",
    ]


_SERVICE_INTRO = (
    "Client-observed latency (arrival to answer written, ms) of the APIs that are answered as "
    "soon as the broker and the proxy have done the work. **A tall p99 beside a short p50 is a "
    "tail to chase**: `upstream` percentiles in `tables/per_api` say whether the broker's part "
    "or the proxy's. Produce waits for its acks here: that wait is replication, and a slow one "
    "is a real tail."
)
_WAITS_INTRO = (
    "These APIs may wait before they answer, by design: their latency is mostly that wait, and "
    "its length is set by the client (Fetch's `max_wait_ms`) or by the group's other members (a "
    "rebalance), not by the proxy or the broker. Compare them with the clients' settings, not "
    "with the service latency above; how the fetches were answered is below."
)


def _apis(apis: dict[str, dict[str, Any]], *, waits: bool) -> list[str]:
    """The service APIs' latency table, or (``waits``) the waiting APIs' with the reason."""
    heading, intro = ("Waits the protocol asks for", _WAITS_INTRO) if waits else (
        "Service latency per API", _SERVICE_INTRO)  # fmt: skip
    why = (" why it waits |", " --- |") if waits else ("", "")
    rows = {name: row for name, row in apis.items() if (row["wait"] is not None) == waits}
    lines = ["", f"## {heading}", "", intro, ""]
    if not rows:
        return [*lines, "No request of such an API is in this log."]
    lines += [
        f"| API | requests | p50 ms | p95 ms | p99 ms | errors |{why[0]}",
        f"| --- | ---: | ---: | ---: | ---: | ---: |{why[1]}",
    ]
    for name, row in rows.items():
        reason = f" {row['wait']} |" if waits else ""
        lines.append(f"| {name} | {row['count']} | {_percentiles(row)} | {row['errors']} |{reason}")
    return lines


def _fetch_answers(answers: dict[str, dict[str, Any]]) -> list[str]:
    lines = ["", "## Fetches: held or not", ""]
    if not answers:
        return [*lines, "No Fetch in this log."]
    fetches = sum(row["requests"] for row in answers.values())
    held = sum(answers[kind]["requests"] for kind in (WOKEN, EXPIRED) if kind in answers)
    lines += [
        f"{fetches} fetches; the proxy held {held} ({held / fetches:.1%}) in its purgatory "
        "until data came or their max wait passed; how it answered each:",
        "",
        "| answer | fetches | share | latency p50 ms | p95 ms | p99 ms | held p50 ms | "
        "held p99 ms |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    lines += [
        f"| {kind} | {row['requests']} | {row['share']:.1%} | {_percentiles(row)} | "
        f"{_ms(row['held_p50_ms'])} | {_ms(row['held_p99_ms'])} |"
        for kind, row in answers.items()
    ]
    lines += ["", *(f"- **{kind}**: {meaning}." for kind, meaning in FETCH_ANSWERS.items())]
    if not held:
        lines += [
            "",
            "No fetch was held: data was always there, or the proxy runs with "
            "`[fetch] hold = false` (then the broker holds them, and their wait is in "
            f"the latency of the {NOT_HELD} ones).",
        ]
    return lines


def _brokers(brokers: dict[str, dict[str, Any]]) -> list[str]:
    lines = [
        "",
        "## Per broker",
        "",
        "`bootstrap`: the bootstrap port; `local`: answered by the proxy itself; a number: that "
        "upstream node's port. Latency percentiles are over the service requests only (the "
        f"waits above, {FETCH} included, are left out); errors over all requests.",
        "",
        "| broker | requests | service requests | p50 ms | p95 ms | p99 ms | errors |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    lines += [
        f"| {name} | {row['count']} | {row['service_requests']} | {_percentiles(row)} | "
        f"{row['errors']} |"
        for name, row in brokers.items()
    ]
    return lines


def _outcomes(outcomes: dict[str, int], meanings: Sequence[tuple[str, str]]) -> list[str]:
    lines = [
        "",
        "## Outcomes",
        "",
        "Every outcome the proxy writes to the log, with what it means:",
        "",
        "| outcome | requests | meaning |",
        "| --- | ---: | --- |",
    ]
    lines += [f"| {name} | {outcomes.get(name, 0)} | {text} |" for name, text in meanings]
    unknown = sorted(set(outcomes) - {name for name, _ in meanings})
    lines += [f"| {name} | {outcomes[name]} | not written by this version |" for name in unknown]
    return lines


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


def _fairness(fairness: dict[str, Any]) -> list[str]:
    least = fairness["min_connections"]
    lines = ["", "## Fairness between connections", ""]
    skipped = fairness["windows_skipped"]
    if fairness["mean"] is None:
        lines.append(f"No window had {least} or more active connections: nothing to compare.")
    else:
        worst = fairness["worst"]
        lines += [
            f"- Jain's index over the bytes each connection moved per window: mean "
            f"{fairness['mean']:.3f}, worst {fairness['min']:.3f} (window from "
            f"{worst['window_utc']}, {worst['connections']} connections; connection "
            f"{worst['top_conn']} (`{worst['top_client']}`) moved {worst['top_share']:.0%} of "
            "the window's bytes)",
            f"- over the {fairness['windows']} windows with {least} or more active connections; "
            f'{skipped} with fewer are left out (a lone connection is always "fair")',
        ]
    lines += [
        "",
        "How to read it: J = (Σx)² / (n·Σx²) over the bytes x (request + response) of the n "
        "connections that sent a request in the window. **1.0**: every connection moved the "
        "same bytes; **1/n**: one connection moved everything. It measures how evenly bytes "
        "were spread, not whether each connection got what it asked for: producers beside idle "
        "consumers score low, and that is fine. Between connections doing the same job (the "
        "members of one consumer group, the producers of one application) above 0.9 is even "
        "and below 0.5 means a few of them took most of the bytes. What to look at: a low "
        "index in windows where requests were muted (memory pressure above, shaded in the "
        "fairness plot): some connections waited for memory while others moved the bytes; "
        "`tables/fairness` names the top connection of every window.",
    ]
    return lines


def report_markdown(
    summary: dict[str, Any],
    tables: dict[str, Rows],
    plots: list[str],
    outcome_meanings: Sequence[tuple[str, str]],
) -> str:
    """report.md for ``summary`` (see pipeline/report.py); ``plots`` are paths under --out;
    ``outcome_meanings`` is every outcome the log's writer may write, in order, with what it
    means."""
    lines = ["# Request-log report", "", *_time_range(summary)]
    lines += [f"- **Warning**: {warning}." for warning in summary.get("warnings", [])]
    lines += _apis(summary["apis"], waits=False)
    lines += _apis(summary["apis"], waits=True)
    lines += _fetch_answers(summary["fetch_answers"])
    lines += _brokers(summary["brokers"])
    lines += _outcomes(summary["outcomes"], outcome_meanings)
    lines += _errors_by_code(summary)
    lines += [
        "",
        "## Memory pressure",
        "",
        f"- requests muted (waited for pool memory): {summary['muted_requests']} "
        f"({summary['muted_share']:.1%}), {summary['muted_ms_total']:.0f} ms in total",
    ]
    lines += _fairness(summary["fairness"])
    lines += [
        "",
        "## Top talkers",
        "",
        "| client | connections | requests | bytes |",
        "| --- | ---: | ---: | ---: |",
    ]
    lines += [
        f"| {r['client']} | {r['connections']} | {r['requests']} | {r['bytes']} |"
        for r in tables["top_talkers"]
    ]
    lines += ["", "## Plots", ""]
    lines += [f"![{plot.rsplit('/', 1)[-1].removesuffix('.png')}]({plot})" for plot in plots]
    lines += ["", "Tables (Parquet): " + ", ".join(f"`tables/{name}`" for name in tables), ""]
    return "\n".join(lines)
