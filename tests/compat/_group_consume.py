# Strategy: the exactly-once-across-a-rebalance check of issue 6, for any client that has a
# group-member program speaking the line protocol of GroupConsume.java (Java) and
# _group_consume_confluent.py (librdkafka).
#
# The driver produces 10,000 records over 8 partitions, each value "<partition>:<sequence>"
# (an idempotent producer, partition by partition in order, so offset == sequence), then
# runs a group whose membership changes mid-way: member A starts alone; when it has
# processed 2,000 records member B joins (rebalance 1); when B has processed some, A stops,
# commits and leaves (rebalance 2); B finishes. Members are separate processes; a reader
# thread per member stamps every line with the time it arrived, so all members' events
# form one timeline. Partitions change hands only after a synchronous commit in the
# revoke callback and a rebalance that takes seconds, so "in order" can be checked on that
# timeline: for each partition, the offsets processed by anyone, in arrival order, must be
# exactly 0, 1, ..., n-1 -- no gap, no duplicate, no reordering -- and each value must be
# the one produced at that offset.
"""Drive group members through a join and a leave, then check every record came once, in order."""

from __future__ import annotations

import itertools
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import KafkaError, Message, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from tests.compat._java import java_command

__all__ = [
    "CLIENTS",
    "RECORDS",
    "Event",
    "check",
    "create_and_fill",
    "run_join_then_leave",
    "summary",
]

CLIENTS = ("java", "confluent-kafka")
PARTITIONS = 8
RECORDS = 10_000
SESSION_TIMEOUT_MS = 4000
#: Records each member processes per second at most: slow enough that the join and the
#: leave happen while work remains (a JVM's join on a busy 2-core machine took over 8 s),
#: fast enough that one scenario takes ~25 s.
MAX_RATE = 500
A_BEFORE_JOIN = 2000
B_BEFORE_LEAVE = 300
#: A leaves only while at least this many records of its current partition are left.
MID_PARTITION_LEFT = 300
DEADLINE_S = 75.0

SOURCE = Path(__file__).with_name("GroupConsume.java")


@dataclass(frozen=True)
class Event:
    """One line a member printed, and when the driver read it."""

    at_s: float
    member: str
    kind: str
    fields: tuple[str, ...]


def create_and_fill(bootstrap: str, topic: str) -> dict[int, int]:
    """Create the topic and produce RECORDS values; return records per partition."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        future.result(timeout=30)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
         "linger.ms": 5}
    )  # fmt: skip
    failures: list[str] = []
    wrong_slot: list[str] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            failures.append(str(err))
        elif (msg.value() or b"").decode() != f"{msg.partition()}:{msg.offset()}":
            wrong_slot.append(f"{msg.value()!r} at {msg.partition()}:{msg.offset()}")

    counts: dict[int, int] = defaultdict(int)
    for i in range(RECORDS):
        partition = i % PARTITIONS
        value = f"{partition}:{counts[partition]}".encode()
        producer.produce(topic, value=value, partition=partition, on_delivery=on_delivery)
        counts[partition] += 1
        producer.poll(0)
    left = producer.flush(60)
    assert not left and not failures, f"{left} undelivered, errors {failures[:3]}"
    assert not wrong_slot, f"records not at the offset of their sequence: {wrong_slot[:3]}"
    return dict(counts)


class Member:
    """One group member process; its stdout lines become Events on the shared timeline.

    Resource handling: ``close`` (always called by the driver) kills the process if it did
    not exit after "stop", and removes its stderr log.
    """

    def __init__(self, name: str, command: list[str], timeline: list[Event], started: float):
        self.name = name
        self._timeline, self._started = timeline, started
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed in close()
        root = Path(__file__).resolve().parents[2]
        self._proc = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
            cwd=root, text=True, bufsize=1,
        )  # fmt: skip
        self.consumed = 0
        self.stopped = False
        self._reader = threading.Thread(target=self._read, name=f"member-{name}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            kind, *fields = line.rstrip("\n").split("\t")
            event = Event(time.monotonic() - self._started, self.name, kind, tuple(fields))
            self._timeline.append(event)  # list.append is atomic under the GIL
            if kind == "consumed":
                self.consumed += 1

    def stop(self, timeout_s: float = 60.0) -> int:
        """Ask the member to commit and leave; wait for it to exit; return its exit code."""
        assert self._proc.stdin is not None
        self.stopped = True
        self._proc.stdin.write("stop\n")
        self._proc.stdin.close()
        code = self._proc.wait(timeout=timeout_s)
        self._reader.join(timeout=10)
        return code

    def running(self) -> bool:
        return self._proc.poll() is None

    def stderr_tail(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")[-1500:]

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(timeout=10)
        self._stderr.close()


def member_command(client: str, bootstrap: str, topic: str, group: str) -> list[str]:
    args = [bootstrap, topic, group, str(SESSION_TIMEOUT_MS), str(MAX_RATE)]
    if client == "confluent-kafka":
        return [sys.executable, "-m", "tests.compat._group_consume_confluent", *args]
    if client == "java":
        return java_command(SOURCE, *args)
    raise ValueError(f"no group member program for {client!r}")


def run_join_then_leave(
    client: str, bootstrap: str, topic: str, group: str, counts: dict[int, int]
) -> list[Event]:
    """A alone, B joins, one leaves, the other finishes; every member's events in arrival order.

    The member that leaves is stopped while it is in the middle of a partition, so that
    partition moves to the other at a committed offset that is not 0. (The Java client
    processes one partition's fetched records after another, so a leave at a random moment
    often moves only untouched or finished partitions.)
    """
    total = sum(counts.values())
    timeline: list[Event] = []
    started = time.monotonic()
    command = member_command(client, bootstrap, topic, group)
    members: list[Member] = []

    def wait_until(condition: Callable[[], bool], what: str) -> None:
        while not condition():
            dead = [m.name for m in members if not m.stopped and not m.running()]
            if dead or time.monotonic() - started > DEADLINE_S:
                tails = {m.name: m.stderr_tail() for m in members}
                raise AssertionError(
                    f"{client}: waiting for {what}: members exited {dead} or the "
                    f"{DEADLINE_S:.0f} s deadline passed; consumed "
                    f"{[m.consumed for m in members]}; stderr {tails}"
                )
            time.sleep(0.02)

    def mid_partition(name: str) -> bool:
        last = next(
            (e for e in reversed(timeline) if e.member == name and e.kind == "consumed"), None
        )
        if last is None:
            return False
        partition, offset = int(last.fields[0]), int(last.fields[1])
        return offset >= 1 and counts[partition] - offset > MID_PARTITION_LEFT

    def unique_consumed() -> int:
        return len({(e.fields[0], e.fields[1]) for e in list(timeline) if e.kind == "consumed"})

    try:
        members.append(a := Member("A", command, timeline, started))
        wait_until(lambda: a.consumed >= A_BEFORE_JOIN, f"A to process {A_BEFORE_JOIN}")
        members.append(b := Member("B", command, timeline, started))
        wait_until(lambda: b.consumed >= B_BEFORE_LEAVE, f"B to join and process {B_BEFORE_LEAVE}")
        # Whoever is in the middle of a partition leaves (the assignment decides which member
        # still has partitions to work through after B's join; it differs from run to run).
        wait_until(lambda: mid_partition("A") or mid_partition("B"), "a member in mid-partition")
        leaver, stayer = (a, b) if mid_partition("A") else (b, a)
        code = leaver.stop()
        assert code == 0, f"{client}: {leaver.name} exited {code}: {leaver.stderr_tail()}"
        wait_until(lambda: unique_consumed() >= total, f"all {total} records")
        code = stayer.stop()
        assert code == 0, f"{client}: {stayer.name} exited {code}: {stayer.stderr_tail()}"
    finally:
        for member in members:
            member.close()
    return sorted(timeline, key=lambda e: e.at_s)


def check(timeline: list[Event], counts: dict[int, int]) -> list[str]:
    """Every problem with the delivery on ``timeline``; empty when it was exactly once, in order."""
    problems: list[str] = []
    by_partition: dict[int, list[int]] = defaultdict(list)
    owners: dict[int, set[str]] = defaultdict(set)
    for event in timeline:
        if event.kind == "error":
            problems.append(f"member {event.member} reported {event.fields}")
        if event.kind != "consumed":
            continue
        partition, offset, value = int(event.fields[0]), int(event.fields[1]), event.fields[2]
        if value != f"{partition}:{offset}":
            problems.append(f"{event.member} got {value!r} at {partition}:{offset}")
        by_partition[partition].append(offset)
        owners[partition].add(event.member)
    for partition, expected in sorted(counts.items()):
        offsets = by_partition.get(partition, [])
        if offsets != list(range(expected)):
            seen: dict[int, int] = defaultdict(int)
            for offset in offsets:
                seen[offset] += 1
            duplicates = sorted(o for o, n in seen.items() if n > 1)
            missing = sorted(set(range(expected)) - set(seen))
            backwards = [
                (before, after) for before, after in itertools.pairwise(offsets) if after <= before
            ]
            problems.append(
                f"partition {partition}: {len(offsets)} deliveries of {expected} records; "
                f"duplicates {duplicates[:5]}, missing {missing[:5]}, "
                f"out of order {backwards[:3]}"
            )
    if not handoffs(timeline):
        problems.append(f"no partition moved between members mid-way: owners {dict(owners)}")
    members = {e.member for e in timeline if e.kind == "consumed"}
    if members != {"A", "B"}:
        problems.append(f"records processed by {sorted(members)} only")
    return problems


def handoffs(timeline: list[Event]) -> list[str]:
    """Partitions that moved between members mid-way: "p@offset A->B" for each move."""
    moves: list[str] = []
    last_member: dict[str, str] = {}
    for event in timeline:
        if event.kind != "consumed":
            continue
        partition, offset = event.fields[0], event.fields[1]
        before = last_member.get(partition)
        if before is not None and before != event.member:
            moves.append(f"{partition}@{offset} {before}->{event.member}")
        last_member[partition] = event.member
    return moves


def summary(timeline: list[Event]) -> str:
    """Who owned what, when: assignments, revocations and processed counts per member."""
    lines = []
    for event in timeline:
        if event.kind in ("assigned", "revoked", "closed"):
            done = sum(
                1 for e in timeline
                if e.member == event.member and e.kind == "consumed" and e.at_s <= event.at_s
            )  # fmt: skip
            lines.append(
                f"  {event.at_s:6.2f} s  {event.member} {event.kind} {','.join(event.fields)}"
                f"  (had processed {done})"
            )
    lines.append(f"  partitions that moved mid-way: {handoffs(timeline)}")
    return "\n".join(lines)
