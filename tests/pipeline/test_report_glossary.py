"""Every outcome the proxy can write is defined in report.md, from the list the code uses.

The proxy's records take ``proxy.observability.outcomes.Outcome`` (a Literal type), so mypy --strict
(make lint) rejects any other outcome the code would write; these tests hold the glossary and the
report to that same type.
"""

from __future__ import annotations

import collections
import typing

from proxy.connection.records import Recorder, request_record
from proxy.held.fetch.client import FetchAnswer
from proxy.observability.outcomes import MEANINGS, OUTCOMES, Outcome
from proxy.observability.request_log import RequestRecord
from tests.pipeline._traffic import TrafficRun


def test_every_outcome_has_a_meaning() -> None:
    assert set(OUTCOMES) == set(typing.get_args(Outcome)) == set(MEANINGS)
    assert all(meaning.strip() for meaning in MEANINGS.values())


def test_the_code_writes_outcomes_of_that_type() -> None:
    # Where an outcome enters a record: the record itself, the function that builds it, the
    # connection's report of a finished request and a held fetch's answer.
    hints = [
        typing.get_type_hints(RequestRecord)["outcome"],
        typing.get_type_hints(FetchAnswer)["outcome"],
        typing.get_type_hints(request_record)["outcome"],
        typing.get_type_hints(Recorder.report)["outcome"],
    ]
    assert hints == [Outcome] * 4


def test_report_md_defines_every_outcome(traffic_run: TrafficRun) -> None:
    report = (traffic_run.out / "report.md").read_text()
    counts = collections.Counter(record["outcome"] for record in traffic_run.log)
    for outcome in OUTCOMES:  # the ones this log lacks too, with 0
        assert f"| {outcome} | {counts.get(outcome, 0)} | {MEANINGS[outcome]} |" in report
    assert set(counts) <= set(OUTCOMES)
