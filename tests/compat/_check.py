# Strategy: one pure function that says everything wrong with a round trip, in words.
#
# `check_roundtrip` compares a client's `Result` with the direct `Observation` and returns a
# list of problems (empty = the client round-tripped perfectly). It returns rather than
# asserts so that one run names every problem at once, and so its own tests can feed it
# hand-made broken data and check that each kind of breakage is named.
#
# What is compared, and why each matters for a proxy:
#   1. the topic holds exactly the records sent: nothing missing, duplicated or invented;
#   2. the group consumer returned exactly what is there, at the same partition and offset;
#   3. the producer was told the truth: every record acknowledged once, at the slot where
#      it really is (a proxy that answered a produce early, or twice, shows up here);
#   4. keyed semantics: one key, one partition, in the order it was produced;
#   5. the commit reached the broker: committed offset = last offset + 1 per partition.

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import TypeVar

from tests.compat._model import Consumed, Delivered, Observation, Record, Result

__all__ = ["check_roundtrip"]

T = TypeVar("T")

#: How many examples a problem line quotes; enough to debug, short enough to read.
_SAMPLE = 3


def check_roundtrip(result: Result, observed: Observation) -> list[str]:
    """Every way ``result`` differs from what a direct consumer ``observed``; [] if none."""
    records = result.job.records
    problems: list[str] = []
    problems += _check_topic(records, observed.records, result.job.partitions)
    problems += _check_consumed(result.report.consumed, observed.records)
    problems += _check_produced(records, result.report.produced, observed.records)
    problems += _check_keys(records, observed.records)
    problems += _check_committed(observed)
    return problems


def _check_topic(records: Sequence[Record], seen: Sequence[Consumed], partitions: int) -> list[str]:
    stored: Counter[tuple[str | None, str | None]] = Counter((r.key, r.value) for r in seen)
    sent: Counter[tuple[str | None, str | None]] = Counter((r.key, r.value) for r in records)
    problems = _multiset_diff("topic vs records sent", stored, sent)
    outside = [r for r in seen if not 0 <= r.partition < partitions]
    if outside:
        problems.append(f"records outside partitions 0..{partitions - 1}: {outside[:_SAMPLE]}")
    slots = Counter((r.partition, r.offset) for r in seen)
    reused = [slot for slot, count in slots.items() if count > 1]
    if reused:
        problems.append(f"direct read returned a (partition, offset) twice: {reused[:_SAMPLE]}")
    return problems


def _check_consumed(consumed: Sequence[Consumed], seen: Sequence[Consumed]) -> list[str]:
    return _multiset_diff("group consumer vs direct read", Counter(consumed), Counter(seen))


def _check_produced(
    records: Sequence[Record], produced: Sequence[Delivered], seen: Sequence[Consumed]
) -> list[str]:
    problems: list[str] = []
    if len(produced) != len(records):
        problems.append(f"producer acknowledged {len(produced)} records, sent {len(records)}")
    at_slot = {(r.partition, r.offset): r for r in seen}
    wrong = []
    for d in produced:
        there = at_slot.get((d.partition, d.offset))
        if there is None or (d.key is not None and (d.key, d.value) != (there.key, there.value)):
            wrong.append((d, there))
    if wrong:
        problems.append(
            f"{len(wrong)} producer reports do not match the record at that slot, e.g. "
            + "; ".join(f"{d} but found {there}" for d, there in wrong[:_SAMPLE])
        )
    slots = Counter((d.partition, d.offset) for d in produced)
    twice = [slot for slot, count in slots.items() if count > 1]
    if twice:
        problems.append(f"producer reported a slot more than once: {twice[:_SAMPLE]}")
    return problems


def _check_keys(records: Sequence[Record], seen: Sequence[Consumed]) -> list[str]:
    """One key, one partition; offsets rise in the order the records were produced."""
    where = {(r.key, r.value): r for r in seen}
    problems: list[str] = []
    by_key: dict[str, list[Consumed]] = {}
    for record in records:
        found = where.get((record.key, record.value))
        if found is not None:
            by_key.setdefault(record.key, []).append(found)
    split = {k: sorted({c.partition for c in cs}) for k, cs in by_key.items()}
    split = {k: ps for k, ps in split.items() if len(ps) > 1}
    if split:
        problems.append(
            f"{len(split)} keys spread over several partitions, e.g. "
            f"{list(split.items())[:_SAMPLE]}"
        )
    reordered = [k for k, cs in by_key.items() if _not_rising(c.offset for c in cs)]
    if reordered:
        problems.append(
            f"{len(reordered)} keys stored out of production order, e.g. {reordered[:_SAMPLE]}"
        )
    return problems


def _check_committed(observed: Observation) -> list[str]:
    """Committed = last offset + 1 where there is data; nothing or 0 where there is none."""
    ends: dict[int, int] = {}
    for r in observed.records:
        ends[r.partition] = max(ends.get(r.partition, 0), r.offset + 1)
    problems = [
        f"partition {p}: committed {observed.committed.get(p)}, expected {end}"
        for p, end in sorted(ends.items())
        if observed.committed.get(p) != end
    ]
    problems += [
        f"partition {p} has no records but committed {offset}"
        for p, offset in sorted(observed.committed.items())
        if p not in ends and offset != 0
    ]
    return problems


def _multiset_diff(what: str, got: Counter[T], expected: Counter[T]) -> list[str]:
    missing = expected - got
    extra = got - expected
    problems = []
    if missing:
        problems.append(
            f"{what}: {missing.total()} missing, e.g. {sorted(missing, key=repr)[:_SAMPLE]}"
        )
    if extra:
        problems.append(
            f"{what}: {extra.total()} extra or duplicated, e.g. {sorted(extra, key=repr)[:_SAMPLE]}"
        )
    return problems


def _not_rising(offsets: Iterable[int]) -> bool:
    previous = -1
    for offset in offsets:
        if offset <= previous:
            return True
        previous = offset
    return False
