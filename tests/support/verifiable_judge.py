# Strategy: judge a run of Kafka's verifiable clients the way Kafka's own system tests judge its
# brokers (apache/kafka:tests/kafkatest/tests/end_to_end.py, utils/util.py `validate_delivery`),
# plus the log itself, read without the proxy:
#
#   acknowledged  every `producer_send_success` the VerifiableProducer printed: the value (an
#                 increasing integer, with the route's prefix), its partition and offset.
#   consumed      every `record_data` a VerifiableConsumer printed (--verbose).
#   lost          Kafka's "missing": acknowledged values never consumed. Kafka then looks for
#                 them in the data files to tell a lost record from a consumer that skipped
#                 one; here the log read straight from the cluster says which (`not_in_log`).
#   duplicated    with the idempotent producer, an acknowledged value stored more than once in
#                 the log (the log, not the consumer: a consumer that re-reads after a failed
#                 commit is at-least-once by design, counted as `redelivered`).
#   resumed       Kafka's "consumption resumes": after the producer stops, every consumer's last
#                 successful commit reaches each partition's last acknowledged offset + 1.
#   time to       from the fault to the end of the longest pause in acknowledgements on the
#   resume        partitions the fault hit (the producer), and in records a consumer got from
#                 them (each consumer), within the cell: the first acknowledgement after the
#                 outage. Not simply the first after the fault: answers to requests the broker
#                 served just before it died arrive after the fault and say nothing about
#                 resuming; the pause they precede does. With no pause (a clean hand-over) it is
#                 the longest ordinary gap, a fraction of a second. Both clients stamp their
#                 events in the JVM when the acknowledgement or poll happened (ms since the
#                 epoch), and faults are stamped with time.time(): one clock.
#
# A run is cut into windows, one per fault: a window runs from its fault to the next fault (the
# first from the clients' start), and an acknowledgement belongs to the window its acknowledgement
# time falls in, so every record is judged exactly once.
"""Kafka's judgement of a verifiable-client run: acknowledged, consumed, lost, duplicated."""

from __future__ import annotations

import itertools
import time
import uuid
from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field

from confluent_kafka import Consumer, TopicPartition

from testbed.kafka_tools import KafkaTool, ToolEvent, event_time_s

#: Clients count as flowing again once they had an event on the hit partitions this recently.
FLOWING_S = 1.0

__all__ = [
    "Ack",
    "Read",
    "Tally",
    "acks_of",
    "committed_of",
    "flowing",
    "read_log",
    "reads_of",
    "resumed_after",
    "send_errors_of",
    "tally",
]


@dataclass(frozen=True)
class Ack:
    """A record the VerifiableProducer was told is stored (partition, offset), and when."""

    value: str
    partition: int
    offset: int
    at_s: float


@dataclass(frozen=True)
class Read:
    """A record a consumer handed to its application, and when."""

    value: str
    partition: int
    offset: int
    at_s: float


def _record(e: ToolEvent) -> tuple[str, int, int, float]:
    """A record event's value, partition, offset and time (acknowledged or consumed alike)."""
    return str(e.data["value"]), int(e.data["partition"]), int(e.data["offset"]), event_time_s(e)


def _ack(e: ToolEvent) -> Ack:
    return Ack(*_record(e))


def _read(e: ToolEvent) -> Read:
    return Read(*_record(e))


def acks_of(producer: KafkaTool) -> list[Ack]:
    """The producer's acknowledgements so far (each event converted once: KafkaTool.converted)."""
    return producer.converted("producer_send_success", _ack)


def send_errors_of(producer: KafkaTool) -> list[str]:
    """The producer's `producer_send_error` events: value and exception, for the report."""
    return [
        f"{e.data.get('value')}: {e.data.get('exception')} {e.data.get('message')}"
        for e in producer.named("producer_send_error")
    ]


def reads_of(consumer: KafkaTool) -> list[Read]:
    """The records the consumer handed on so far (each event converted once)."""
    return consumer.converted("record_data", _read)


def committed_of(consumer: KafkaTool) -> dict[int, int]:
    """Per partition, the highest offset the consumer committed successfully."""
    found: dict[int, int] = {}
    for event in consumer.named("offsets_committed"):
        if event.data.get("success"):
            for entry in event.data.get("offsets") or []:
                partition = int(entry["partition"])
                found[partition] = max(found.get(partition, -1), int(entry["offset"]))
    return found


def resumed_after(
    events: Iterable[Ack | Read], fault_s: float, until_s: float, hit: Collection[int]
) -> float | None:
    """Seconds from ``fault_s`` to the end of the longest pause between ``events`` on ``hit``
    partitions, from the last one before the fault to ``until_s``; None if none came after."""
    times = sorted(e.at_s for e in events if e.partition in hit and e.at_s <= until_s)
    before = [t for t in times if t <= fault_s]
    after = [t for t in times if t > fault_s]
    if not after:
        return None
    points = [before[-1] if before else fault_s, *after]
    # Gaps equal to the millisecond are one length, and the earliest of them counts: with no
    # pause at all (steady gaps) the clients resumed at once, not at the last steady gap.
    _, _, end = max((round(b - a, 3), -b, b) for a, b in itertools.pairwise(points))
    return end - fault_s


def flowing(events: Sequence[Ack | Read], hit: Collection[int], now_s: float) -> bool:
    """Whether the newest of ``events`` on a ``hit`` partition is at most FLOWING_S old."""
    newest = max((e.at_s for e in events if e.partition in hit), default=0.0)
    return now_s - newest <= FLOWING_S


@dataclass
class Tally:
    """One window of one route (and one consumer): Kafka's figures for it."""

    acknowledged: int = 0
    consumed: int = 0
    lost: int = 0
    not_in_log: int = 0
    duplicated: int = 0
    redelivered: int = 0
    producer_resume_s: float | None = None
    consumer_resume_s: float | None = None
    lost_examples: list[str] = field(default_factory=list)


def tally(
    acks: Sequence[Ack],
    reads: Sequence[Read],
    log: Counter[str],
    window: tuple[float, float],
    fault: tuple[float, float] | None = None,
    hit: Collection[int] = (),
) -> Tally:
    """The figures of the acknowledgements that came within ``window`` [start, end): how many
    the consumer got, lost (never consumed), missing from the ``log`` (value -> times stored),
    stored more than once; and, for a ``fault`` (its time, and when the clients were seen
    flowing again) on partitions ``hit``, the times to resume."""
    start, end = window
    mine = [a for a in acks if start <= a.at_s < end]
    values = {a.value for a in mine}
    seen = Counter(r.value for r in reads if r.value in values)
    lost = sorted(values - set(seen))
    result = Tally(
        acknowledged=len(mine),
        consumed=len(set(seen)),
        lost=len(lost),
        not_in_log=sum(1 for v in values if log[v] == 0),
        duplicated=sum(1 for v in values if log[v] > 1),
        redelivered=sum(n - 1 for n in seen.values()),
        lost_examples=lost[:3],
    )
    if fault is not None:
        fault_s, until_s = fault
        result.producer_resume_s = resumed_after(acks, fault_s, until_s, hit)
        result.consumer_resume_s = resumed_after(reads, fault_s, until_s, hit)
    return result


def read_log(
    bootstrap: str,
    topic: str,
    partitions: int,
    *,
    isolation: str = "read_uncommitted",
    timeout_s: float = 60.0,
) -> list[Read]:
    """Every record of ``topic`` as the cluster at ``bootstrap`` (never the proxy) has it, from
    the beginning to each partition's end when the read starts, without a group. With
    ``isolation="read_committed"`` aborted records and transaction markers are skipped (the
    position, not the last record, says when a partition is done).

    Raises:
        AssertionError: a partition's end was not reached within ``timeout_s``.
    """
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"read-log-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    found: list[Read] = []
    try:
        wanted = [TopicPartition(topic, p) for p in range(partitions)]
        ends = {tp.partition: consumer.get_watermark_offsets(tp, timeout=30)[1] for tp in wanted}
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + timeout_s
        while True:
            for msg in consumer.consume(num_messages=1000, timeout=0.2):
                if msg.error() is not None:
                    continue
                value = msg.value()
                partition, offset = msg.partition(), msg.offset()
                assert isinstance(value, bytes) and partition is not None and offset is not None
                found.append(Read(value.decode(), partition, offset, time.time()))
            positions = {tp.partition: tp.offset for tp in consumer.position(wanted)}
            if all(end == 0 or positions[p] >= end for p, end in ends.items()):
                return found
            if time.monotonic() > deadline:
                raise AssertionError(f"{topic}: read {positions} of {ends} in {timeout_s:g} s")
    finally:
        consumer.close()
