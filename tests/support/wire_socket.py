# Strategy: some checks read single answers field by field, tagged fields included (KIP-951's
# current_leader and node_endpoints of Produce v10+ and Fetch v16+), at exact moments: a
# blocking socket and the project's codec (wire/, generated from Kafka's own schemas; what a
# client library would hide behind its retries, this shows as the proxy sent it). Sending and
# receiving are separate, so a test can leave a fetch held while it acts, then read it.
"""One blocking Kafka connection on wire/: send a request, read its answer or its close."""

from __future__ import annotations

import itertools
import socket
import struct
import time
from typing import Any

from tests.support.load_wire import request_frame
from wire.apis import response_header_version
from wire.codec import Message, decode_response
from wire.headers import parse_response_header
from wire.messages.metadata_request import MetadataRequest, MetadataRequestTopic
from wire.messages.metadata_response import MetadataResponse

__all__ = ["Closed", "WireSocket", "metadata"]

METADATA_VERSION = 12  # topic ids in the answer


class Closed(Exception):
    """The peer closed the connection instead of answering."""


class WireSocket:
    """One connection to ``address`` (HOST:PORT); a context manager that closes it."""

    def __init__(self, address: str, timeout_s: float = 60.0) -> None:
        host, _, port = address.rpartition(":")
        self._sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        self._ids = itertools.count(1)
        self._sent: dict[int, tuple[int, int]] = {}

    def __enter__(self) -> WireSocket:
        return self

    def __exit__(self, *exc: object) -> None:
        self._sock.close()

    def send(self, message: Message, version: int) -> int:
        correlation_id = next(self._ids)
        self._sent[correlation_id] = (message.API_KEY, version)
        self._sock.sendall(request_frame(message, version, correlation_id, "wire-socket"))
        return correlation_id

    def receive(self, timeout_s: float = 60.0) -> Any:
        """The next answer, decoded.

        Raises:
            Closed: the peer closed the connection first.
            TimeoutError: nothing within ``timeout_s``.
        """
        self._sock.settimeout(timeout_s)
        (size,) = struct.unpack(">i", self._read(4))
        body = self._read(size)
        (correlation_id,) = struct.unpack(">i", body[:4])
        api_key, version = self._sent.pop(correlation_id)
        _, start = parse_response_header(
            memoryview(body), response_header_version(api_key, version)
        )
        return decode_response(api_key, version, memoryview(body)[start:])

    def call(self, message: Message, version: int, timeout_s: float = 60.0) -> tuple[Any, float]:
        """Send ``message`` and read its answer; the answer and the seconds it took."""
        started = time.monotonic()
        self.send(message, version)
        answer = self.receive(timeout_s)
        return answer, time.monotonic() - started

    def _read(self, size: int) -> bytes:
        data = b""
        while len(data) < size:
            try:
                chunk = self._sock.recv(size - len(data))
            except ConnectionResetError as error:
                raise Closed(str(error)) from None
            if not chunk:
                raise Closed(f"closed after {len(data)} of {size} bytes")
            data += chunk
        return data


def metadata(address: str, topic: str) -> MetadataResponse:
    """Metadata v12 of ``topic`` as ``address`` (a broker, or a proxy port) answers it."""
    with WireSocket(address) as conn:
        answer, _ = conn.call(MetadataRequest(topics=[MetadataRequestTopic(name=topic)]),
                              METADATA_VERSION)  # fmt: skip
    assert isinstance(answer, MetadataResponse)
    return answer
