# Strategy: a read_committed fetch may read only up to the last stable offset (LSO): records of
# an open transaction raise the high watermark but not the LSO, and only the transaction's
# marker (written by the transaction coordinator, never produced through the proxy) moves it.
# Held in the proxy, such a fetch must behave as Kafka's DelayedFetch does: an open
# transaction's records do not answer it, the commit marker wakes it at once with exactly the
# committed records, and an abort's records come only as aborted (covered by the answer's
# aborted_transactions, which a read_committed client drops).
#
# The raw test reads one partition with kafka-python's own Fetch v11 (isolation_level 1) on a
# blocking socket, so the moment of each answer is exact, while a librdkafka transactional
# producer acts on a timer thread: open a transaction and write, commit; open another, write,
# abort. It runs with the producer through the proxy (its produces mark the partition stale and
# wake the held fetch, whose re-fetch must find nothing past the LSO and hold again) and
# straight to the broker (only the proxy's upstream watcher can learn of the marker), with
# sessionless fetches and with a KIP-227 session whose idle repeats the proxy holds from
# their bytes (proxy/held/fetch/repeat.py). The client test is confluent-kafka's
# read_committed consumer through the proxy against committed and aborted transactions.
"""read_committed fetches held in the proxy against Apache Kafka's transactions."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka.protocol.old.fetch import FetchRequest, FetchResponse
from kafka.record import MemoryRecords

from testbed.processes import Broker
from testbed.proxy_process import ProxyProcess
from testbed.topics import create_topic
from tests.integration._kafka_raw import RawConnection, leader_address

READ_COMMITTED = 1
FETCH_VERSION = 11  # kafka-python's newest: sessions, isolation level, aborted transactions
#: How long a fetch with nothing readable is held; a marker must wake it long before.
LONG_WAIT_MS = 10_000
#: The open transaction's fetch: it must last exactly its max wait.
OPEN_WAIT_MS = 3_000
#: When the producer acts, in seconds after the fetch it is meant to meet was sent.
ACT_AFTER_S = 1.0
#: "At once" for a woken fetch: far below LONG_WAIT_MS, generous for a shared machine.
WAKE_BOUND_S = 3.0
EARLY_S = 0.05  # a fetch answered this much before its max wait was answered early


@dataclass(frozen=True)
class ReadCommitted:
    """One partition of a read_committed Fetch answer, as a read_committed client sees it."""

    elapsed_s: float
    answered_s: float  # time.monotonic() when the answer was read
    session_id: int
    present: bool  # an incremental answer leaves out a partition with no news
    high_watermark: int = -1
    last_stable_offset: int = -1
    kept: tuple[bytes, ...] = ()  # records a read_committed client hands to the application
    aborted: tuple[bytes, ...] = ()  # records the answer marks aborted
    next_offset: int = -1  # past the last batch (control batches included)


def _read_committed(
    raw: bytes | None, aborted_txns: list[tuple[int, int]]
) -> tuple[tuple[bytes, ...], tuple[bytes, ...], int]:
    """Split the record batches as Kafka's consumer does: control batches end a producer's
    transaction; a transactional batch of a producer inside an aborted transaction (listed
    in ``aborted_txns`` as (producer id, first offset)) is dropped."""
    kept: list[bytes] = []
    dropped: list[bytes] = []
    aborting: set[int] = set()
    pending = sorted(aborted_txns, key=lambda txn: txn[1])
    next_offset = -1
    records = MemoryRecords(raw or b"")
    while records.has_next():
        batch = records.next_batch()
        if batch is None:
            break
        while pending and pending[0][1] <= batch.base_offset:
            aborting.add(pending.pop(0)[0])
        values = [record.value for record in batch]
        next_offset = batch.base_offset + len(values)
        if batch.is_control_batch:
            aborting.discard(batch.producer_id)
        elif batch.is_transactional and batch.producer_id in aborting:
            dropped += values
        else:
            kept += values
    return tuple(kept), tuple(dropped), next_offset


@dataclass
class Reader:
    """A read_committed consumer of partition 0 on a raw socket, sessionless or with a
    KIP-227 session (the partition is listed only when its offset changed)."""

    conn: RawConnection
    topic: str
    sessions: bool
    offset: int = 0
    session_id: int = 0
    epoch: int = 0
    _listed_offset: int = -1

    def fetch(self, max_wait_ms: int) -> ReadCommitted:
        list_it = not self.sessions or self.offset != self._listed_offset
        partition = (0, -1, self.offset, -1, 1 << 20)  # leader epoch, log start: unknown
        request = FetchRequest[FETCH_VERSION](
            replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20,
            isolation_level=READ_COMMITTED,
            session_id=self.session_id if self.sessions else 0,
            session_epoch=self.epoch if self.sessions else -1,
            topics=[(self.topic, [partition])] if list_it else [],
            forgotten_topics_data=[], rack_id="",
        )  # fmt: skip
        started = time.monotonic()
        response = self.conn.call(request, FetchResponse[FETCH_VERSION])
        answered = time.monotonic()
        elapsed = answered - started
        assert response.error_code == 0, response
        if self.sessions:
            self.session_id, self.epoch = response.session_id, self.epoch + 1
            self._listed_offset = self.offset
        if not response.responses:
            return ReadCommitted(elapsed, answered, response.session_id, False)
        ((_, partitions),) = response.responses
        index, error, high_watermark, lso, _log_start, aborted_txns, *_, raw = partitions[0]
        assert (index, error) == (0, 0), partitions[0]
        kept, dropped, next_offset = _read_committed(raw, aborted_txns or [])
        if next_offset >= 0:
            self.offset = next_offset
        return ReadCommitted(elapsed, answered, response.session_id, True, high_watermark, lso,
                             kept, dropped, next_offset)  # fmt: skip


@dataclass
class Transactions:
    """A librdkafka transactional producer whose steps run on a timer thread, each stamped
    with the moment it finished."""

    producer: Producer
    topic: str
    done: dict[str, float] = field(default_factory=dict)

    @classmethod
    def open(cls, bootstrap: str, topic: str) -> Transactions:
        producer = Producer(
            {"bootstrap.servers": bootstrap, "transactional.id": f"rc-{uuid.uuid4().hex[:8]}"}
        )
        producer.init_transactions(60)
        return cls(producer, topic)

    def write(self, *values: bytes) -> None:
        self.producer.begin_transaction()
        for value in values:
            self.producer.produce(self.topic, value=value, partition=0)
        self.producer.flush(30)
        self.done["write"] = time.monotonic()

    def commit(self) -> None:
        self.done["commit-start"] = time.monotonic()
        self.producer.commit_transaction(30)
        self.done["commit"] = time.monotonic()

    def abort(self) -> None:
        self.done["abort-start"] = time.monotonic()
        self.producer.abort_transaction(30)
        self.done["abort"] = time.monotonic()

    def later(self, *steps: Callable[[], None]) -> threading.Thread:
        """Run ``steps`` one after another, ACT_AFTER_S apart, starting ACT_AFTER_S from now."""

        def run() -> None:
            for step in steps:
                time.sleep(ACT_AFTER_S)
                step()

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread


@pytest.mark.parametrize(
    ("producer_via", "sessions"),
    [("proxy", True), ("proxy", False), ("broker", True)],
    ids=["produced-through-proxy-session", "produced-through-proxy-sessionless",
         "produced-behind-proxy-session"],
)  # fmt: skip
def test_held_read_committed_fetch_waits_on_the_last_stable_offset(
    kafka_broker: Broker, proxy: ProxyProcess, producer_via: str, sessions: bool
) -> None:
    topic = create_topic(proxy.bootstrap, "read-committed")
    txns = Transactions.open(proxy.bootstrap if producer_via == "proxy" else
                             kafka_broker.bootstrap, topic)  # fmt: skip
    with RawConnection(leader_address(proxy.bootstrap, topic)) as conn:
        reader = Reader(conn, topic, sessions)
        first = reader.fetch(max_wait_ms=100)  # the session (if any) is opened; nothing yet
        assert first.kept == () and first.last_stable_offset == 0, first

        # An open transaction's records raise the high watermark only: not a wake-up.
        step = txns.later(lambda: txns.write(b"c1", b"c2", b"c3"))
        during = reader.fetch(max_wait_ms=OPEN_WAIT_MS)
        step.join()
        assert during.kept == () and during.aborted == (), during
        assert during.elapsed_s >= OPEN_WAIT_MS / 1000 - EARLY_S, (
            f"answered after {during.elapsed_s:.3f} s, before its max wait, with nothing "
            "readable: the open transaction's records woke it"
        )
        if during.present:  # (an incremental answer carries the partition: its end moved)
            assert (during.high_watermark, during.last_stable_offset) == (3, 0), during

        # The commit marker wakes it at once, with exactly the committed records.
        step = txns.later(txns.commit)
        committed = reader.fetch(max_wait_ms=LONG_WAIT_MS)
        step.join()
        woke_s = committed.answered_s - txns.done["commit-start"]
        assert committed.kept == (b"c1", b"c2", b"c3") and committed.aborted == (), committed
        assert committed.elapsed_s < LONG_WAIT_MS / 1000 / 2 and woke_s < WAKE_BOUND_S, (
            f"the commit woke the held fetch {woke_s:.3f} s after it (bound {WAKE_BOUND_S} s, "
            f"max wait {LONG_WAIT_MS} ms)"
        )
        assert committed.last_stable_offset == committed.next_offset == 4, committed

        # An aborted transaction's records never come as readable; the abort marker moves
        # the LSO past them, and the answer that carries them marks them aborted.
        step = txns.later(lambda: txns.write(b"a1", b"a2"), txns.abort)
        aborted = reader.fetch(max_wait_ms=LONG_WAIT_MS)
        step.join()
        assert aborted.kept == (), f"a read_committed reader got aborted records: {aborted}"
        assert aborted.aborted == (b"a1", b"a2"), aborted
        assert aborted.answered_s >= txns.done["abort-start"], (
            "answered before the abort, while the transaction was open"
        )
        assert aborted.last_stable_offset == aborted.next_offset == 7, aborted

        # Past the abort marker there is nothing: held to the max wait.
        after = reader.fetch(max_wait_ms=OPEN_WAIT_MS)
        assert after.kept == () and after.aborted == (), after
        assert after.elapsed_s >= OPEN_WAIT_MS / 1000 - EARLY_S, after
    txns.producer.flush(10)


def test_read_committed_consumer_gets_exactly_the_committed_records(
    proxy: ProxyProcess,
) -> None:
    topic = create_topic(proxy.bootstrap, "read-committed-client")
    txns = Transactions.open(proxy.bootstrap, topic)
    consumer = Consumer(
        {
            "bootstrap.servers": proxy.bootstrap,
            "group.id": f"rc-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 5000,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []

    def consume_until(count: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while len(got) < count and time.monotonic() < deadline:
            for message in consumer.consume(100, timeout=0.2):
                assert message.error() is None, message.error()
                got.append(message.value() or b"")

    try:
        consume_until(1, 2.0)  # joined and held at the (empty) end
        txns.write(*(b"committed-%d" % i for i in range(5)))
        txns.commit()
        txns.write(*(b"aborted-%d" % i for i in range(5)))
        txns.abort()
        txns.write(b"committed-last")
        consume_until(6, 3.0)  # the last transaction is still open: nothing of it yet
        open_seen = list(got)
        txns.commit()
        consume_until(6, 30.0)
        time.sleep(1.0)  # anything more (an aborted record) would come now
        consume_until(7, 0.5)
    finally:
        consumer.close()
        txns.producer.flush(10)
    expected = [b"committed-%d" % i for i in range(5)] + [b"committed-last"]
    assert open_seen == expected[:5], f"before the last commit: {open_seen}"
    assert got == expected, f"read_committed consumer got {got}"
