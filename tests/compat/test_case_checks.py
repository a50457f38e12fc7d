"""The checkers of the matrix's cases name each kind of breakage a client or a proxy could cause.

Hand-made runs (no broker): a perfect one passes, then one defect at a time must be named,
so that no case of the matrix can pass by checking nothing: the feature cases
(tests/compat/_cases.py), transactions, share consumers, and the group of three.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from tests.compat._cases import CaseRun, Event, Stored, check_case, digest, topics
from tests.compat._group_consume import Event as GroupEvent
from tests.compat._group_consume import _Group, check
from tests.compat._share import ShareRun, check_share
from tests.compat._transactions import TxnRun, check_transactions


def _perfect_case(case: str) -> tuple[CaseRun, dict[str, Stored]]:
    """A flawless run of ``case``: records by key hash (or their named partition), dense
    offsets, consumed and reported exactly where they are stored, stored with the codec."""
    case_topics = topics(case, "t", "run")
    stored: dict[str, Stored] = {}
    events: list[Event] = []
    for topic in case_topics:
        ends = [0] * topic.partitions
        mine = []
        for r in topic.records:
            p = r.partition if r.partition >= 0 else int(r.key.split("-")[1]) % topic.partitions
            mine.append(Event(topic.name, p, ends[p], r.key, digest(r.value), r.headers))
            ends[p] += 1
        codecs = Counter({topic.compression or "none": 3})
        stored[topic.name] = Stored(tuple(mine), codecs)
        events += mine
    run = CaseRun("synthetic", case, tuple(case_topics), tuple(events), tuple(events), 0.0)
    return run, stored


def test_a_perfect_run_of_every_case_passes() -> None:
    for case in ("codecs", "large", "partitions", "headers"):
        run, stored = _perfect_case(case)
        assert check_case(run, stored) == [], case


def test_a_tombstone_read_back_as_an_empty_value_is_named() -> None:
    run, stored = _perfect_case("headers")
    name = run.topics[0].name
    records = stored[name].records
    tombstone = next(e for e in records if e.value is None)
    emptied = replace(tombstone, value=digest(b""))
    consumed = tuple(emptied if e == tombstone else e for e in run.consumed)
    missing, extra = check_case(replace(run, consumed=consumed), stored)
    assert missing.startswith(f"{name}: consumed vs stored: 1 missing")
    assert extra.startswith(f"{name}: consumed vs stored: 1 extra")
    assert "value='0:e3b0c44298fc1c14'" in extra  # the digest of b"", where null was stored


def test_a_header_lost_on_the_way_is_named() -> None:
    run, stored = _perfect_case("headers")
    name = run.topics[0].name
    first = stored[name].records[0]
    fewer = replace(first, headers=first.headers[:-1])
    held = tuple(fewer if e == first else e for e in stored[name].records)
    problems = check_case(run, {name: replace(stored[name], records=held)})
    assert any("stored vs the case" in p for p in problems)


def test_a_batch_stored_without_its_codec_is_named() -> None:
    run, stored = _perfect_case("codecs")
    name = run.topics[2].name  # lz4
    stored[name] = replace(stored[name], codecs=Counter({"lz4": 2, "none": 1}))
    assert check_case(run, stored) == [
        f"{name}: stored batches by codec {{'lz4': 2, 'none': 1}}, all should be lz4"
    ]


def test_a_record_outside_its_named_partition_is_named() -> None:
    run, stored = _perfect_case("partitions")
    name = run.topics[0].name
    first = stored[name].records[0]
    moved = replace(first, partition=first.partition + 1, offset=99)
    held = tuple(moved if e == first else e for e in stored[name].records)
    consumed = tuple(moved if e == first else e for e in run.consumed)
    produced = tuple(moved if e == first else e for e in run.produced)
    problems = check_case(
        replace(run, consumed=consumed, produced=produced),
        {name: replace(stored[name], records=held)},
    )
    assert problems == [f"{name}: records outside their named partition, e.g. [{moved!r}]"]


def test_a_produce_report_at_the_wrong_slot_is_named() -> None:
    run, stored = _perfect_case("large")
    first = run.produced[0]
    lie = (replace(first, offset=first.offset + 1), *run.produced[1:])
    problems = check_case(replace(run, produced=lie), stored)
    assert any("produce reports not matching their slot" in p for p in problems)
    assert any("reported for more than one produce" in p for p in problems)


def _txn() -> tuple[TxnRun, list[tuple[int, int, str | None, str | None]]]:
    committed = tuple((0, i, "k", f"c{i}") for i in range(200))
    aborted = tuple((1, i, "k", f"a{i}") for i in range(100))
    run = TxnRun("synthetic", committed, aborted, committed, ("commit", "abort", "commit"))
    return run, [*committed, *aborted]


def test_transactions_perfect_and_each_defect_named() -> None:
    run, log = _txn()
    committed = list(run.committed)
    assert check_transactions(run, committed, log) == []
    leaked = replace(run, consumed=(*run.consumed, run.aborted[0]))
    problems = check_transactions(leaked, committed, log)
    assert any("saw 1 aborted records" in p for p in problems)
    assert any("client read_committed vs committed: 1 extra" in p for p in problems)
    lost = check_transactions(replace(run, consumed=run.consumed[1:]), committed, log)
    assert lost == [f"client read_committed vs committed: 1 missing, e.g. [{run.committed[0]!r}]"]
    # Aborted records that never reached the log prove nothing: named too.
    assert any("not in the log" in p for p in check_transactions(run, committed, committed))


def test_share_consumer_redelivery_and_loss_are_named() -> None:
    stored = [(0, i, "k", f"v{i}") for i in range(300)]
    run = ShareRun(tuple(stored), tuple(stored), ("delivery 1",) * 300, 300, 0.0)
    assert check_share(run, stored) == []
    again = replace(run, consumed=(*stored, stored[0]), deliveries=(*run.deliveries, "delivery 2"))
    problems = check_share(again, stored)
    assert any("1 extra or redelivered" in p for p in problems)
    assert any("not on their first delivery" in p for p in problems)
    assert any("acknowledged 300, consumed 301" in p for p in problems)


def _group_event(at_s: float, member: str, kind: str, *fields: str) -> GroupEvent:
    return GroupEvent(at_s, member, kind, fields)


def test_group_of_three_duplicate_across_the_leave_is_named() -> None:
    counts = {0: 4}
    timeline = [
        _group_event(0.1, "A", "consumed", "0", "0", "0:0"),
        _group_event(0.2, "A", "consumed", "0", "1", "0:1"),
        _group_event(0.3, "B", "consumed", "0", "1", "0:1"),  # redelivered after the leave
        _group_event(0.4, "B", "consumed", "0", "2", "0:2"),
        _group_event(0.5, "B", "consumed", "0", "3", "0:3"),
    ]
    [problem] = check(timeline, counts)
    assert problem.startswith("partition 0: 5 deliveries of 4 records; duplicates [1]")


def test_assignment_events_fold_for_eager_and_incremental_members() -> None:
    group = _Group("synthetic", [], {0: 1})
    member = type("M", (), {"name": "A"})()
    group.timeline += [
        _group_event(0.0, "A", "assigned", "0,1,2"),  # eager: the whole set
        _group_event(1.0, "A", "revoked", "0,1,2"),
        _group_event(1.1, "A", "assigned", ""),
    ]
    assert not group.has_partitions(member)  # type: ignore[arg-type]
    group.timeline += [
        _group_event(2.0, "A", "assigned", "4"),  # incremental: one more
        _group_event(3.0, "A", "revoked", ""),
    ]
    assert group.has_partitions(member)  # type: ignore[arg-type]
