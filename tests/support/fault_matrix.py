# Strategy: turn a run of cells (tests/support/fault_cells.py, or the proxy's own faults) into
# the matrix the issue asks for, fault x protocol x route: acknowledged, consumed, lost,
# duplicated, time to resume, judged by tests/support/verifiable_judge.py.
#
#   windows     cell i owns the acknowledgements from its fault to the next cell's fault; what
#               came before the first fault is the "before any fault" row, so every
#               acknowledged record is judged exactly once.
#   rows        one per fault x route x consumer protocol, summed over the fault's repetitions;
#               producer figures (acknowledged, duplicated in the log, producer resume) are the
#               route's and repeat on both protocol rows.
#   resume      the median over repetitions and the worst; through the proxy also as a ratio to
#               direct's median in the same run (the acceptance: within 1.5 times), reported,
#               never asserted: on a shared two-core machine a timing is not a verdict.
#   problems    what fails the test: a record lost (acknowledged, never consumed), missing from
#               the log or stored twice, a route that did not resume after a fault, a consumer
#               whose commits never reached the last acknowledged offsets.
"""The fault matrix: Kafka's judgement per fault, protocol and route, and its Markdown."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tests.support.verifiable_judge import Tally, acks_of, reads_of, tally
from tests.support.verifiable_routes import Route

__all__ = ["Matrix", "MatrixRow", "build_matrix"]

#: The acceptance's bound on time to resume through the proxy, relative to direct.
RESUME_RATIO_BOUND = 1.5
BEFORE = "before any fault"


@dataclass
class MatrixRow:
    """One fault x route x protocol, over its repetitions."""

    fault: str
    route: str
    protocol: str
    repetitions: int = 0
    acknowledged: int = 0
    consumed: int = 0
    lost: int = 0
    not_in_log: int = 0
    duplicated: int = 0
    redelivered: int = 0
    producer_resume_s: list[float | None] = field(default_factory=list)
    consumer_resume_s: list[float | None] = field(default_factory=list)
    lost_examples: list[str] = field(default_factory=list)

    def add(self, one: Tally, faulted: bool) -> None:
        self.repetitions += 1
        self.acknowledged += one.acknowledged
        self.consumed += one.consumed
        self.lost += one.lost
        self.not_in_log += one.not_in_log
        self.duplicated += one.duplicated
        self.redelivered += one.redelivered
        self.lost_examples = (self.lost_examples + one.lost_examples)[:3]
        if faulted:
            self.producer_resume_s.append(one.producer_resume_s)
            self.consumer_resume_s.append(one.consumer_resume_s)


@dataclass(frozen=True)
class FaultWindow:
    """A cell as the matrix sees it: its fault's name, when, and the partitions it hit."""

    fault: str
    fault_s: float
    until_s: float
    hit: Mapping[str, frozenset[int]]


def _median(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known and len(known) == len(values) else None


def _seconds(values: Sequence[float | None]) -> str:
    if not values:
        return "-"
    if any(v is None for v in values):
        return f"never ({sum(v is None for v in values)} of {len(values)})"
    known = [v for v in values if v is not None]
    median = statistics.median(known)
    return f"{median:.2f} s" if len(known) == 1 else f"{median:.2f} s (max {max(known):.2f})"


@dataclass
class Matrix:
    """Rows in fault order, and the problems that fail the test."""

    rows: list[MatrixRow]
    problems: list[str] = field(default_factory=list)

    def ratios(self, fault: str, protocol: str) -> tuple[float | None, float | None]:
        """Proxy's median time to resume over direct's, producer and consumer."""
        by_route = {r.route: r for r in self.rows if r.fault == fault and r.protocol == protocol}
        proxy, direct = by_route.get("proxy"), by_route.get("direct")
        if proxy is None or direct is None:
            return None, None
        found = []
        for side in ("producer_resume_s", "consumer_resume_s"):
            mine, theirs = _median(getattr(proxy, side)), _median(getattr(direct, side))
            found.append(mine / theirs if mine is not None and theirs else None)
        return found[0], found[1]

    def over_ratio(self) -> list[str]:
        """Faults where the proxy took over RESUME_RATIO_BOUND times direct's to resume."""
        found = []
        for row in self.rows:
            if row.route != "proxy":
                continue
            for side, ratio in zip(("producer", "consumer"), self.ratios(row.fault, row.protocol),
                                   strict=True):  # fmt: skip
                if ratio is not None and ratio > RESUME_RATIO_BOUND:
                    found.append(f"{row.fault} / {row.protocol}: {side} x{ratio:.2f}")
        return found

    def markdown(self) -> list[str]:
        has_direct = any(r.route == "direct" for r in self.rows)
        head = ["fault", "protocol", "route", "runs", "acknowledged", "consumed", "lost",
                "duplicated", "time to resume: producer", "consumer"]  # fmt: skip
        if has_direct:
            head.append("proxy ÷ direct (producer / consumer)")
        lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
        for row in self.rows:
            cells = [
                row.fault, row.protocol, row.route, str(row.repetitions),
                f"{row.acknowledged:,}", f"{row.consumed:,}", f"{row.lost:,}",
                f"{row.duplicated:,}", _seconds(row.producer_resume_s),
                _seconds(row.consumer_resume_s),
            ]  # fmt: skip
            if has_direct:
                producer, consumer = self.ratios(row.fault, row.protocol)
                cells.append(
                    "-" if row.route != "proxy" or row.fault == BEFORE
                    else f"{_ratio(producer)} / {_ratio(consumer)}"
                )  # fmt: skip
            lines.append("| " + " | ".join(cells) + " |")
        return lines

    def totals(self) -> dict[str, int]:
        """Acknowledged, consumed, lost, duplicated over every row of the proxy route."""
        rows = [r for r in self.rows if r.route == "proxy"]
        return {
            "acknowledged": sum(r.acknowledged for r in rows if r.protocol == rows[0].protocol),
            "lost": sum(r.lost + r.not_in_log for r in rows),
            "duplicated": sum(r.duplicated for r in rows if r.protocol == rows[0].protocol),
        }


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"x{value:.2f}"


def build_matrix(
    routes: Sequence[Route],
    windows: Sequence[FaultWindow],
    logs: Mapping[str, Counter[str]],
    caught_up: Mapping[str, float | None],
) -> Matrix:
    """The matrix of a run: ``windows`` in fault order, ``logs`` each route's topic as stored
    (value -> times), ``caught_up`` from verifiable_routes.finish."""
    rows: dict[tuple[str, str, str], MatrixRow] = {}
    order = [BEFORE, *dict.fromkeys(w.fault for w in windows)]
    ordered = sorted(windows, key=lambda w: w.fault_s)
    bounds = [w.fault_s for w in ordered]
    spans = [(BEFORE, 0.0, bounds[0] if bounds else float("inf"), None)] + [
        (w.fault, w.fault_s, bounds[i + 1] if i + 1 < len(ordered) else float("inf"), w)
        for i, w in enumerate(ordered)
    ]
    problems = []
    for route in routes:
        acks = acks_of(route.producer)
        for protocol, consumer in route.consumers.items():
            reads = reads_of(consumer)
            for fault, start, end, window in spans:
                hit = window.hit[route.name] if window is not None else frozenset()
                moment = None if window is None else (window.fault_s, window.until_s)
                one = tally(acks, reads, logs[route.name], (start, end), moment, hit)
                key = (fault, route.name, protocol)
                row = rows.setdefault(key, MatrixRow(fault, route.name, protocol))
                row.add(one, faulted=window is not None)
            if caught_up.get(f"{route.name}/{protocol}") is None:
                problems.append(
                    f"{route.name}/{protocol}: commits never reached the last acknowledged "
                    "offsets after the producer stopped (consumption did not resume)"
                )
    ordered_rows = sorted(
        rows.values(),
        key=lambda r: (order.index(r.fault), r.protocol, r.route != "proxy"),
    )
    for row in ordered_rows:
        where = f"{row.fault} / {row.protocol} / {row.route}"
        if row.lost:
            problems.append(f"{where}: {row.lost} acknowledged never consumed, e.g. "
                            f"{row.lost_examples}")  # fmt: skip
        if row.not_in_log:
            problems.append(f"{where}: {row.not_in_log} acknowledged missing from the log")
        if row.duplicated:
            problems.append(f"{where}: {row.duplicated} acknowledged stored more than once")
        for side in ("producer_resume_s", "consumer_resume_s"):
            if any(v is None for v in getattr(row, side)):
                problems.append(f"{where}: {side.split('_')[0]} never resumed after the fault")
    return Matrix(ordered_rows, problems)
