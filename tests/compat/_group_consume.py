# Strategy: the exactly-once-across-a-rebalance checks of issue 6 and issue 30, for any client
# that has a group-member program speaking the line protocol of java/GroupConsume.java (Java),
# _group_consume_confluent.py (librdkafka) and the Go programs' member mode (franz-go,
# sarama; go/internal/compat), in the classic group protocol and, where the client has it,
# KIP-848's consumer protocol (MEMBERS).
#
# The driver produces records over a topic's partitions, each value "<partition>:<sequence>"
# (an idempotent producer, partition by partition in order, so offset == sequence), then
# runs a group whose membership changes mid-way. Two scenarios:
#
#   join then leave (issue 6)   member A starts alone; when it has processed 2,000 records
#                               member B joins; when B has processed some, A stops, commits
#                               and leaves; B finishes. 10,000 records over 8 partitions.
#   three then leave (issue 30) three members start together; once each has processed some,
#                               one that is in the middle of a partition stops, commits and
#                               leaves; the other two finish. 6,000 records over 6 partitions.
#
# Members are separate processes; a reader thread per member stamps every line with the time
# it arrived, so all members' events form one timeline. Partitions change hands only after a
# synchronous commit in the revoke callback and a rebalance that takes seconds, so "in order"
# can be checked on that timeline: for each partition, the offsets processed by anyone, in
# arrival order, must be exactly 0, 1, ..., n-1 -- no gap, no duplicate, no reordering -- and
# each value must be the one produced at that offset. After the last member has left, the
# group's committed offsets, read directly (`committed_problems`), must be every partition's
# end: commits intact.
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

from tests.compat import _go
from tests.compat._direct import committed_offsets
from tests.compat._java import SOURCES, java_command

__all__ = [
    "CLIENTS",
    "MEMBERS",
    "RECORDS",
    "Event",
    "check",
    "committed_problems",
    "create_and_fill",
    "run_join_then_leave",
    "run_three_then_leave",
    "summary",
]

#: The clients of the join-then-leave scenario (the fetch-session test).
CLIENTS = ("java", "confluent-kafka")
#: Member kinds of the three-then-leave scenario: (client, group protocol).
MEMBERS: dict[str, tuple[str, str]] = {
    "java": ("java", "classic"),
    "java-kip848": ("java", "consumer"),
    "confluent-kafka": ("confluent-kafka", "classic"),
    "confluent-kafka-kip848": ("confluent-kafka", "consumer"),
    "franz-go": ("franz-go", "classic"),
    "franz-go-kip848": ("franz-go", "consumer"),
    "sarama": ("sarama", "classic"),
}
PARTITIONS = 8
RECORDS = 10_000
THREE_PARTITIONS = 6
THREE_RECORDS = 9_000
#: Apache Kafka's smallest (group.min.session.timeout.ms); classic members only.
SESSION_TIMEOUT_MS = 6000
#: Records each member processes per second at most: slow enough that the join and the
#: leave happen while work remains (a JVM's join on a busy 2-core machine took over 8 s),
#: fast enough that one scenario takes ~25 s.
MAX_RATE = 500
A_BEFORE_JOIN = 2000
B_BEFORE_LEAVE = 300
#: Records each member of the three-member scenario processes per second at most: a member
#: that joins a KIP-848 group gets its partitions within two heartbeats (10 s), and the
#: first member must not have finished the topic by then.
THREE_MAX_RATE = 300
#: A member leaves only while at least this many records of its current partition are left.
MID_PARTITION_LEFT = 300
DEADLINE_S = 75.0

SOURCE = SOURCES / "GroupConsume.java"


@dataclass(frozen=True)
class Event:
    """One line a member printed, and when the driver read it."""

    at_s: float
    member: str
    kind: str
    fields: tuple[str, ...]


def create_and_fill(
    bootstrap: str, topic: str, partitions: int = PARTITIONS, records: int = RECORDS
) -> dict[int, int]:
    """Create the topic (the cluster's replication factor) and produce ``records`` values;
    return records per partition."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, -1)]).values():
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
    for i in range(records):
        partition = i % partitions
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


def member_command(
    kind: str, bootstrap: str, topic: str, group: str, max_rate: int = MAX_RATE
) -> list[str]:
    """The member program of ``kind`` (a key of MEMBERS, or a client of CLIENTS)."""
    client, protocol = MEMBERS[kind]
    args = [bootstrap, topic, group, str(SESSION_TIMEOUT_MS), str(max_rate), protocol]
    if client == "confluent-kafka":
        return [sys.executable, "-m", "tests.compat._group_consume_confluent", *args]
    if client == "java":
        return java_command(SOURCE, *args)
    return _go.command(client, "member", *args)


class _Group:
    """The members of one scenario, their shared timeline, and waiting on both.

    Resource handling: ``close`` (always called) kills members that are still running.
    """

    def __init__(self, kind: str, command: list[str], counts: dict[int, int]) -> None:
        self.kind, self.command, self.counts = kind, command, counts
        self.timeline: list[Event] = []
        self.members: list[Member] = []
        self.started = time.monotonic()

    def start(self, name: str) -> Member:
        member = Member(name, self.command, self.timeline, self.started)
        self.members.append(member)
        return member

    def wait_until(self, condition: Callable[[], bool], what: str) -> None:
        while not condition():
            dead = [m.name for m in self.members if not m.stopped and not m.running()]
            if dead or time.monotonic() - self.started > DEADLINE_S:
                tails = {m.name: m.stderr_tail() for m in self.members}
                raise AssertionError(
                    f"{self.kind}: waiting for {what}: members exited {dead} or the "
                    f"{DEADLINE_S:.0f} s deadline passed; consumed "
                    f"{[m.consumed for m in self.members]}; stderr {tails}"
                )
            time.sleep(0.02)

    def has_partitions(self, member: Member) -> bool:
        """Whether ``member`` owns partitions now. Its "assigned" and "revoked" events are
        folded into a set: eager clients revoke everything and assign the whole new set,
        incremental ones (KIP-848, cooperative) print only what changed; both fold right."""
        owned: set[str] = set()
        for e in list(self.timeline):
            if e.member == member.name and e.kind in ("assigned", "revoked") and e.fields:
                changed = {p for p in e.fields[0].split(",") if p}
                owned = owned | changed if e.kind == "assigned" else owned - changed
        return bool(owned)

    def mid_partition(self, member: Member) -> bool:
        """Whether ``member`` last processed a record with work left on its partition."""
        last = next(
            (
                e
                for e in reversed(self.timeline)
                if e.member == member.name and e.kind == "consumed"
            ),
            None,
        )
        if last is None:
            return False
        partition, offset = int(last.fields[0]), int(last.fields[1])
        return offset >= 1 and self.counts[partition] - offset > MID_PARTITION_LEFT

    def leave_mid_partition(self, candidates: list[Member]) -> Member:
        """Stop the first of ``candidates`` found in the middle of a partition (which member
        still has partitions to work through differs from run to run)."""
        self.wait_until(
            lambda: any(self.mid_partition(m) for m in candidates), "a member in mid-partition"
        )
        leaver = next(m for m in candidates if self.mid_partition(m))
        self.stop(leaver)
        return leaver

    def stop(self, member: Member) -> None:
        code = member.stop()
        assert code == 0, f"{self.kind}: {member.name} exited {code}: {member.stderr_tail()}"

    def finish(self) -> None:
        """Wait for every record to be processed by someone, then stop who is left."""
        total = sum(self.counts.values())
        self.wait_until(lambda: self._unique_consumed() >= total, f"all {total} records")
        for member in self.members:
            if not member.stopped:
                self.stop(member)

    def _unique_consumed(self) -> int:
        return len(
            {(e.fields[0], e.fields[1]) for e in list(self.timeline) if e.kind == "consumed"}
        )

    def close(self) -> list[Event]:
        for member in self.members:
            member.close()
        return sorted(self.timeline, key=lambda e: e.at_s)


def run_join_then_leave(
    client: str, bootstrap: str, topic: str, group: str, counts: dict[int, int]
) -> list[Event]:
    """A alone, B joins, one leaves, the other finishes; every member's events in arrival order.

    The member that leaves is stopped while it is in the middle of a partition, so that
    partition moves to the other at a committed offset that is not 0. (The Java client
    processes one partition's fetched records after another, so a leave at a random moment
    often moves only untouched or finished partitions.)
    """
    group_run = _Group(client, member_command(client, bootstrap, topic, group), counts)
    try:
        a = group_run.start("A")
        group_run.wait_until(lambda: a.consumed >= A_BEFORE_JOIN, f"A to process {A_BEFORE_JOIN}")
        b = group_run.start("B")
        group_run.wait_until(
            lambda: b.consumed >= B_BEFORE_LEAVE, f"B to join and process {B_BEFORE_LEAVE}"
        )
        group_run.leave_mid_partition([a, b])
        group_run.finish()
    finally:
        timeline = group_run.close()
    return timeline


def run_three_then_leave(
    kind: str, bootstrap: str, topic: str, group: str, counts: dict[int, int]
) -> list[Event]:
    """A, B and C together; once each has partitions, one leaves in the middle of a
    partition; the other two finish. Every member's events in arrival order.

    (A member may be given only partitions another member has already finished, so "each has
    partitions" rather than "each has processed some" says the group is complete.)
    """
    command = member_command(kind, bootstrap, topic, group, THREE_MAX_RATE)
    group_run = _Group(kind, command, counts)
    try:
        members = [group_run.start(name) for name in "ABC"]
        group_run.wait_until(
            lambda: all(group_run.has_partitions(m) for m in members),
            "all three to have partitions",
        )
        group_run.leave_mid_partition(members)
        group_run.finish()
    finally:
        timeline = group_run.close()
    return timeline


def committed_problems(bootstrap: str, group: str, topic: str, counts: dict[int, int]) -> list[str]:
    """The group's committed offsets, read directly, against every partition's end."""
    committed = committed_offsets(bootstrap, group, topic)
    return [
        f"partition {p}: committed {committed.get(p)}, end {end}"
        for p, end in sorted(counts.items())
        if committed.get(p) != end
    ]


def check(timeline: list[Event], counts: dict[int, int], members: int = 2) -> list[str]:
    """Every problem with the delivery on ``timeline``; empty when it was exactly once, in
    order, with at least ``members`` members processing some."""
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
    processed = {e.member for e in timeline if e.kind == "consumed"}
    if len(processed) < members:
        problems.append(f"records processed by {sorted(processed)} only")
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
