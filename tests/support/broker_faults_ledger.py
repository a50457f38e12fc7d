# Strategy: after a broker fault, hold four accounts against each other and say who is to
# blame for every disagreement:
#
#   acked     what the producer was told, per record (partition, offset or None, key, value)
#   answers   what the broker said, per Produce partition (the tap: error, base offset, count)
#   stored    what the broker has: the topic read back without the proxy, by (partition, offset)
#   consumed  what the consumer group handed to the application
#
# The proxy's promise is checked first and strictly: every acknowledgement a client got must
# be covered by a broker answer (error NONE with a base offset whose range contains the
# record's offset, or DUPLICATE_SEQUENCE_NUMBER for a success without an offset). An ack the
# broker never gave is the proxy's fault, always.
#
# Then the records. Content (key and value) is what must survive: an acked record must be in
# the topic and must be consumed. Where the broker itself broke its word, the tap shows it.
# Measured with tansu 0.6.0: an idempotent producer's re-sent batch (after a timeout, or after
# a kill -9 and restart) is answered DUPLICATE_SEQUENCE_NUMBER with base offset -1; librdkafka
# counts it as delivered and numbers its records -1 (no offset), 0, 1 ... After a kill -9 some
# of those batches are in no offset of the topic: Tansu kept the sequence, not the records.
# A success whose offsets overlap an earlier success ("reused") is treated the same way; it
# has not been seen so far. Records the broker vouched for like that and does not have are
# counted as the broker's losses and reported, never hidden; any other missing or different
# record is a failure. Duplicates are counted (redelivery to the consumer is allowed: it
# commits after processing).
"""Reconcile producer acks, broker answers, the stored topic and consumption."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from tests.support.broker_faults_tap import ProduceAnswer
from tests.support.broker_faults_traffic import Acked, Consumed

__all__ = ["DUPLICATE_SEQUENCE_NUMBER", "Ledger", "reconcile"]

NONE = 0
DUPLICATE_SEQUENCE_NUMBER = 46


@dataclass
class Ledger:
    """Counts and problems of one reconciliation; ``problems`` empty means it held."""

    acked: int = 0
    acked_without_offset: int = 0
    broker_answers: int = 0
    broker_reused_offset_answers: int = 0
    broker_duplicate_answers: int = 0
    unbacked: int = 0
    at_acked_slot: int = 0
    elsewhere_in_topic: int = 0
    lost_by_broker: int = 0
    missing: int = 0
    not_consumed: int = 0
    consumed: int = 0
    redelivered: int = 0
    stored: int = 0
    stored_duplicate_keys: int = 0
    stored_never_acked: int = 0
    problems: list[str] = field(default_factory=list)


def reconcile(
    acked: list[Acked],
    answers: Iterable[ProduceAnswer],
    stored: dict[tuple[int, int], tuple[bytes, bytes]],
    consumed: list[Consumed],
    topic: str,
) -> Ledger:
    """Hold the four accounts against each other (see the module comment)."""
    mine = [a for a in answers if a.topic == topic]
    successes = [a for a in mine if a.error_code == NONE]
    reused = _reused(successes)
    duplicates = [a for a in mine if a.error_code == DUPLICATE_SEQUENCE_NUMBER]
    where = {kv: slot for slot, kv in stored.items()}
    consumed_kv = {(c.key, c.value) for c in consumed}
    ledger = Ledger(
        acked=len(acked),
        acked_without_offset=sum(a.offset is None for a in acked),
        broker_answers=len(mine),
        broker_reused_offset_answers=len(reused),
        broker_duplicate_answers=len(duplicates),
        consumed=len(consumed),
        redelivered=len(consumed) - len({(c.partition, c.offset) for c in consumed}),
        stored=len(stored),
        stored_duplicate_keys=sum(n - 1 for n in Counter(k for k, _ in stored.values()).values()),
        stored_never_acked=len(set(stored) - {(a.partition, a.offset) for a in acked}),
    )
    unbacked, missing, not_consumed = [], [], []
    for record in acked:
        broker_vouched = _backed(record, successes, reused, duplicates)
        if broker_vouched is None:
            unbacked.append(record)
            continue
        kv = (record.key, record.value)
        slot = where.get(kv)
        if slot is not None and slot == (record.partition, record.offset):
            ledger.at_acked_slot += 1
        elif slot is not None:
            ledger.elsewhere_in_topic += 1
            if not broker_vouched:  # the broker gave this offset to this batch, first time
                missing.append(record)
        elif broker_vouched:  # "I have it already" (reused offset or duplicate): it has not
            ledger.lost_by_broker += 1
            continue
        else:
            missing.append(record)
            continue
        if kv not in consumed_kv:
            not_consumed.append(record)
    ledger.unbacked, ledger.missing, ledger.not_consumed = (
        len(unbacked),
        len(missing),
        len(not_consumed),
    )
    if unbacked:
        ledger.problems.append(
            f"{len(unbacked)} acks the broker never gave (the proxy's fault), e.g. {unbacked[:2]}"
        )
    if missing:
        ledger.problems.append(
            f"{len(missing)} acked records not in the topic where a clean broker answer put "
            f"them, e.g. {missing[:2]}"
        )
    if not_consumed:
        ledger.problems.append(
            f"{len(not_consumed)} acked records in the topic but never consumed, "
            f"e.g. {not_consumed[:2]}"
        )
    return ledger


def _reused(successes: list[ProduceAnswer]) -> set[ProduceAnswer]:
    """Success answers whose offsets overlap an earlier success answer's (same partition)."""
    seen: dict[int, list[ProduceAnswer]] = {}
    reused = set()
    for answer in sorted(successes, key=lambda a: a.answered_s):
        earlier = seen.setdefault(answer.partition, [])
        if any(_overlap(answer, other) for other in earlier):
            reused.add(answer)
        earlier.append(answer)
    return reused


def _overlap(a: ProduceAnswer, b: ProduceAnswer) -> bool:
    return a.base_offset < b.base_offset + b.record_count and b.base_offset < (
        a.base_offset + a.record_count
    )


def _backed(
    record: Acked,
    successes: list[ProduceAnswer],
    reused: set[ProduceAnswer],
    duplicates: list[ProduceAnswer],
) -> bool | None:
    """Which broker answer vouches for this ack.

    None: no answer does. False: only first-time success ranges cover its offset, so the
    broker put this very record there. True: the broker said "I have it already": a reused
    range covers the offset, or a DUPLICATE_SEQUENCE_NUMBER answer does. librdkafka counts
    such a batch as delivered and numbers its records from the answer's base offset, which
    Tansu sends as -1: the first record gets no offset, the next ones 0, 1, 2 ... (measured).
    """
    said_duplicate = [a for a in duplicates if a.partition == record.partition]
    if record.offset is None:
        return True if said_duplicate else None
    if any(a.covers(record.offset) for a in said_duplicate):
        return True
    covering = [a for a in successes if a.partition == record.partition and a.covers(record.offset)]
    if not covering:
        return None
    return any(a in reused for a in covering)
