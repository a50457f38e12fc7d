# Strategy: what every fault run of tests/reliability/kafka_system/ does once its clients
# stopped, written once: read each route's topic straight from the cluster (the log), build
# the matrix (tests/support/fault_matrix.py), and print the verdict line and the run's
# docs/reliability.md section (the description, the matrix, notes, what did not hold, and the
# command that produced it; written there only with PURGATORY_WRITE_DOCS=1). The caller asserts
# on the problems returned, after the report is out, so a failing run still shows its matrix.
"""Judge a fault run's routes against the log and report it as a docs section."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tests.support.fault_cells import PARTITIONS, Cell
from tests.support.fault_matrix import FaultWindow, Matrix, build_matrix
from tests.support.load_scenario import Report
from tests.support.verifiable_judge import read_log, send_errors_of
from tests.support.verifiable_routes import Route

__all__ = ["FaultRun", "judge_run"]


@dataclass(frozen=True)
class FaultRun:
    """Where a run reports: its section, heading, test id and what it did (Markdown)."""

    section: str
    title: str
    test: str
    description: str
    soak: bool = False
    #: Settings the run took from the environment, as VAR=value words (in its command).
    env: str = ""


def _client_rows(routes: Sequence[Route], matrix: Matrix) -> list[tuple[str, str]]:
    """What Kafka's judgement leaves aside, shown all the same: records the producer was told
    failed (never acknowledged, so never owed), and records a consumer got again after a
    commit that did not happen (at-least-once)."""
    found = []
    for route in routes:
        errors = send_errors_of(route.producer)
        found.append((f"{route.name}: producer send errors (not acknowledged)",
                      f"{len(errors):,}" + (f", e.g. {errors[0]}" if errors else "")))  # fmt: skip
        again = {
            protocol: sum(r.redelivered for r in matrix.rows
                          if r.route == route.name and r.protocol == protocol)
            for protocol in route.consumers
        }  # fmt: skip
        found.append((f"{route.name}: records consumed again (" + " / ".join(again) + ")",
                      " / ".join(f"{n:,}" for n in again.values())))  # fmt: skip
    return found


def judge_run(
    run: FaultRun,
    cluster_bootstrap: str,
    routes: Sequence[Route],
    cells: Sequence[Cell],
    caught_up: Mapping[str, float | None],
    problems: Sequence[str] = (),
    rows: Sequence[tuple[str, str]] = (),
) -> tuple[Matrix, list[str]]:
    """The run's matrix and every problem (``problems`` the caller found, then the
    matrix's); prints the verdict and the section, with ``rows`` (figure, value) under the
    matrix."""
    logs = {
        route.name: Counter(r.value for r in read_log(cluster_bootstrap, route.topic, PARTITIONS))
        for route in routes
    }
    windows = [FaultWindow(c.name, c.fault_s, c.until_s, c.hit) for c in cells]
    matrix = build_matrix(routes, windows, logs, caught_up)
    found = [*problems, *matrix.problems]
    for route in routes:
        for tool in route.tools():
            if tool.ended_by_itself:
                found.append(f"{tool.name} ended before it was stopped (log {tool.log_path})")
    totals = matrix.totals()
    slower = matrix.over_ratio()
    verdict = (
        f"{run.section}: {'ok' if not found else 'FAILED'} — {len(cells)} faults; through "
        f"the proxy {totals['acknowledged']:,} acknowledged, lost {totals['lost']}, "
        f"duplicated {totals['duplicated']}"
    )
    if any(route.name == "direct" for route in routes):
        verdict += f"; time to resume over 1.5 x direct's: {', '.join(slower) or 'none'}"
    body = [run.description, "", *matrix.markdown()]
    rows = [*_client_rows(routes, matrix), *rows]
    if rows:
        body += ["", "| figure | value |", "| --- | --- |", *(f"| {n} | {v} |" for n, v in rows)]
    notes = [f"- {c.name} #{c.repetition + 1}: {n}" for c in cells for n in c.notes]
    if notes:
        body += ["", "Notes:", "", *notes]
    if found:
        body += ["", "**Did not hold:**", "", *(f"- {p}" for p in found)]
    Report(run.section, run.title, run.test, run.env).write(body, verdict, soak=run.soak)
    return matrix, found
