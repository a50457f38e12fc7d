# Strategy: the feature cases of the matrix, beside the round trip: the four compression
# codecs, 5 MiB records, 200 partitions, and headers with tombstones. One program per client
# (go/*: `case` mode; java/Cases.java; the Python clients' _case_*.py) makes the records of a
# case itself from (case, base topic, run id), as `topics` below defines them; every program
# must make exactly these records, since what the broker holds is compared with this list.
#
#   codecs      4 topics "<base>-<codec>", 3 partitions each, 200 compressible ~1 KiB records
#               by key (10 keys), each topic produced with its codec (gzip, snappy, lz4, zstd);
#   large       "<base>-large", 1 partition, max.message.bytes 8 MiB, 3 records of 5 MiB;
#   partitions  "<base>-p200", 200 partitions, 400 records, record i to partition i % 200;
#   headers     "<base>-headers", 2 partitions, 50 records by key (5 keys), five headers each
#               (two with the same key, one empty), every fifth record a tombstone (null value).
#
# A program creates the topics, produces every topic (acks=all, idempotent where the client
# can), lists the end offsets, then reads every partition from the start, without a group, up
# to those ends. It prints one JSON line per event (go/internal/compat.Event): "created",
# "produced" and "consumed" with topic, partition, offset, key, the value's digest (length and
# SHA-256 prefix, so a 5 MiB record is one short line; null for a tombstone) and headers.
#
# `check_case` then compares, topic by topic, with a direct read of the broker
# (`observe_case`): the topic holds exactly the case's records, headers and nulls included; the
# client consumed exactly that, at the same offsets; every produce report names the slot where
# its record really is, once; records named to a partition are in it; one key, one partition,
# in production order; and for the codecs, every batch the broker stores for "<base>-<codec>"
# is compressed with that codec (read from the batch headers, wire/records.py), so a client
# that silently sent uncompressed records fails the case.
"""The feature cases: their records, a client's run of one, and the check against the broker."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kafka import KafkaConsumer, TopicPartition
from kafka.protocol.old.fetch import FetchRequest, FetchResponse
from kafka.protocol.old.metadata import MetadataRequest, MetadataResponse

from tests.compat import _go
from tests.compat._java import cases_command
from tests.compat._model import ClientFailed
from tests.integration._kafka_raw import RawConnection
from wire.records import Compression, iter_batches

__all__ = [
    "CASES",
    "CASE_CLIENTS",
    "CODECS",
    "LARGE_LIMIT_BYTES",
    "CaseRecord",
    "CaseTopic",
    "Event",
    "case_command",
    "check_case",
    "digest",
    "observe_case",
    "parse_events",
    "run_case",
    "run_program",
    "topics",
]

CASES = ("codecs", "large", "partitions", "headers")
CODECS = ("gzip", "snappy", "lz4", "zstd")
LARGE_VALUE_BYTES = 5 << 20
#: The large topic's max.message.bytes and the clients' request and fetch limits: one 5 MiB
#: record and its batch fit.
LARGE_LIMIT_BYTES = 8 << 20
#: One case run of one client; a case takes a few seconds, the 5 MiB one the longest.
DEADLINE_S = 120.0

Headers = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class CaseRecord:
    """One record of a case; ``partition`` -1 = by key; ``value`` None = a tombstone."""

    partition: int
    key: str
    value: bytes | None
    headers: Headers = ()


@dataclass(frozen=True)
class CaseTopic:
    name: str
    partitions: int
    records: tuple[CaseRecord, ...]
    configs: dict[str, str] = field(default_factory=dict)
    compression: str = ""

    @property
    def explicit(self) -> bool:
        """Whether the records name their partitions."""
        return bool(self.records) and self.records[0].partition >= 0


def topics(case: str, base: str, run: str) -> list[CaseTopic]:
    """The topics and records of ``case`` for ``base`` and ``run`` (see the module header)."""
    if case == "codecs":
        return [
            CaseTopic(
                f"{base}-{codec}",
                3,
                tuple(
                    CaseRecord(-1, f"key-{i % 10}", (f"{run} {codec} {i} " * 20).encode())
                    for i in range(200)
                ),
                compression=codec,
            )
            for codec in CODECS
        ]
    if case == "large":
        records = []
        for i in range(3):
            unit = f"{run} large {i} ".encode()
            value = (unit * (LARGE_VALUE_BYTES // len(unit) + 1))[:LARGE_VALUE_BYTES]
            records.append(CaseRecord(-1, f"key-{i}", value))
        configs = {"max.message.bytes": str(LARGE_LIMIT_BYTES)}
        return [CaseTopic(f"{base}-large", 1, tuple(records), configs)]
    if case == "partitions":
        records = [CaseRecord(i % 200, f"key-{i}", f"{run} p {i}".encode()) for i in range(400)]
        return [CaseTopic(f"{base}-p200", 200, tuple(records))]
    if case == "headers":
        records = []
        for i in range(50):
            value = None if i % 5 == 4 else f"{run} h {i}".encode()
            headers = (("index", str(i)), ("run", run), ("dup", "1"), ("dup", "2"), ("empty", ""))
            records.append(CaseRecord(-1, f"key-{i % 5}", value, headers))
        return [CaseTopic(f"{base}-headers", 2, tuple(records))]
    raise ValueError(f"unknown case {case!r}; known: {CASES}")


def digest(value: bytes | None) -> str | None:
    """How every program shows a value: "<length>:<first 16 hex digits of its SHA-256>"."""
    if value is None:
        return None
    return f"{len(value)}:{hashlib.sha256(value).hexdigest()[:16]}"


@dataclass(frozen=True, order=True)
class Event:
    """One "produced" or "consumed" line, or a record read directly ("stored")."""

    topic: str
    partition: int
    offset: int
    key: str | None
    value: str | None
    headers: Headers = ()

    @property
    def content(self) -> tuple[str | None, str | None, Headers]:
        return self.key, self.value, self.headers


def parse_events(stdout: str) -> tuple[list[str], list[Event], list[Event]]:
    """Topics created, records produced and consumed, from a case program's JSON lines."""
    created: list[str] = []
    produced: list[Event] = []
    consumed: list[Event] = []
    for line in stdout.splitlines():
        if not line.startswith("{"):
            continue
        e = json.loads(line)
        if e["event"] == "created":
            created.append(e["topic"])
            continue
        event = Event(
            e["topic"],
            e["partition"],
            e["offset"],
            e["key"],
            e["value"],
            tuple((k, v) for k, v in e["headers"]),
        )
        if e["event"] == "produced":
            produced.append(event)
        elif e["event"] == "consumed":
            consumed.append(event)
    return created, produced, consumed


@dataclass(frozen=True)
class CaseRun:
    """A client's run of one case: what it printed, and what it took."""

    client: str
    case: str
    topics: tuple[CaseTopic, ...]
    produced: tuple[Event, ...]
    consumed: tuple[Event, ...]
    elapsed_s: float


def run_program(command: Sequence[str], timeout_s: float) -> tuple[str, str, int]:
    """Run a case program to its end: (stdout, stderr, exit code); a program still running
    at ``timeout_s`` is killed, and its exit code is -1."""
    try:
        proc = subprocess.run(
            list(command), capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired as exc:
        stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
        return stdout, "still running at the deadline", -1
    return proc.stdout, proc.stderr, proc.returncode


def run_case(client: str, command: Sequence[str], case: str, base: str, run: str) -> CaseRun:
    """Run ``command`` (a client's case program for ``case``, ``base`` and ``run``).

    Raises:
        ClientFailed: the program failed or outlived DEADLINE_S; its stage is "create" before
            every topic was created, "produce" before every record was acknowledged, else
            "consume".
    """
    started = time.monotonic()
    expected = topics(case, base, run)
    stdout, stderr, code = run_program(command, DEADLINE_S + 30)
    created, produced, consumed = parse_events(stdout)
    if code != 0:
        stage = "consume"
        if len(created) < len(expected):
            stage = "create"
        elif len(produced) < sum(len(t.records) for t in expected):
            stage = "produce"
        tail = " | ".join(stderr.strip().splitlines()[-8:])
        raise ClientFailed(client, stage, f"{case}: exit {code}: {tail}")
    return CaseRun(
        client,
        case,
        tuple(expected),
        tuple(produced),
        tuple(consumed),
        time.monotonic() - started,
    )


@dataclass(frozen=True)
class Stored:
    """A topic as the direct reader found it: every record, and every batch's codec."""

    records: tuple[Event, ...]
    codecs: Counter[str]


def observe_case(bootstrap: str, case_topics: Iterable[CaseTopic]) -> dict[str, Stored]:
    """Every record of every topic, and the codec of every stored batch, read directly."""
    return {
        t.name: Stored(_read_topic(bootstrap, t.name), _stored_codecs(bootstrap, t.name))
        for t in case_topics
    }


def _read_topic(bootstrap: str, topic: str, timeout_s: float = 60.0) -> tuple[Event, ...]:
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        client_id="compat-direct-case-reader",
        fetch_max_bytes=4 * LARGE_LIMIT_BYTES,
        max_partition_fetch_bytes=LARGE_LIMIT_BYTES,
    )
    try:
        partitions = consumer.partitions_for_topic(topic)
        if not partitions:
            raise LookupError(f"topic {topic!r} has no partitions in metadata")
        assigned = [TopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign(assigned)
        ends = consumer.end_offsets(assigned)
        consumer.seek_to_beginning()
        records: list[Event] = []
        deadline = time.monotonic() + timeout_s
        while any(consumer.position(tp) < ends[tp] for tp in assigned):
            if time.monotonic() > deadline:
                raise TimeoutError(f"direct read of {topic!r} not at its end in {timeout_s} s")
            for batch in consumer.poll(timeout_ms=200).values():
                records.extend(
                    Event(
                        r.topic,
                        r.partition,
                        r.offset,
                        None if r.key is None else r.key.decode(),
                        digest(r.value),
                        tuple((k, v.decode()) for k, v in r.headers),
                    )
                    for r in batch
                )
        return tuple(records)
    finally:
        consumer.close()


def _stored_codecs(bootstrap: str, topic: str) -> Counter[str]:
    """How many stored batches of ``topic`` use each codec, from raw Fetch responses (a
    client library would decompress them without saying how they were compressed), each
    partition read from its leader."""
    with RawConnection(bootstrap) as conn:
        metadata = conn.call(MetadataRequest[1](topics=[topic]), MetadataResponse[1])
    brokers = {node_id: f"{host}:{port}" for node_id, host, port, _rack in metadata.brokers}
    _error, _name, _internal, partitions = metadata.topics[0]
    codecs: Counter[str] = Counter()
    for _e, partition, leader, *_ in sorted(partitions, key=lambda p: p[1]):
        with RawConnection(brokers[leader]) as conn:
            offset = 0
            while batches := list(iter_batches(_fetch(conn, topic, partition, offset))):
                for batch in batches:
                    codecs[Compression(batch.attributes & 0x07).name.lower()] += 1
                offset = batches[-1].last_offset + 1
    return codecs


def _fetch(conn: RawConnection, topic: str, partition: int, offset: int) -> bytes:
    request = FetchRequest[4](
        replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=LARGE_LIMIT_BYTES,
        isolation_level=0, topics=[(topic, [(partition, offset, LARGE_LIMIT_BYTES)])],
    )  # fmt: skip
    response = conn.call(request, FetchResponse[4])
    _, partitions = response.responses[0]
    error_code, raw = partitions[0][1], partitions[0][-1]
    if error_code:
        raise RuntimeError(f"raw fetch of {topic}/{partition} at {offset}: error {error_code}")
    return bytes(raw or b"")


#: How many examples a problem line quotes.
_SAMPLE = 3


def check_case(run: CaseRun, stored: dict[str, Stored]) -> list[str]:
    """Every way ``run`` differs from the case and from the broker; [] if none."""
    problems: list[str] = []
    produced_at: Counter[tuple[str, int, int]] = Counter()
    for topic in run.topics:
        found = stored[topic.name]
        name = topic.name
        expected = Counter((r.key, digest(r.value), r.headers) for r in topic.records)
        held = Counter(e.content for e in found.records)
        problems += _diff(f"{name}: stored vs the case", held, expected)
        consumed = Counter(e for e in run.consumed if e.topic == name)
        problems += _diff(f"{name}: consumed vs stored", consumed, Counter(found.records))
        reports = [e for e in run.produced if e.topic == name]
        problems += _check_reports(topic, reports, found.records)
        produced_at.update((e.topic, e.partition, e.offset) for e in reports)
        problems += _check_placement(topic, found.records)
        if topic.compression and set(found.codecs) != {topic.compression}:
            problems.append(
                f"{name}: stored batches by codec {dict(found.codecs)}, "
                f"all should be {topic.compression}"
            )
    twice = [slot for slot, n in produced_at.items() if n > 1]
    if twice:
        problems.append(f"a slot was reported for more than one produce: {twice[:_SAMPLE]}")
    return problems


def _check_reports(
    topic: CaseTopic, reports: Sequence[Event], stored: Sequence[Event]
) -> list[str]:
    """One produce report per record, each naming the slot its record is in."""
    problems: list[str] = []
    if len(reports) != len(topic.records):
        problems.append(
            f"{topic.name}: {len(reports)} produce reports for {len(topic.records)} records"
        )
    at_slot = {(e.partition, e.offset): e for e in stored}
    wrong = [
        (e, there)
        for e in reports
        if (there := at_slot.get((e.partition, e.offset))) is None or there.content != e.content
    ]
    if wrong:
        problems.append(
            f"{topic.name}: produce reports not matching their slot, e.g. {wrong[:_SAMPLE]}"
        )
    return problems


def _check_placement(topic: CaseTopic, stored: Sequence[Event]) -> list[str]:
    """Named partitions hold their records; otherwise one key, one partition, in order."""
    name = topic.name
    if topic.explicit:
        where = {(r.key, digest(r.value)): r.partition for r in topic.records}
        misplaced = [e for e in stored if where.get((e.key, e.value), e.partition) != e.partition]
        if misplaced:
            return [f"{name}: records outside their named partition, e.g. {misplaced[:_SAMPLE]}"]
        return []
    problems: list[str] = []
    order = {(r.key, digest(r.value), r.headers): i for i, r in enumerate(topic.records)}
    by_key: dict[str | None, list[Event]] = {}
    for e in sorted(stored, key=lambda e: order.get(e.content, -1)):
        by_key.setdefault(e.key, []).append(e)
    split = {k: sorted({e.partition for e in es}) for k, es in by_key.items()}
    split = {k: ps for k, ps in split.items() if len(ps) > 1}
    if split:
        problems.append(f"{name}: keys over several partitions, e.g. {list(split.items())[:3]}")
    reordered = [k for k, es in by_key.items() if _not_rising([e.offset for e in es])]
    if reordered:
        problems.append(f"{name}: keys stored out of production order, e.g. {reordered[:3]}")
    return problems


def _not_rising(offsets: list[int]) -> bool:
    return offsets != sorted(offsets)


def _diff(what: str, got: Counter[Any], expected: Counter[Any]) -> list[str]:
    missing, extra = expected - got, got - expected
    problems = []
    if missing:
        sample = sorted(missing, key=repr)[:_SAMPLE]
        problems.append(f"{what}: {missing.total()} missing, e.g. {sample}")
    if extra:
        sample = sorted(extra, key=repr)[:_SAMPLE]
        problems.append(f"{what}: {extra.total()} extra, e.g. {sample}")
    return problems


#: The clients with a case program; kcat runs the round trip only (it is librdkafka, as
#: confluent-kafka is, behind a command line).
CASE_CLIENTS = (
    "java", "confluent-kafka", "kafka-python", "aiokafka", "franz-go", "sarama", "kafka-go",
)  # fmt: skip


def case_command(client: str, bootstrap: str, case: str, base: str, run: str) -> list[str]:
    """The command that runs ``case`` with ``client`` (one of CASE_CLIENTS)."""
    if client == "java":
        return cases_command("case", bootstrap, case, base, run)
    if client in _go.CLIENTS:
        return _go.case_command(client, bootstrap, case, base, run)
    module = {
        "confluent-kafka": "_case_confluent",
        "kafka-python": "_case_kafka_python",
        "aiokafka": "_case_aiokafka",
    }[client]
    return [
        sys.executable, "-m", f"tests.compat.{module}", "--bootstrap", bootstrap,
        "--case", case, "--topic", base, "--run-id", run,
    ]  # fmt: skip
