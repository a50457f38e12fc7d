# Strategy: the long-poll and produce-timeout tests measure how long one request takes, so
# they talk Kafka on a plain blocking socket, one request at a time, with kafka-python's own
# protocol classes (independent of our wire codec). A client library would hide the
# request behind its own timers, retries and prefetching; a raw socket shows exactly when
# the proxy (or the broker) answered. Records are built with kafka-python's batch builder
# and read back with its MemoryRecords, so sizes and contents are the real wire bytes.
"""A small synchronous Kafka client for timing single requests: Fetch, Produce, Metadata."""

from __future__ import annotations

import re
import socket
import struct
import time
import urllib.request
from dataclasses import dataclass
from typing import Any

from kafka.protocol.old.fetch import FetchRequest, FetchResponse
from kafka.protocol.old.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from kafka.protocol.old.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.old.produce import ProduceRequest, ProduceResponse
from kafka.record import MemoryRecords
from kafka.record.default_records import DefaultRecordBatchBuilder

__all__ = [
    "REQUEST_TIMED_OUT",
    "FetchAnswer",
    "RawConnection",
    "batch",
    "coordinator_of",
    "leader_address",
    "metric_value",
]

REQUEST_TIMED_OUT = 7


def coordinator_of(bootstrap: str, group: str) -> int:
    """The node id of ``group``'s coordinator, as ``bootstrap`` answers FindCoordinator v0
    (asked again while the coordinator is not available yet: the offsets topic is new)."""
    give_up = time.monotonic() + 30
    with RawConnection(bootstrap) as conn:
        while True:
            response = conn.call(FindCoordinatorRequest[0](group), FindCoordinatorResponse[0])
            if response.error_code == 0 or time.monotonic() > give_up:
                assert response.error_code == 0, response
                return int(response.coordinator_id)
            time.sleep(0.1)


def leader_address(bootstrap: str, topic: str) -> str:
    """HOST:PORT of partition 0's leader as ``bootstrap`` advertises it (Metadata v1).

    Clients fetch from the leader's address, which through the proxy is the proxy's port
    for that broker; the proxy terminates fetches there, not on its bootstrap port.
    """
    with RawConnection(bootstrap) as conn:
        response = conn.call(MetadataRequest[1](topics=[topic]), MetadataResponse[1])
    brokers = {node_id: f"{host}:{port}" for node_id, host, port, _rack in response.brokers}
    _error, _name, _internal, partitions = response.topics[0]
    leader = next(leader_id for _e, index, leader_id, *_ in partitions if index == 0)
    return brokers[leader]


def batch(*values: bytes) -> bytes:
    """One uncompressed, non-idempotent v2 record batch holding ``values`` (key b"k")."""
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=False, producer_id=-1,
        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20,
    )  # fmt: skip
    for offset, value in enumerate(values):
        builder.append(offset, timestamp=None, key=b"k", value=value, headers=[])
    return bytes(builder.build())


@dataclass(frozen=True)
class FetchAnswer:
    """One partition's part of a Fetch response, and how long the whole request took."""

    elapsed_s: float
    error_code: int
    high_watermark: int
    values: tuple[bytes, ...]
    record_bytes: int
    session_id: int = 0


class RawConnection:
    """One TCP connection; ``call`` sends a request and blocks for its response.

    Resource handling: use as a context manager; the socket is closed on exit.
    Error handling: a closed connection or a wrong correlation id raises AssertionError,
    because either means the peer broke the protocol the test relies on.
    """

    def __init__(self, bootstrap: str, timeout_s: float = 30.0) -> None:
        host, _, port = bootstrap.split(",")[0].rpartition(":")  # the first of a list
        self._sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        self._correlation_id = 0

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self._sock.close()

    def send(self, request: Any) -> int:
        """Send ``request`` without waiting; return its correlation id."""
        self._correlation_id += 1
        request.with_header(correlation_id=self._correlation_id, client_id="long-poll-test")
        self._sock.sendall(request.encode(header=True, framed=True))
        return self._correlation_id

    def receive(self, correlation_id: int, response_type: Any) -> Any:
        """Read the next response, check it answers ``correlation_id``, decode its body."""
        (size,) = struct.unpack(">i", self._read_exactly(4))
        body = self._read_exactly(size)
        (answered,) = struct.unpack(">i", body[:4])
        assert answered == correlation_id, f"response to {answered}, expected {correlation_id}"
        return response_type.decode(body[4:])

    def call(self, request: Any, response_type: Any) -> Any:
        return self.receive(self.send(request), response_type)

    def produce(
        self, topic: str, records: bytes, *, acks: int = -1, timeout_ms: int = 10_000
    ) -> tuple[int, int]:
        """Produce one batch to partition 0; return (error code, base offset)."""
        request = ProduceRequest[3](
            transactional_id=None, acks=acks, timeout_ms=timeout_ms,
            topic_data=[(topic, [(0, records)])],
        )  # fmt: skip
        response = self.call(request, ProduceResponse[3])
        _, partitions = response.responses[0]
        _, error_code, base_offset, *_ = partitions[0]
        return error_code, base_offset

    def fetch(
        self,
        topic: str,
        offset: int,
        *,
        max_wait_ms: int,
        min_bytes: int = 1,
        version: int = 4,
        session_id: int = 0,
        session_epoch: int = -1,
        include_partition: bool = True,
    ) -> FetchAnswer:
        """One Fetch of partition 0 of ``topic`` from ``offset``; timed from send to answer.

        Versions below 7 have no sessions. From 7 on, ``session_epoch=-1`` is sessionless,
        ``(0, 0)`` opens a session, and ``(id, n)`` with ``include_partition=False`` is an
        incremental fetch that lists nothing because nothing changed (KIP-227).
        """
        partition: tuple[int, ...] = (0, offset, 1 << 20)
        if version >= 9:
            partition = (0, -1, offset, -1, 1 << 20)  # current_leader_epoch, log_start_offset
        elif version >= 5:
            partition = (0, offset, -1, 1 << 20)  # log_start_offset
        topics = [(topic, [partition])] if include_partition else []
        fields: dict[str, Any] = {
            "replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": min_bytes,
            "max_bytes": 1 << 20, "isolation_level": 0, "topics": topics,
        }  # fmt: skip
        if version >= 7:
            fields |= {"session_id": session_id, "session_epoch": session_epoch,
                       "forgotten_topics_data": []}  # fmt: skip
        if version >= 11:
            fields["rack_id"] = ""
        started = time.monotonic()
        response = self.call(FetchRequest[version](**fields), FetchResponse[version])
        elapsed_s = time.monotonic() - started
        session = getattr(response, "session_id", 0)
        if getattr(response, "error_code", 0):
            return FetchAnswer(elapsed_s, response.error_code, -1, (), 0, session)
        if not response.responses:  # an incremental answer with no news
            return FetchAnswer(elapsed_s, 0, -1, (), 0, session)
        _, partitions = response.responses[0]
        part = partitions[0]
        error_code, high_watermark, raw = part[1], part[2], part[-1]
        values = tuple(_values(raw))
        return FetchAnswer(elapsed_s, error_code, high_watermark, values, len(raw or b""), session)

    def _read_exactly(self, size: int) -> bytes:
        chunks, have = [], 0
        while have < size:
            chunk = self._sock.recv(size - have)
            assert chunk, f"connection closed after {have} of {size} bytes"
            chunks.append(chunk)
            have += len(chunk)
        return b"".join(chunks)


def _values(raw: bytes | None) -> list[bytes]:
    values: list[bytes] = []
    records = MemoryRecords(raw or b"")
    while records.has_next():
        batch_ = records.next_batch()
        if batch_ is None:  # a partial batch at the end of the response
            break
        values.extend(record.value for record in batch_)
    return values


def metric_value(metrics_address: str, name: str, **labels: str) -> float:
    """The sum of every sample of ``name`` whose labels include ``labels`` (0 if none)."""
    with urllib.request.urlopen(f"http://{metrics_address}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    total = 0.0
    pattern = re.compile(rf"^{re.escape(name)}(?:\{{(?P<labels>[^}}]*)\}})? (?P<value>\S+)$")
    for line in text.splitlines():
        found = pattern.match(line)
        if not found:
            continue
        sample = dict(re.findall(r'(\w+)="([^"]*)"', found["labels"] or ""))
        if all(sample.get(key) == value for key, value in labels.items()):
            total += float(found["value"])
    return total
