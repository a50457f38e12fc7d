"""Fetches the proxy did not hold are counted beside the ones the purgatory held.

The kinds (not held, held then woken by data, held to the deadline, forwarded on the
bootstrap port, error) are recomputed in plain Python (tests/pipeline/_plain.py's
fetch_answer, which shares no code with the report) over the real traffic's log and the
cluster run's synthetic log.
"""

from __future__ import annotations

import collections

import pytest

from pipeline.tables import ACCURACY
from pipeline.waits import EXPIRED, FETCH_ANSWERS, FORWARDED, NOT_HELD, WOKEN
from tests.pipeline._cluster import ClusterRun
from tests.pipeline._plain import fetch_answer, percentile_bounds
from tests.pipeline._traffic import WAKE_MAX_WAIT_MS, TrafficRun


@pytest.mark.parametrize("which", ["traffic", "cluster"])
def test_fetch_answers_equal_plain_python(
    which: str, traffic_run: TrafficRun, cluster_run: ClusterRun
) -> None:
    records = traffic_run.log if which == "traffic" else cluster_run.log.records
    summary = (traffic_run if which == "traffic" else cluster_run).summary["fetch_answers"]
    fetches = [record for record in records if record["api"] == "Fetch"]
    kinds = collections.Counter(fetch_answer(record) for record in fetches)
    assert {kind: row["requests"] for kind, row in summary.items()} == dict(kinds)
    assert list(summary) == [kind for kind in FETCH_ANSWERS if kind in kinds]  # listed in order
    for kind, row in summary.items():
        assert row["share"] == pytest.approx(kinds[kind] / len(fetches))
        of_kind = [record for record in fetches if fetch_answer(record) == kind]
        for field, prefix, ps in (("latency_ms", "", (50, 95, 99)), ("held_ms", "held_", (50, 99))):
            values = [record[field] for record in of_kind]
            for p in ps:
                low, high = percentile_bounds(values, p / 100, ACCURACY)
                assert low <= row[f"{prefix}p{p}_ms"] <= high, (kind, field, p)


def test_the_traffic_was_answered_every_way(traffic_run: TrafficRun) -> None:
    answers = traffic_run.summary["fetch_answers"]
    assert {NOT_HELD, WOKEN, EXPIRED, FORWARDED} <= set(answers)
    # The fetch held until a produce woke it: held, far shorter than its max wait.
    (woken,) = [r for r in traffic_run.log if r["client_id"] == "woken"]
    assert woken["outcome"] == "ok" and 0 < woken["held_ms"] < WAKE_MAX_WAIT_MS
    assert fetch_answer(woken) == WOKEN
    # The raw long-polls on the bootstrap port were forwarded: the broker waited, not the proxy.
    polls = [r for r in traffic_run.log if r["client_id"] == "poller"]
    assert {fetch_answer(record) for record in polls} == {FORWARDED}


def test_report_md_counts_them_side_by_side(traffic_run: TrafficRun) -> None:
    report = (traffic_run.out / "report.md").read_text()
    section = report.split("\n## Fetches: held or not\n", 1)[1].split("\n## ")[0]
    answers = traffic_run.summary["fetch_answers"]
    fetches = sum(row["requests"] for row in answers.values())
    held = answers[WOKEN]["requests"] + answers[EXPIRED]["requests"]
    assert f"{fetches} fetches; the proxy held {held} ({held / fetches:.1%})" in section
    for kind, row in answers.items():
        assert f"| {kind} | {row['requests']} | {row['share']:.1%} |" in section
    for kind, meaning in FETCH_ANSWERS.items():
        assert f"- **{kind}**: {meaning}." in section
    # "Not held" is no promise of speed: the page says why one can take long.
    assert "answers go back in request order" in FETCH_ANSWERS[NOT_HELD]
