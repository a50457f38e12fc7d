"""The matrix checker names each kind of breakage a client or a proxy could cause.

The round trips here are hand-made (no broker): a perfect one, then one defect at a time,
so each check is shown to fail when it should — a checker that always passes would make
the whole matrix meaningless.
"""

from __future__ import annotations

from dataclasses import replace

from tests.compat._check import check_roundtrip
from tests.compat._model import (
    ClientReport,
    Consumed,
    Delivered,
    Job,
    Observation,
    Result,
    make_records,
)

PARTITIONS = 3


def perfect(n: int = 250) -> tuple[Result, Observation]:
    """A flawless round trip: keys hashed to partitions, offsets dense from 0, all committed."""
    records = make_records(n)
    ends = [0] * PARTITIONS
    stored = []
    for record in records:
        partition = int(record.key.removeprefix("key-")) % PARTITIONS
        stored.append(Consumed(partition, ends[partition], record.key, record.value))
        ends[partition] += 1
    produced = tuple(Delivered(c.partition, c.offset, c.key, c.value) for c in stored)
    job = Job("127.0.0.1:1", "topic", PARTITIONS, "group", records)
    result = Result("synthetic", job, ClientReport(produced, tuple(stored)), 0.0)
    return result, Observation(tuple(stored), dict(enumerate(ends)))


def with_report(
    result: Result,
    *,
    produced: tuple[Delivered, ...] | None = None,
    consumed: tuple[Consumed, ...] | None = None,
) -> Result:
    report = result.report
    return replace(
        result,
        report=replace(
            report,
            produced=report.produced if produced is None else produced,
            consumed=report.consumed if consumed is None else consumed,
        ),
    )


def test_perfect_roundtrip_has_no_problems() -> None:
    result, observed = perfect()
    assert check_roundtrip(result, observed) == []


def test_slot_only_producer_reports_are_enough() -> None:
    """kcat reports partition and offset without the record; that alone is not a problem."""
    result, observed = perfect()
    anonymous = tuple(Delivered(d.partition, d.offset) for d in result.report.produced)
    assert check_roundtrip(with_report(result, produced=anonymous), observed) == []


def test_record_missing_from_topic() -> None:
    result, observed = perfect()
    lost = replace(observed, records=observed.records[1:])
    problems = check_roundtrip(with_report(result, consumed=lost.records), lost)
    assert any(p.startswith("topic vs records sent: 1 missing") for p in problems)


def test_record_duplicated_in_topic() -> None:
    result, observed = perfect()
    first = observed.records[0]
    again = Consumed(first.partition, 10_000, first.key, first.value)
    doubled = replace(observed, records=(*observed.records, again))
    problems = check_roundtrip(with_report(result, consumed=doubled.records), doubled)
    assert any(p.startswith("topic vs records sent: 1 extra or duplicated") for p in problems)


def test_group_consumer_missed_a_record() -> None:
    result, observed = perfect()
    problems = check_roundtrip(with_report(result, consumed=result.report.consumed[:-1]), observed)
    assert problems == [
        f"group consumer vs direct read: 1 missing, e.g. [{observed.records[-1]!r}]"
    ]


def test_group_consumer_saw_a_record_twice() -> None:
    result, observed = perfect()
    twice = (*result.report.consumed, result.report.consumed[0])
    problems = check_roundtrip(with_report(result, consumed=twice), observed)
    assert problems == [
        "group consumer vs direct read: 1 extra or duplicated, "
        f"e.g. [{result.report.consumed[0]!r}]"
    ]


def test_group_consumer_saw_a_different_offset() -> None:
    result, observed = perfect()
    first = result.report.consumed[0]
    moved = (replace(first, offset=first.offset + 1), *result.report.consumed[1:])
    problems = check_roundtrip(with_report(result, consumed=moved), observed)
    assert len(problems) == 2  # the moved copy is extra, the real one is missing
    assert all(p.startswith("group consumer vs direct read") for p in problems)


def test_producer_told_a_wrong_offset() -> None:
    result, observed = perfect()
    first = result.report.produced[0]
    lie = (replace(first, offset=first.offset + 1), *result.report.produced[1:])
    problems = check_roundtrip(with_report(result, produced=lie), observed)
    assert any("producer reports do not match the record at that slot" in p for p in problems)
    assert any("producer reported a slot more than once" in p for p in problems)


def test_producer_acknowledged_fewer_records() -> None:
    result, observed = perfect()
    problems = check_roundtrip(with_report(result, produced=result.report.produced[:-5]), observed)
    assert problems == ["producer acknowledged 245 records, sent 250"]


def test_key_spread_over_two_partitions() -> None:
    result, observed = perfect()
    last = observed.records[-1]  # key-49: its third record, moved to another partition
    moved = replace(last, partition=(last.partition + 1) % PARTITIONS, offset=10_000)
    stored = (*observed.records[:-1], moved)
    produced = (
        *result.report.produced[:-1],
        Delivered(moved.partition, 10_000, last.key, last.value),
    )
    broken = replace(observed, records=stored, committed={})
    problems = check_roundtrip(with_report(result, consumed=stored, produced=produced), broken)
    assert any(p.startswith("1 keys spread over several partitions") for p in problems)


def test_key_stored_out_of_production_order() -> None:
    result, observed = perfect()
    by_value = {c.value: c for c in observed.records}
    a, b = by_value["compat record 0"], by_value["compat record 100"]  # both key-0, same partition
    swapped = tuple(
        replace(c, offset=b.offset) if c == a else replace(c, offset=a.offset) if c == b else c
        for c in observed.records
    )
    produced = tuple(Delivered(c.partition, c.offset, c.key, c.value) for c in swapped)
    problems = check_roundtrip(
        with_report(result, consumed=swapped, produced=produced),
        replace(observed, records=swapped),
    )
    assert problems == ["1 keys stored out of production order, e.g. ['key-0']"]


def test_commit_missing_or_short() -> None:
    result, observed = perfect()
    short = dict(observed.committed)
    short[0] -= 1
    del short[1]
    problems = check_roundtrip(result, replace(observed, committed=short))
    assert problems == [
        f"partition 0: committed {short[0]}, expected {observed.committed[0]}",
        f"partition 1: committed None, expected {observed.committed[1]}",
    ]


def test_commit_on_an_empty_partition_must_be_zero() -> None:
    result, observed = perfect(n=2)  # key-0 -> partition 0, key-1 -> partition 1
    assert observed.committed[2] == 0
    problems = check_roundtrip(result, replace(observed, committed={**observed.committed, 2: 7}))
    assert problems == ["partition 2 has no records but committed 7"]
