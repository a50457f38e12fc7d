"""Bad input closes only the offending connection, with one clear log line.

Each test opens a raw socket to a real proxy in front of the real broker, sends one class of
bad input, and checks three things: that connection is closed by the proxy, the proxy logged
why, and a healthy kafka-python producer that was connected throughout still works.
"""

from __future__ import annotations

import socket
import struct
import time
import uuid
from collections.abc import Iterator

import pytest
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic

from testbed.kafka_cluster import running_kafka
from testbed.processes import Broker, free_port
from testbed.proxy_process import ProxyProcess, running_proxy
from testbed.topics import create_topic

FRAME_TIMEOUT_MS = 500
IDLE_TIMEOUT_MS = 1500
MAX_REQUEST_BYTES = 1024 * 1024


@pytest.fixture(scope="module")
def strict_proxy(kafka_broker: Broker) -> Iterator[ProxyProcess]:
    env = {
        "PURGATORY_PROXY_CONNECTIONS__FRAME_TIMEOUT_MS": str(FRAME_TIMEOUT_MS),
        "PURGATORY_PROXY_CONNECTIONS__IDLE_TIMEOUT_MS": str(IDLE_TIMEOUT_MS),
        "PURGATORY_PROXY_MEMORY__SOCKET_REQUEST_MAX_BYTES": str(MAX_REQUEST_BYTES),
    }
    with running_proxy(kafka_broker.bootstrap, env=env) as proxy:
        yield proxy


@pytest.fixture
def healthy(strict_proxy: ProxyProcess) -> Iterator[tuple[KafkaProducer, str]]:
    """A producer connected before the bad input arrives; it must keep working after."""
    topic = f"healthy-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=strict_proxy.bootstrap)
    admin.create_topics([NewTopic(topic, 1, 1)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=strict_proxy.bootstrap, acks="all")
    producer.send(topic, b"before").get(timeout=10)
    yield producer, topic
    producer.close()


def _request_header(api_key: int, version: int, correlation_id: int = 1) -> bytes:
    client_id = b"bad-input-test"
    return struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id


def _closed_by_proxy(sock: socket.socket, timeout_s: float = 5.0) -> bool:
    """True when the proxy closes the connection (EOF or reset) within ``timeout_s``."""
    sock.settimeout(timeout_s)
    try:
        while True:
            if not sock.recv(65536):
                return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def _connect(proxy: ProxyProcess) -> socket.socket:
    return socket.create_connection((proxy.host, proxy.port), timeout=5)


def _assert_isolated(
    proxy: ProxyProcess, healthy: tuple[KafkaProducer, str], sent: bytes, log_pattern: str
) -> None:
    producer, topic = healthy
    with _connect(proxy) as sock:
        sock.sendall(sent)
        assert _closed_by_proxy(sock), "the proxy left the bad connection open"
    line = proxy.wait_for_log(r"closed client connection .*" + log_pattern)
    assert "\n" not in line.group(0)
    producer.send(topic, b"after").get(timeout=10)
    assert proxy.alive()


def test_oversized_frame(strict_proxy: ProxyProcess, healthy: tuple[KafkaProducer, str]) -> None:
    size = MAX_REQUEST_BYTES + 1
    _assert_isolated(strict_proxy, healthy, struct.pack(">i", size), f"frame size {size} exceeds")


def test_negative_frame(strict_proxy: ProxyProcess, healthy: tuple[KafkaProducer, str]) -> None:
    _assert_isolated(strict_proxy, healthy, struct.pack(">i", -7), "negative frame size -7")


def test_too_short_frame(strict_proxy: ProxyProcess, healthy: tuple[KafkaProducer, str]) -> None:
    _assert_isolated(
        strict_proxy, healthy, struct.pack(">i", 3) + b"abc", "frame of 3 bytes is too short"
    )


def test_truncated_frame(strict_proxy: ProxyProcess, healthy: tuple[KafkaProducer, str]) -> None:
    producer, topic = healthy
    with _connect(strict_proxy) as sock:
        sock.sendall(struct.pack(">i", 100) + b"x" * 10)
        sock.shutdown(socket.SHUT_WR)
        assert _closed_by_proxy(sock)
    strict_proxy.wait_for_log(r"closed client connection .*after 10 of 100 bytes")
    producer.send(topic, b"after").get(timeout=10)


def test_unknown_api_key(strict_proxy: ProxyProcess, healthy: tuple[KafkaProducer, str]) -> None:
    body = _request_header(9999, 0)
    _assert_isolated(
        strict_proxy, healthy, struct.pack(">i", len(body)) + body, "unknown API key 9999"
    )


def test_unsupported_version_of_rewritten_api(
    strict_proxy: ProxyProcess, healthy: tuple[KafkaProducer, str]
) -> None:
    body = _request_header(3, 99) + b"\x00\x00"  # Metadata v99
    _assert_isolated(
        strict_proxy, healthy, struct.pack(">i", len(body)) + body, "Metadata v99 is not supported"
    )


def test_malformed_body(strict_proxy: ProxyProcess, healthy: tuple[KafkaProducer, str]) -> None:
    body = _request_header(0, 7) + b"\xff\xfe\x00"  # Produce v7 whose body stops short
    _assert_isolated(
        strict_proxy, healthy, struct.pack(">i", len(body)) + body, "protocol error: .*Produce"
    )


def test_tls_client_hello(strict_proxy: ProxyProcess, healthy: tuple[KafkaProducer, str]) -> None:
    hello = bytes.fromhex("160301020001") + b"\x00" * 64  # a TLS 1.0 record, ClientHello
    _assert_isolated(strict_proxy, healthy, hello, "TLS record header")


def test_stalled_partial_frame(
    strict_proxy: ProxyProcess, healthy: tuple[KafkaProducer, str]
) -> None:
    producer, topic = healthy
    with _connect(strict_proxy) as sock:
        sock.sendall(struct.pack(">i", 50) + b"y" * 20)  # then nothing: slowloris
        started = time.monotonic()
        assert _closed_by_proxy(sock, timeout_s=FRAME_TIMEOUT_MS / 1000 + 5)
        waited_s = time.monotonic() - started
    assert waited_s >= FRAME_TIMEOUT_MS / 1000 * 0.9
    strict_proxy.wait_for_log(r"closed client connection .*frame of 50 bytes not complete in time")
    producer.send(topic, b"after").get(timeout=10)


def test_idle_connection_after_a_request_is_closed_as_idle(
    strict_proxy: ProxyProcess, healthy: tuple[KafkaProducer, str]
) -> None:
    """A client that completes a request and then sends nothing is closed for idleness
    (not mistaken for a stalled frame), and only that connection."""
    producer, topic = healthy
    with _connect(strict_proxy) as sock:
        body = _request_header(18, 0)  # ApiVersions v0
        sock.sendall(struct.pack(">i", len(body)) + body)
        (size,) = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))
        assert len(sock.recv(size, socket.MSG_WAITALL)) == size
        assert _closed_by_proxy(sock, timeout_s=IDLE_TIMEOUT_MS / 1000 + 5)
    strict_proxy.wait_for_log(r"closed client connection .*idle for 1\.5 s")
    producer.send(topic, b"after").get(timeout=10)


def test_unreachable_upstream_closes_client_and_proxy_recovers() -> None:
    """No broker behind the proxy: clients get a closed connection, never a hang; once the
    broker is there, the same proxy serves them."""
    port = free_port()
    with running_proxy(f"127.0.0.1:{port}") as proxy:
        with _connect(proxy) as sock:
            body = _request_header(18, 0)
            sock.sendall(struct.pack(">i", len(body)) + body)
            assert _closed_by_proxy(sock, timeout_s=15)
        proxy.wait_for_log(r"closed client connection .*upstream unreachable")
        proxy.wait_for_log(r"cannot fetch upstream metadata")
        assert proxy.alive()
        with running_kafka(1, port=port):
            proxy.wait_for_log(r"upstream metadata reachable again", timeout_s=15)
            topic = create_topic(proxy.bootstrap, "late")
            producer = KafkaProducer(bootstrap_servers=proxy.bootstrap, acks="all")
            assert producer.send(topic, b"late").get(timeout=10).offset == 0
            producer.close()
