# Strategy: the share-consumer case (KIP-932, share groups: enabled by default in Kafka 4.4,
# not GA in 3.9). Java's KafkaShareConsumer is the client (java/Cases.java share): 300
# records produced, then one share consumer in a new share group (share.auto.offset.reset
# set to earliest with Admin first) acknowledges them as it polls and commits the
# acknowledgements. Through the proxy this is ShareGroupHeartbeat, ShareFetch and
# ShareAcknowledge (APIs 76, 78, 79) and FindCoordinator for a share group.
#
# With one consumer, no failure and the records' acquisition lock (30 s) longer than the
# run, every record is delivered exactly once: `check_share` wants what the consumer got to
# be exactly what a direct read of the topic holds, each record once, on its first delivery,
# and every produce report to name the slot its record is in.
"""Share consumers: run the Java share consumer, check it against the broker."""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass

from tests.compat._cases import run_program
from tests.compat._java import cases_command
from tests.compat._model import ClientFailed
from tests.compat._transactions import Slot, read_direct

__all__ = ["RECORDS", "ShareRun", "check_share", "run_share", "stored_records"]

RECORDS = 300
DEADLINE_S = 120.0


@dataclass(frozen=True)
class ShareRun:
    produced: tuple[Slot, ...]
    consumed: tuple[Slot, ...]
    deliveries: tuple[str, ...]
    acknowledged: int
    elapsed_s: float


def run_share(bootstrap: str, topic: str, group: str) -> ShareRun:
    """Produce RECORDS to a new ``topic`` and consume them in share group ``group``.

    Raises:
        ClientFailed: the program failed ("produce" before every record was acknowledged,
            else "consume").
    """
    started = time.monotonic()
    command = cases_command("share", bootstrap, topic, group, str(RECORDS))
    stdout, stderr, code = run_program(command, DEADLINE_S)
    produced: list[Slot] = []
    consumed: list[Slot] = []
    deliveries: list[str] = []
    acknowledged = -1
    for line in stdout.splitlines():
        if not line.startswith("{"):
            continue
        e = json.loads(line)
        slot = (e["partition"], e["offset"], e["key"], e["value"])
        if e["event"] == "produced":
            produced.append(slot)
        elif e["event"] == "consumed":
            consumed.append(slot)
            deliveries.append(e.get("detail", ""))
        elif e["event"] == "acknowledged":
            acknowledged = int(e["detail"])
    if code != 0:
        stage = "produce" if len(produced) < RECORDS else "consume"
        tail = " | ".join(stderr.strip().splitlines()[-8:])
        raise ClientFailed("java", stage, f"share consumer: exit {code}: {tail}")
    elapsed = time.monotonic() - started
    return ShareRun(tuple(produced), tuple(consumed), tuple(deliveries), acknowledged, elapsed)


def check_share(run: ShareRun, stored: list[Slot]) -> list[str]:
    """Every way the share consumer's run differs from exactly once; [] if none."""
    problems: list[str] = []
    if len(run.produced) != RECORDS:
        problems.append(f"{len(run.produced)} of {RECORDS} records acknowledged to the producer")
    if Counter(run.produced) != Counter(stored):
        problems.append(
            f"produce reports vs direct read: {sorted(set(run.produced) ^ set(stored))[:3]}"
        )
    got, expected = Counter(run.consumed), Counter(stored)
    if got != expected:
        problems.append(
            f"share consumer vs direct read: {(expected - got).total()} missing, e.g. "
            f"{sorted(expected - got)[:3]}; {(got - expected).total()} extra or redelivered, "
            f"e.g. {sorted(got - expected)[:3]}"
        )
    later = [d for d in run.deliveries if d != "delivery 1"]
    if later:
        problems.append(f"{len(later)} records were not on their first delivery: {later[:3]}")
    if run.acknowledged != len(run.consumed):
        problems.append(f"acknowledged {run.acknowledged}, consumed {len(run.consumed)}")
    return problems


def stored_records(bootstrap: str, topic: str) -> list[Slot]:
    """The topic as a direct reader sees it."""
    return read_direct(bootstrap, topic, "read_uncommitted")
