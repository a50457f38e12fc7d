# Strategy: after a broker fault, hold what the clients were told against what is true, and
# demand exact agreement: Apache Kafka with acks=all (on one node, or on three with min ISR 2)
# loses nothing it acknowledged, and its idempotent producer writes each record once, so any
# difference is a fault of the path between them, the proxy.
#
#   acked      what the producer was told, per record (partition, offset, key, value)
#   stored     what the broker has: the topic read without the proxy, by (partition, offset)
#   consumed   what the consumer group handed to the application
#   committed  the group's committed offsets and the partitions' ends, from the cluster
#
# The rules: every acknowledgement's record is at exactly its offset with exactly its key and
# value. One exception, measured with the clients straight on the cluster as well: when a
# leader changes, librdkafka re-sends a batch the new leader already has, Kafka answers it as a
# duplicate, and librdkafka reports its records delivered without an offset; such a record
# must then be in its partition once (counted, never hidden). The topic holds nothing else
# (no duplicate, no record whose
# acknowledgement never came: the producer's deliveries all succeed in these scenarios, which
# the scenario checks on its own); every stored record was consumed at its offset; the group
# committed every partition to its end. Redelivery to the consumer is allowed and counted (it
# commits after processing: at-least-once), never hidden.
"""Reconcile producer acks, the stored topic, consumption and committed offsets exactly."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from tests.support.broker_faults_traffic import Acked, Committed, Consumed

__all__ = ["Ledger", "reconcile"]


@dataclass
class Ledger:
    """Counts and problems of one reconciliation; ``problems`` empty means it held."""

    acked: int = 0
    acked_without_offset: int = 0
    stored: int = 0
    consumed: int = 0
    redelivered: int = 0
    lost: int = 0
    unacked_in_topic: int = 0
    duplicates_in_topic: int = 0
    not_consumed: int = 0
    problems: list[str] = field(default_factory=list)


def reconcile(
    acked: list[Acked],
    stored: dict[tuple[int, int], tuple[bytes, bytes]],
    consumed: list[Consumed],
    committed: Committed,
) -> Ledger:
    """Hold the four accounts against each other (see the module comment)."""
    ledger = Ledger(
        acked=len(acked),
        stored=len(stored),
        consumed=len(consumed),
        redelivered=len(consumed) - len({(c.partition, c.offset) for c in consumed}),
    )
    where = {kv: slot for slot, kv in stored.items()}
    lost, acked_slots = [], set()
    for a in acked:
        slot = (a.partition, a.offset) if a.offset is not None else where.get((a.key, a.value))
        if slot is None or slot[0] != a.partition or stored.get(slot) != (a.key, a.value):
            lost.append(a)
            continue
        acked_slots.add(slot)
        ledger.acked_without_offset += a.offset is None
    unacked = sorted(slot for slot in stored if slot not in acked_slots)
    keys = Counter(key for key, _ in stored.values())
    duplicates = sorted(key for key, n in keys.items() if n > 1)
    seen = {(c.partition, c.offset): (c.key, c.value) for c in consumed}
    not_consumed = sorted(slot for slot, kv in stored.items() if seen.get(slot) != kv)
    short = {
        p: (offset, committed.ends.get(p))
        for p, offset in committed.offsets.items()
        if offset != committed.ends.get(p)
    }
    ledger.lost, ledger.unacked_in_topic = len(lost), len(unacked)
    ledger.duplicates_in_topic, ledger.not_consumed = len(duplicates), len(not_consumed)
    checks = [
        (lost, "acknowledged records not at their acknowledged offset"),
        (unacked, "records in the topic no acknowledgement names"),
        (duplicates, "keys stored more than once (the idempotent producer's records)"),
        (not_consumed, "stored records never consumed at their offset"),
    ]
    for found, what in checks:
        if found:
            ledger.problems.append(f"{len(found)} {what}, e.g. {found[:2]}")
    if short:
        ledger.problems.append(f"committed offsets short of the end (committed, end): {short}")
    return ledger
