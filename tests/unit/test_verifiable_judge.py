"""The fault tests' judge (tests/support/verifiable_judge.py) on made-up events: a judge that
miscounted would pass runs that lost records, so its rules are pinned here."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.support.verifiable_judge import Ack, Read, flowing, resumed_after, tally

FAULT_S = 100.0


def _acks(*items: tuple[str, int, float]) -> list[Ack]:
    return [Ack(value, partition, offset, at_s) for offset, (value, partition, at_s) in
            enumerate(items)]  # fmt: skip


def test_an_acknowledged_record_never_consumed_is_lost_and_one_stored_twice_duplicated() -> None:
    acks = _acks(("1.0", 0, 99.0), ("1.1", 1, 99.5), ("1.2", 0, 101.0))
    reads = [Read("1.0", 0, 0, 99.1), Read("1.0", 0, 0, 99.2), Read("1.2", 0, 2, 101.1)]
    log = Counter({"1.0": 1, "1.1": 2, "1.2": 0})

    found = tally(acks, reads, log, (0.0, float("inf")))

    assert (found.acknowledged, found.consumed, found.lost) == (3, 2, 1)
    assert found.lost_examples == ["1.1"]
    assert (found.duplicated, found.not_in_log, found.redelivered) == (1, 1, 1)


def test_a_window_judges_only_the_acknowledgements_that_came_within_it() -> None:
    acks = _acks(("1.0", 0, 99.0), ("1.1", 0, 100.5), ("1.2", 0, 102.0))
    reads = [Read(a.value, a.partition, a.offset, a.at_s + 0.1) for a in acks]

    found = tally(acks, reads, Counter(a.value for a in acks), (100.0, 102.0))

    assert (found.acknowledged, found.consumed, found.lost) == (1, 1, 0)


def test_resuming_is_the_end_of_the_longest_pause_not_an_answer_already_in_flight() -> None:
    # Acknowledgements every 0.1 s, one more just after the fault (the dying leader's answer
    # on its way), then nothing for 6 s, then steady again.
    times = [FAULT_S - 1 + i / 10 for i in range(10)] + [FAULT_S + 0.01]
    times += [FAULT_S + 6.2 + i / 10 for i in range(10)]
    acks = _acks(*((f"1.{i}", 0, t) for i, t in enumerate(times)))

    assert resumed_after(acks, FAULT_S, FAULT_S + 10, {0}) == pytest.approx(6.2)
    assert resumed_after(acks, FAULT_S, FAULT_S + 10, {1}) is None  # nothing on partition 1
    assert flowing(acks, {0}, FAULT_S + 7.0)
    assert not flowing(acks, {0}, FAULT_S + 9.0)


def test_with_no_pause_resuming_is_at_once() -> None:
    times = [FAULT_S - 1 + i / 10 for i in range(30)]
    acks = _acks(*((f"1.{i}", 0, t) for i, t in enumerate(times)))

    found = resumed_after(acks, FAULT_S, FAULT_S + 2, {0})

    assert found is not None and found < 0.2
