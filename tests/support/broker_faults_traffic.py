# Strategy: steady client traffic that keeps a ledger, for the broker-fault scenarios (issue 9).
#
# The question a broker fault asks is "what did the clients believe, and was it true?", so the
# clients here write down everything they were told, with the time they were told it:
#
#   PacedProducer   confluent-kafka (librdkafka) producer in its own thread: idempotent,
#                   acks=all, one record every `interval_s`. Every delivery report lands in
#                   `acked` (partition, offset or None, key, value) or `failed` (the error).
#                   librdkafka's statistics give the request timeouts, retries and re-sent
#                   messages it hid from the app.
#   GroupConsumer   confluent-kafka consumer in a group, in its own thread: consume a batch,
#                   "process" it (append to `consumed`), then commit synchronously, which is
#                   at-least-once: a batch processed but not committed when the broker dies is
#                   delivered again, so duplicates are expected and counted, never hidden.
#   read_back       the topic read straight from the cluster, without the proxy and without a
#                   group, up to each partition's high watermark: what the broker really has.
#   committed       the group's committed offsets and the partitions' ends, from the cluster.
#
# Both threads time every call they make into the client library (`calls`), because
# "the client never hangs" is a statement about those calls. librdkafka does its I/O in its own
# threads, so the Python threads only poll and the GIL is not the bottleneck at these rates.
"""Producer and consumer threads that record what a client was told, and a direct read-back."""

from __future__ import annotations

import abc
import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

__all__ = [
    "Acked",
    "Committed",
    "Consumed",
    "GroupConsumer",
    "PacedProducer",
    "committed",
    "read_back",
]


@dataclass(frozen=True)
class Acked:
    """A record the producer was told is stored at (partition, offset).

    ``offset`` is None when librdkafka reported success without one (Kafka answers a
    re-sent idempotent batch with its first offsets, so the ledger counts None as a fault).
    """

    partition: int
    offset: int | None
    key: bytes
    value: bytes
    sent_s: float
    acked_s: float


@dataclass(frozen=True)
class Consumed:
    """A record a consumer handed to the application."""

    partition: int
    offset: int
    key: bytes
    value: bytes
    received_s: float


@dataclass
class _CallTimer:
    """The longest single call into the client library, and when it happened."""

    longest_s: float = 0.0
    at_s: float = 0.0
    what: str = ""

    def timed(self, what: str, call: Any, *args: Any, **kwargs: Any) -> Any:
        started = time.monotonic()
        try:
            return call(*args, **kwargs)
        finally:
            took = time.monotonic() - started
            if took > self.longest_s:
                self.longest_s, self.at_s, self.what = took, started, what


class _ClientThread(threading.Thread, abc.ABC):
    """What both client threads share: the ledger of trouble and the way they end.

    An exception escaping the client library ends the thread and is kept in ``failure``
    for the test to re-raise; error_cb events land in ``errors``; librdkafka's statistics
    counters are kept at their largest value seen.
    """

    def __init__(self, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.errors: list[tuple[float, str]] = []  # error_cb: connection-level trouble
        self.calls = _CallTimer()
        self.failure: BaseException | None = None
        self.stop = threading.Event()
        self._stats: dict[str, int] = {}

    @property
    def request_timeouts(self) -> int:
        """Requests librdkafka gave up waiting for (socket.timeout.ms), per its statistics."""
        return self._stats.get("req_timeouts", 0)

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:
            self.failure = exc

    @abc.abstractmethod
    def _run(self) -> None:
        """The client's work; ``run`` records whatever it raises as ``failure``."""

    def _on_error(self, err: KafkaError) -> None:
        self.errors.append((time.monotonic(), str(err)))

    def _keep_largest(self, name: str, value: int) -> None:
        # Broker handles can be replaced; the counters only ever matter as "at least".
        self._stats[name] = max(self._stats.get(name, 0), value)


class PacedProducer(_ClientThread):
    """Produce ``count`` records to ``topic``, one every ``interval_s``, then flush.

    Error handling: delivery errors are recorded, not raised; an exception escaping the
    client library ends the thread and is kept in ``failure`` for the test to re-raise.
    """

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        count: int,
        interval_s: float,
        config: dict[str, Any] | None = None,
        flush_timeout_s: float = 30.0,
    ) -> None:
        super().__init__(f"producer-{topic}")
        self.topic, self.count, self.interval_s = topic, count, interval_s
        self.flush_timeout_s = flush_timeout_s
        self.config: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "statistics.interval.ms": 1000,
            **(config or {}),
        }
        self.acked: list[Acked] = []
        self.failed: list[tuple[bytes, str]] = []
        self.sent = 0

    @staticmethod
    def key_of(i: int) -> bytes:
        return b"k%07d" % i

    @staticmethod
    def value_of(i: int) -> bytes:
        return b"v%07d-%s" % (i, uuid.uuid4().hex[:12].encode())

    @property
    def retries(self) -> int:
        """Requests librdkafka sent again after a timeout (its broker-level counter)."""
        return self._stats.get("txretries", 0)

    @property
    def resent(self) -> int:
        """Messages transmitted more than once: what a retriable error code in a Produce
        answer (REQUEST_TIMED_OUT ...) leads to. librdkafka re-queues those messages rather
        than retrying the request, so `retries` does not count them; transmitted minus
        produced messages per partition does (measured: 15 REQUEST_TIMED_OUT answers, 15)."""
        return self._stats.get("resent", 0)

    def _run(self) -> None:
        producer = Producer({**self.config, "error_cb": self._on_error, "stats_cb": self._on_stats})
        next_at = time.monotonic()
        for i in range(self.count):
            if self.stop.is_set():
                break
            key, value = self.key_of(i), self.value_of(i)
            sent_s = time.monotonic()

            def report(err: KafkaError | None, msg: Message, sent_s: float = sent_s) -> None:
                self._on_delivery(err, msg, sent_s)

            while True:
                try:
                    self.calls.timed(
                        "produce", producer.produce, self.topic, key=key, value=value,
                        on_delivery=report,
                    )  # fmt: skip
                    break
                except BufferError:  # local queue full: serve callbacks, then try again
                    self.calls.timed("poll", producer.poll, 0.1)
            self.sent += 1
            self.calls.timed("poll", producer.poll, 0)
            next_at += self.interval_s
            delay = next_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        deadline = time.monotonic() + self.flush_timeout_s
        while len(producer) > 0 and time.monotonic() < deadline:
            self.calls.timed("flush", producer.flush, 0.2)
        self.calls.timed("poll", producer.poll, 0)
        if len(producer) > 0:
            raise AssertionError(f"{len(producer)} records without a delivery report")

    def _on_delivery(self, err: KafkaError | None, msg: Message, sent_s: float) -> None:
        key, value = msg.key() or b"", msg.value() or b""
        assert isinstance(key, bytes) and isinstance(value, bytes), (key, value)
        partition, offset = msg.partition(), msg.offset()
        if err is not None or partition is None:
            self.failed.append((key, f"{err} (partition {partition})"))
            return
        known = offset if offset is not None and offset >= 0 else None
        self.acked.append(Acked(partition, known, key, value, sent_s, time.monotonic()))

    def _on_stats(self, text: str) -> None:
        stats = json.loads(text)
        brokers = stats.get("brokers", {}).values()
        for name in ("req_timeouts", "txretries", "txerrs"):
            self._keep_largest(name, sum(int(broker.get(name, 0)) for broker in brokers))
        partitions = [
            p
            for topic in stats.get("topics", {}).values()
            for key, p in topic.get("partitions", {}).items()
            if key != "-1"
        ]
        resent = sum(int(p.get("txmsgs", 0)) - int(p.get("msgs", 0)) for p in partitions)
        self._keep_largest("resent", resent)


class GroupConsumer(_ClientThread):
    """Consume ``topic`` in group ``group`` from the earliest offset; commit after processing.

    Error handling: commit failures and error events are recorded (they are expected while
    the broker is away); an exception escaping the client library ends the thread and is kept
    in ``failure`` (_ClientThread).
    """

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        group: str,
        config: dict[str, Any] | None = None,
        poll_timeout_s: float = 0.5,
    ) -> None:
        super().__init__(f"consumer-{group}")
        self.topic, self.poll_timeout_s = topic, poll_timeout_s
        self.config: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,  # the least Kafka allows by default
            "heartbeat.interval.ms": 1500,
            "statistics.interval.ms": 1000,
            **(config or {}),
        }
        self.consumed: list[Consumed] = []
        self.commit_errors: list[str] = []
        #: Set once the group gave this consumer partitions (the first assignment).
        self.assigned = threading.Event()

    def _run(self) -> None:
        consumer = Consumer({**self.config, "error_cb": self._on_error, "stats_cb": self._on_stats})
        try:
            consumer.subscribe([self.topic], on_assign=self._on_assign)
            while not self.stop.is_set():
                batch = self.calls.timed(
                    "consume", consumer.consume, num_messages=500, timeout=self.poll_timeout_s
                )
                processed = 0
                for msg in batch:
                    if msg.error() is not None:
                        self.errors.append((time.monotonic(), str(msg.error())))
                        continue
                    key, value = msg.key() or b"", msg.value() or b""
                    partition, offset = msg.partition(), msg.offset()
                    assert isinstance(key, bytes) and isinstance(value, bytes)
                    assert partition is not None and offset is not None
                    self.consumed.append(Consumed(partition, offset, key, value, time.monotonic()))
                    processed += 1
                if processed:
                    try:
                        self.calls.timed("commit", consumer.commit, asynchronous=False)
                    except KafkaException as exc:
                        self.commit_errors.append(str(exc))
        finally:
            self.calls.timed("close", consumer.close)

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if partitions:
            self.assigned.set()

    def _on_stats(self, text: str) -> None:
        brokers = json.loads(text).get("brokers", {}).values()
        self._keep_largest("req_timeouts", sum(int(b.get("req_timeouts", 0)) for b in brokers))


@dataclass
class ReadBack:
    """Every record found in the topic, by (partition, offset), and whether the read reached
    each partition's high watermark."""

    records: dict[tuple[int, int], tuple[bytes, bytes]] = field(default_factory=dict)
    complete: bool = False


def read_back(bootstrap: str, topic: str, partitions: int, timeout_s: float = 60.0) -> ReadBack:
    """Read ``topic`` from ``bootstrap`` (the cluster, not the proxy) from the beginning to
    each partition's high watermark, as it stands when the read starts. No group offsets are
    used or committed."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"read-back-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
        }
    )
    result = ReadBack()
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                for p in range(partitions)}  # fmt: skip
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        deadline = time.monotonic() + timeout_s
        positions = dict.fromkeys(ends, 0)
        while time.monotonic() < deadline:
            if all(positions[p] >= end for p, end in ends.items()):
                result.complete = True
                break
            for msg in consumer.consume(num_messages=1000, timeout=0.2):
                if msg.error() is not None:
                    continue
                partition, offset = msg.partition(), msg.offset()
                key, value = msg.key() or b"", msg.value() or b""
                assert partition is not None and offset is not None
                assert isinstance(key, bytes) and isinstance(value, bytes)
                result.records[(partition, offset)] = (key, value)
                positions[partition] = max(positions[partition], offset + 1)
    finally:
        consumer.close()
    return result


@dataclass(frozen=True)
class Committed:
    """Per partition, the group's committed offset (-1: none) and the partition's end."""

    offsets: dict[int, int]
    ends: dict[int, int]


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> Committed:
    """The group's committed offsets and the high watermarks, asked of the cluster."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        wanted = [TopicPartition(topic, p) for p in range(partitions)]
        offsets = {tp.partition: tp.offset for tp in consumer.committed(wanted, timeout=30)}
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                for p in range(partitions)}  # fmt: skip
    finally:
        consumer.close()
    return Committed(offsets, ends)
