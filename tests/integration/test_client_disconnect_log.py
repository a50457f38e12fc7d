"""A client's normal exit is logged as one (DEBUG) line saying so (issue 28 item 2).

A client that pipelines requests and closes (or resets) its socket before reading the answers
is how clients end every day; the proxy then writes into a closed socket and the OS says
EPIPE or ECONNRESET. That used to be "closed client connection ...: connection broke: socket
failed: [Errno 32] Broken pipe" at INFO, which reads like a fault. Real sockets against a
real proxy and the suite's broker: the bytes and the OS errors are the real ones.
"""

from __future__ import annotations

import socket
import struct
import time

import pytest

from testbed.processes import Broker
from testbed.proxy_process import ProxyProcess, running_proxy

#: Pipelined requests, enough that answers are still being written when the RST comes back.
REQUESTS = 200


def _metadata_request(correlation_id: int) -> bytes:
    """Metadata v1 for every topic (topics = null), header v1 with client id "bye"."""
    body = struct.pack(">hhih", 3, 1, correlation_id, 3) + b"bye" + struct.pack(">i", -1)
    return struct.pack(">i", len(body)) + body


@pytest.fixture(scope="module")
def proxy(kafka_broker: Broker) -> ProxyProcess:
    with running_proxy(kafka_broker.bootstrap, "--log-level", "DEBUG") as running:
        yield running  # type: ignore[misc]


def _end_line(proxy: ProxyProcess, offset: int) -> str:
    """The first line about a connection's end logged after ``offset`` (a log length)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        for line in proxy.log_text()[offset:].splitlines():
            if "closed client connection" in line or " ended" in line:
                return line
        time.sleep(0.05)
    raise AssertionError(f"no end line after offset {offset}:\n{proxy.log_text()}")


@pytest.mark.parametrize("how", ["close", "reset"])
def test_a_client_that_leaves_with_answers_owed_is_a_debug_line(
    proxy: ProxyProcess, how: str
) -> None:
    for _ in range(5):  # the OS decides when the reset lands: repeat until answers were owed
        offset = len(proxy.log_text())
        sock = socket.create_connection((proxy.host, proxy.port))
        sock.sendall(b"".join(_metadata_request(i) for i in range(REQUESTS)))
        if how == "reset":
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()  # at once: the answers are still to be written
        line = _end_line(proxy, offset)
        assert "connection broke" not in line, line
        if "ended: the client" in line:
            break
    else:
        pytest.fail(f"no client left with answers owed in 5 tries:\n{proxy.log_text()}")
    assert " DEBUG " in line
    expected = "reset the connection" if how == "reset" else "closed the connection before"
    assert expected in line or "before its answers were all sent" in line
    log = proxy.log_text()
    assert "connection broke" not in log
    assert "Broken pipe" not in log and "reset by peer" not in log
    assert proxy.alive()
