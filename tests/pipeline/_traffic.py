"""Real traffic through the real proxy, and ``purgatory-proxy report`` over the log it wrote.

Traffic (one run for the whole session, about 15 s), all behind a 300 KiB memory pool:

- three kafka-python producers sending 50 KB records;
- a consumer group of two members on a topic of small records: the second member's join is a
  rebalance (JoinGroup, SyncGroup: waits the protocol asks for), and their first fetches find
  data (not held) while later ones wait for none (held to the deadline, expired);
- a kafka-python consumer without a group and a raw client long-polling an empty topic, the
  consumer on a broker port (its fetches held in the proxy's purgatory, expired), the raw
  client on the bootstrap port (its fetches forwarded, the broker waiting);
- two raw clients each send all but the last byte of a 180 KB Produce frame and hold it, so
  the pool is over-allocated (a frame's lease grows as its bytes arrive: the second one takes
  the overdraft) and every other connection is muted until both frames complete: the log must
  show muted requests, and does so deterministically (no timing);
- then, alone, a raw client's fetch held until a produce wakes it (held, woken by data),
  seen held in the proxy's gauge before the produce is sent;
- last, one request on a fresh connection in a window of its own: a window with one
  connection, which fairness must leave out.

The log is then analysed by ``purgatory-proxy report`` (the command line, as a user runs it)
on ``local[2]``; tests compare every figure with plain Python over the same file.
"""

from __future__ import annotations

import json
import math
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.protocol.old.fetch import FetchRequest
from kafka.protocol.old.metadata import MetadataRequest
from kafka.protocol.old.produce import ProduceRequest
from kafka.record.default_records import DefaultRecordBatchBuilder
from prometheus_client.parser import text_string_to_metric_families

from testbed.processes import Broker, free_port
from testbed.proxy_process import running_proxy

__all__ = ["WINDOW_S", "TrafficRun", "report_over_traffic"]

POOL_BYTES = 300 * 1024
HELD_FRAME_VALUE = b"h" * 180_000
WINDOW_S = 1
ROOT = Path(__file__).resolve().parents[2]
_GUARD_S = 30.0  # hang guards only
#: The woken fetch's max wait: far longer than the produce that wakes it takes to arrive.
WAKE_MAX_WAIT_MS = 20_000


@dataclass
class TrafficRun:
    """The request log's records, and what the report made of them."""

    log: list[dict[str, Any]]
    summary: dict[str, Any]
    out: Path
    stdout: str
    stderr: str


def _frame(request: Any, correlation_id: int, client_id: str) -> bytes:
    request.with_header(correlation_id=correlation_id, client_id=client_id)
    encoded: bytes = request.encode(header=True, framed=True)
    return encoded


def _records(value: bytes) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=False, producer_id=-1,
        producer_epoch=-1, base_sequence=-1, batch_size=1 << 21,
    )  # fmt: skip
    builder.append(0, timestamp=None, key=b"k", value=value, headers=[])
    return bytes(builder.build())


def _read_frame(sock: socket.socket) -> bytes:
    def exactly(size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = sock.recv(size - len(data))
            assert chunk, "proxy closed the connection"
            data += chunk
        return data

    (size,) = struct.unpack(">i", exactly(4))
    return exactly(size)


def _gauge(metrics_port: int, name: str) -> float:
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                return sample.value
    raise AssertionError(f"no {name} in /metrics")


def _wait_for_gauge(metrics_port: int, name: str, least: float, most: float = math.inf) -> None:
    deadline = time.monotonic() + _GUARD_S
    while not least <= _gauge(metrics_port, name) <= most:
        assert time.monotonic() < deadline, f"{name} never in [{least}, {most}]"
        time.sleep(0.05)


def _group(bootstrap: str, topic: str) -> None:
    """Two members of one group; the second joins once the first has its partitions."""
    group_id = f"group-{uuid.uuid4().hex[:6]}"
    first_assigned = threading.Event()

    def member(n: int) -> None:
        consumer = KafkaConsumer(
            topic, bootstrap_servers=bootstrap, client_id=f"member-{n}", group_id=group_id,
            auto_offset_reset="earliest", heartbeat_interval_ms=200, session_timeout_ms=6000,
            fetch_max_wait_ms=300,
        )  # fmt: skip
        deadline = time.monotonic() + _GUARD_S
        while not consumer.assignment():
            consumer.poll(timeout_ms=100)
            assert time.monotonic() < deadline, f"member-{n} was never assigned"
        first_assigned.set()
        end = time.monotonic() + 2.5
        while time.monotonic() < end:
            consumer.poll(timeout_ms=100)
        consumer.close()

    first = threading.Thread(target=member, args=(0,))
    first.start()
    assert first_assigned.wait(_GUARD_S), "the group's first member was never assigned"
    member(1)
    first.join(_GUARD_S)
    assert not first.is_alive()


def _woken_fetch(bootstrap: str, host: str, port: int, metrics_port: int, topic: str) -> None:
    """A fetch on a broker port held until a produce to its partition wakes it."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        consumer.topics()  # metadata: the broker ports the proxy advertises
        leader = consumer._client.cluster.leader_for_partition(TopicPartition(topic, 0))
        node = consumer._client.cluster.broker_metadata(leader)
    finally:
        consumer.close()
    held = "purgatory_proxy_fanin_held_fetches"
    _wait_for_gauge(metrics_port, held, 0, 0)  # the other clients' fetches are gone
    with socket.create_connection((node.host, node.port), timeout=_GUARD_S) as sock:
        fetch = FetchRequest[4](
            replica_id=-1, max_wait_ms=WAKE_MAX_WAIT_MS, min_bytes=1, max_bytes=1 << 20,
            isolation_level=0, topics=[(topic, [(0, 0, 1 << 20)])],
        )  # fmt: skip
        sock.sendall(_frame(fetch, 1, "woken"))
        _wait_for_gauge(metrics_port, held, 1)
        producer = KafkaProducer(bootstrap_servers=bootstrap, client_id="waker", acks=1)
        producer.send(topic, b"news").get(timeout=_GUARD_S)
        producer.close()
        _read_frame(sock)


def _alone_in_a_window(host: str, port: int) -> None:
    """One request on a fresh connection, in a window no other connection uses (a Metadata:
    the proxy may answer an ApiVersions itself, and then logs no client id)."""
    now = time.time()
    time.sleep(math.floor(now / WINDOW_S) * WINDOW_S + WINDOW_S + 0.2 - now)
    with socket.create_connection((host, port), timeout=_GUARD_S) as sock:
        sock.sendall(_frame(MetadataRequest[1](topics=[]), 1, "alone"))
        _read_frame(sock)


def _drive_traffic(bootstrap: str, host: str, port: int, metrics_port: int) -> None:
    suffix = uuid.uuid4().hex[:6]
    busy, empty, small, woken = (f"{name}-{suffix}" for name in ("busy", "empty", "small", "woken"))
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="admin")
    admin.create_topics([NewTopic(name, 1, 1) for name in (busy, empty, small, woken)])
    admin.close()
    seeder = KafkaProducer(bootstrap_servers=bootstrap, client_id="seeder", acks=1)
    for i in range(20):
        seeder.send(small, b"s" * 1000, key=b"%d" % i)
    seeder.flush(timeout=_GUARD_S)
    seeder.close()

    # Two frames sent but for their last byte over-allocate the pool (leases grow as bytes
    # arrive, so half-sent frames would hold only half): everyone else is muted until they end.
    holders = []
    for n in range(2):
        produce = ProduceRequest[3](
            transactional_id=None, acks=1, timeout_ms=10_000,
            topic_data=[(busy, [(0, _records(HELD_FRAME_VALUE))])],
        )  # fmt: skip
        frame = _frame(produce, n, f"holder-{n}")
        sock = socket.create_connection((host, port), timeout=_GUARD_S)
        sock.sendall(frame[:-1])
        holders.append((sock, frame))

    def produce(name: str) -> None:
        producer = KafkaProducer(
            bootstrap_servers=bootstrap, client_id=name, acks=1, linger_ms=0,
            max_request_size=250_000, request_timeout_ms=30_000,
        )  # fmt: skip
        for i in range(8):
            producer.send(busy, key=b"%d" % i, value=bytes([65 + i]) * 50_000).get(timeout=30)
        producer.close()

    def consume() -> None:
        consumer = KafkaConsumer(
            empty, bootstrap_servers=bootstrap, client_id="consumer", group_id=None,
            auto_offset_reset="earliest", fetch_max_wait_ms=200,
        )  # fmt: skip
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            assert not consumer.poll(timeout_ms=200)  # the topic stays empty
        consumer.close()

    def long_poll() -> None:
        with socket.create_connection((host, port), timeout=_GUARD_S) as sock:
            for n in range(4):
                fetch = FetchRequest[4](
                    replica_id=-1, max_wait_ms=300, min_bytes=1, max_bytes=1 << 20,
                    isolation_level=0, topics=[(empty, [(0, 0, 1 << 20)])],
                )  # fmt: skip
                sock.sendall(_frame(fetch, n, "poller"))
                _read_frame(sock)

    threads = [threading.Thread(target=produce, args=(f"producer-{n}",)) for n in range(3)]
    threads += [threading.Thread(target=consume), threading.Thread(target=long_poll)]
    threads += [threading.Thread(target=_group, args=(bootstrap, small))]
    for thread in threads:
        thread.start()
    _wait_for_gauge(metrics_port, "purgatory_proxy_memory_pool_muted_connections", 2)
    for sock, frame in holders:
        sock.sendall(frame[-1:])
        _read_frame(sock)
        sock.close()
    for thread in threads:
        thread.join(timeout=60)
        assert not thread.is_alive()
    _woken_fetch(bootstrap, host, port, metrics_port, woken)
    _alone_in_a_window(host, port)


def report_over_traffic(broker: Broker, work: Path) -> TrafficRun:
    """Drive the traffic through a proxy in front of ``broker``, then report on its log."""
    log_path, metrics_port = work / "requests.jsonl", free_port()
    with running_proxy(
        broker.bootstrap,
        "--memory-limit", str(POOL_BYTES),
        "--metrics", f"127.0.0.1:{metrics_port}",
        "--request-log", str(log_path),
        env={"PURGATORY_PROXY_MEMORY__SOCKET_REQUEST_MAX_BYTES": str(POOL_BYTES)},
    ) as proxy:  # fmt: skip
        _drive_traffic(proxy.bootstrap, proxy.host, proxy.port, metrics_port)
        assert proxy.stop(signal.SIGTERM) == 0  # flushes the request log
    log = [json.loads(line) for line in log_path.read_text().splitlines()]
    out = work / "report"
    command = [
        sys.executable, "-m", "proxy", "report", "--logs", str(work / "requests.jsonl*"),
        "--out", str(out), "--master", "local[2]", "--window-s", str(WINDOW_S),
    ]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    return TrafficRun(log, summary, out, done.stdout, done.stderr)
