# Strategy: the transactions case (KIP-98) for the clients that have transactions and
# read_committed: Java (java/Cases.java txn) and librdkafka (_txn_confluent.py). Each program
# commits a transaction of 100 records, aborts one whose records it flushed to the log first,
# commits a third, then reads the topic back with isolation.level=read_committed. Its
# "produced" lines carry "detail": commit or abort.
#
# `check_transactions` compares with two direct reads of the broker: read_committed must give
# exactly the committed records, at the slots their producer was told, and the client's
# read_committed consumer must have seen exactly that; read_uncommitted must hold the aborted
# records too, so the case can fail (a proxy that served a read_committed fetch without the
# aborted-transaction list, or past the last stable offset, hands the client aborted data).
"""Transactions with read_committed: run a client's program, check it against the broker."""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from dataclasses import dataclass

from kafka import KafkaConsumer, TopicPartition

from tests.compat._cases import digest, run_program
from tests.compat._java import cases_command
from tests.compat._model import ClientFailed

__all__ = ["CLIENTS", "TxnRun", "check_transactions", "read_direct", "run_transactions"]

#: The clients with transactions and read_committed consumers.
CLIENTS = ("java", "confluent-kafka")
DEADLINE_S = 120.0

#: (partition, offset, key, value) of a record.
Slot = tuple[int, int, str | None, str | None]


@dataclass(frozen=True)
class TxnRun:
    client: str
    committed: tuple[Slot, ...]
    aborted: tuple[Slot, ...]
    consumed: tuple[Slot, ...]
    outcomes: tuple[str, ...]


def _command(client: str, bootstrap: str, topic: str) -> list[str]:
    if client == "java":
        return cases_command("txn", bootstrap, topic)
    return [sys.executable, "-m", "tests.compat._txn_confluent", bootstrap, topic]


def run_transactions(client: str, bootstrap: str, topic: str) -> TxnRun:
    """Run ``client``'s transactions program against ``bootstrap``.

    Raises:
        ClientFailed: the program failed ("produce" before all three transactions ended,
            else "consume").
    """
    stdout, stderr, code = run_program(_command(client, bootstrap, topic), DEADLINE_S)
    committed: list[Slot] = []
    aborted: list[Slot] = []
    consumed: list[Slot] = []
    outcomes: list[str] = []
    for line in stdout.splitlines():
        if not line.startswith("{"):
            continue
        e = json.loads(line)
        slot = (e["partition"], e["offset"], e["key"], e["value"])
        if e["event"] == "produced":
            (committed if e.get("detail") == "commit" else aborted).append(slot)
        elif e["event"] == "consumed":
            consumed.append(slot)
        elif e["event"] == "ended":
            outcomes.append(e["detail"])
    if code != 0:
        stage = "produce" if len(outcomes) < 3 else "consume"
        tail = " | ".join(stderr.strip().splitlines()[-8:])
        raise ClientFailed(client, stage, f"transactions: exit {code}: {tail}")
    return TxnRun(client, tuple(committed), tuple(aborted), tuple(consumed), tuple(outcomes))


def read_direct(bootstrap: str, topic: str, isolation: str, timeout_s: float = 60.0) -> list[Slot]:
    """Every record of ``topic`` a direct consumer sees at ``isolation`` (values as digests,
    as the programs print them), reading each partition up to its end offset."""
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        isolation_level=isolation,
        client_id=f"compat-direct-{isolation}",
    )
    try:
        assigned = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
        consumer.assign(assigned)
        ends = consumer.end_offsets(assigned)
        consumer.seek_to_beginning()
        found: list[Slot] = []
        deadline = time.monotonic() + timeout_s
        while any(consumer.position(tp) < ends[tp] for tp in assigned):
            if time.monotonic() > deadline:
                raise TimeoutError(f"direct {isolation} read of {topic!r} not at its end")
            for batch in consumer.poll(timeout_ms=200).values():
                found.extend(
                    (r.partition, r.offset, r.key.decode() if r.key else None, digest(r.value))
                    for r in batch
                )
        return found
    finally:
        consumer.close()


def check_transactions(
    run: TxnRun, committed_read: list[Slot], uncommitted_read: list[Slot]
) -> list[str]:
    """Every way ``run`` and the direct reads differ from exact read_committed; [] if none."""
    problems: list[str] = []
    if run.outcomes != ("commit", "abort", "commit"):
        problems.append(f"transactions ended {run.outcomes}, expected commit, abort, commit")
    if len(run.committed) != 200 or len(run.aborted) != 100:
        problems.append(
            f"{len(run.committed)} committed and {len(run.aborted)} aborted records produced, "
            "expected 200 and 100"
        )
    committed = Counter(run.committed)
    for what, got, expected in (
        ("direct read_committed vs committed", Counter(committed_read), committed),
        ("client read_committed vs committed", Counter(run.consumed), committed),
    ):
        missing, extra = expected - got, got - expected
        if missing:
            problems.append(f"{what}: {missing.total()} missing, e.g. {sorted(missing)[:3]}")
        if extra:
            problems.append(f"{what}: {extra.total()} extra, e.g. {sorted(extra)[:3]}")
    leaked = set(run.consumed) & set(run.aborted)
    if leaked:
        problems.append(f"read_committed consumer saw {len(leaked)} aborted records")
    unseen = set(run.aborted) - set(uncommitted_read)
    if unseen:
        problems.append(
            f"{len(unseen)} aborted records are not in the log (read_uncommitted), so the case "
            "proves nothing about them"
        )
    return problems
