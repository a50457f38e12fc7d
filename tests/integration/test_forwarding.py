"""Forwarding through the proxy: pipelined order, acks=0, and no upstream address leaking.

Requests are built with kafka-python's own protocol classes (independent of our codec) and
sent on raw sockets, so the test sees exactly the bytes a client would.
"""

from __future__ import annotations

import re
import socket
import struct
import time

from kafka.protocol.old.api_versions import ApiVersionsRequest
from kafka.protocol.old.fetch import FetchRequest
from kafka.protocol.old.find_coordinator import FindCoordinatorRequest
from kafka.protocol.old.list_offsets import ListOffsetsRequest
from kafka.protocol.old.metadata import MetadataRequest
from kafka.protocol.old.produce import ProduceRequest
from kafka.record.default_records import DefaultRecordBatchBuilder

from testbed.processes import Broker
from testbed.proxy_process import ProxyProcess
from testbed.topics import create_topic


def _topic(bootstrap: str, partitions: int = 1) -> str:
    return create_topic(bootstrap, "fwd", partitions=partitions)


def _records(value: bytes) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=False, producer_id=-1,
        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20,
    )  # fmt: skip
    builder.append(0, timestamp=None, key=b"k", value=value, headers=[])
    return bytes(builder.build())


def _frame(request: object, correlation_id: int) -> bytes:
    request.with_header(correlation_id=correlation_id, client_id="ordering-test")  # type: ignore[attr-defined]
    encoded: bytes = request.encode(header=True, framed=True)  # type: ignore[attr-defined]
    return encoded


def _read_frame(sock: socket.socket) -> bytes:
    (size,) = struct.unpack(">i", _read_exactly(sock, 4))
    return _read_exactly(sock, size)


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    chunks, have = [], 0
    while have < size:
        chunk = sock.recv(size - have)
        assert chunk, f"connection closed after {have} of {size} bytes"
        chunks.append(chunk)
        have += len(chunk)
    return b"".join(chunks)


def test_pipelined_mixed_requests_come_back_in_order(proxy: ProxyProcess) -> None:
    topic = _topic(proxy.bootstrap)
    requests = []
    for i in range(60):
        kind = i % 6
        if kind == 0:
            requests.append((ApiVersionsRequest[2](), True))
        elif kind == 1:
            requests.append((MetadataRequest[1](topics=[topic]), True))
        elif kind == 2:
            produce = ProduceRequest[3](
                transactional_id=None, acks=1, timeout_ms=5000,
                topic_data=[(topic, [(0, _records(b"acked-%d" % i))])],
            )  # fmt: skip
            requests.append((produce, True))
        elif kind == 3:
            produce = ProduceRequest[3](
                transactional_id=None, acks=0, timeout_ms=5000,
                topic_data=[(topic, [(0, _records(b"fire-and-forget-%d" % i))])],
            )  # fmt: skip
            requests.append((produce, False))
        elif kind == 4:
            listing = ListOffsetsRequest[1](replica_id=-1, topics=[(topic, [(0, -2)])])
            requests.append((listing, True))
        else:
            fetch = FetchRequest[4](
                replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
                isolation_level=0, topics=[(topic, [(0, 0, 1 << 20)])],
            )  # fmt: skip
            requests.append((fetch, True))
    with socket.create_connection((proxy.host, proxy.port), timeout=15) as sock:
        sock.sendall(b"".join(_frame(req, cid) for cid, (req, _) in enumerate(requests)))
        expected = [cid for cid, (_, answered) in enumerate(requests) if answered]
        seen = [struct.unpack(">i", _read_frame(sock)[:4])[0] for _ in expected]
        assert seen == expected
        # acks=0 produces got no response: nothing more arrives.
        sock.settimeout(0.5)
        try:
            extra = sock.recv(1)
        except TimeoutError:
            extra = b""
        assert extra == b""


def test_no_upstream_address_in_any_response(kafka_broker: Broker, proxy: ProxyProcess) -> None:
    """Every response that names brokers names the proxy, at all versions we can try."""
    topic = _topic(proxy.bootstrap, partitions=3)
    upstream_port = struct.pack(">i", kafka_broker.port)
    requests: list[object] = [MetadataRequest[v](topics=[topic]) for v in (1, 2, 3, 4, 5, 6, 7)]
    requests += [
        FindCoordinatorRequest[0](f"{topic}-group"),
        FindCoordinatorRequest[1](f"{topic}-group", 0),
        FindCoordinatorRequest[2](f"{topic}-group", 0),
    ]
    with socket.create_connection((proxy.host, proxy.port), timeout=15) as sock:
        for cid, request in enumerate(requests):
            response = _answer(sock, request, cid)
            assert upstream_port not in response, f"{request} leaked the upstream port"
            ports = _advertised_ports(proxy)
            assert any(struct.pack(">i", port) in response for port in ports), request


FIND_COORDINATOR = 10
COORDINATOR_NOT_AVAILABLE = 15


def _answer(sock: socket.socket, request: object, correlation_id: int) -> bytes:
    """The response frame to ``request``. A FindCoordinator is asked again while Kafka answers
    COORDINATOR_NOT_AVAILABLE (its first one creates the offsets topic), as clients do."""
    give_up = time.monotonic() + 30
    while True:
        sock.sendall(_frame(request, correlation_id))
        response = _read_frame(sock)
        if request.API_KEY != FIND_COORDINATOR:  # type: ignore[attr-defined]
            return response
        version = request.API_VERSION  # type: ignore[attr-defined]
        at = 4 if version == 0 else 8  # after the correlation id (and throttle_time_ms)
        (error_code,) = struct.unpack(">h", response[at : at + 2])
        if error_code != COORDINATOR_NOT_AVAILABLE or time.monotonic() > give_up:
            return response
        time.sleep(0.1)


def _advertised_ports(proxy: ProxyProcess) -> list[int]:
    return [int(port) for port in re.findall(r"is served at \S+:(\d+)", proxy.log_text())]


def test_sigterm_drains_an_in_flight_long_poll(kafka_broker: Broker) -> None:
    """SIGTERM stops accepting, but a fetch already waiting upstream still gets its answer."""
    import signal

    from testbed.proxy_process import running_proxy

    with running_proxy(kafka_broker.bootstrap) as proxy:
        topic = _topic(proxy.bootstrap)
        fetch = FetchRequest[4](
            replica_id=-1, max_wait_ms=1500, min_bytes=1, max_bytes=1 << 20,
            isolation_level=0, topics=[(topic, [(0, 0, 1 << 20)])],
        )  # fmt: skip
        with socket.create_connection((proxy.host, proxy.port), timeout=15) as sock:
            # One full exchange first: the connection's upstream is up and its reader waits.
            sock.sendall(_frame(ApiVersionsRequest[0](), 41))
            assert struct.unpack(">i", _read_frame(sock)[:4])[0] == 41
            sock.sendall(_frame(fetch, 42))
            time.sleep(0.3)  # the reader takes it within a scheduling tick; the fetch waits 1.5 s
            proxy._proc.send_signal(signal.SIGTERM)
            response = _read_frame(sock)
            assert struct.unpack(">i", response[:4])[0] == 42
            assert sock.recv(1) == b""  # then the proxy closes the drained connection
        assert proxy._proc.wait(timeout=15) == 0
        assert "draining connections" in proxy.log_text()


def test_client_that_reads_late_is_back_pressured_not_dropped(proxy: ProxyProcess) -> None:
    """5,000 pipelined requests from a client that reads nothing until it has sent them all:
    the proxy stops reading once 1,024 answers are owed (TCP holds the rest), and every
    answer then arrives, in order."""
    count = 5000
    with socket.create_connection((proxy.host, proxy.port), timeout=30) as sock:
        sock.sendall(b"".join(_frame(ApiVersionsRequest[0](), cid) for cid in range(count)))
        time.sleep(0.5)  # let the proxy fill every buffer it can before we read
        seen = [struct.unpack(">i", _read_frame(sock)[:4])[0] for _ in range(count)]
    assert seen == list(range(count))
    assert proxy.alive()
