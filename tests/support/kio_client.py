# Strategy: the Kafka 4 API tests send exact requests of APIs no Python client library speaks
# (ShareGroupHeartbeat, ShareFetch, ShareAcknowledge) and compare what the broker and the proxy
# answer, so they use a blocking socket and kio, a codec independent of the proxy's wire/: kio
# encodes every request body and decodes every response body. Only the header framing (fixed
# by the protocol, and the same for every API) comes from wire.headers.
"""A blocking Kafka connection whose message bodies are kio's, for the Kafka 4 API tests."""

from __future__ import annotations

import io
import socket
from typing import Any

from kio.index import load_payload_module
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

from wire.apis import API_BY_KEY, response_header_version
from wire.headers import RequestHeader, encode_request_header, parse_response_header

__all__ = ["KioConnection", "kio_module", "kio_request"]


def kio_module(api_key: int, version: int, kind: str = "request") -> Any:
    """The kio module of (api key, version)'s request or response, for its nested classes."""
    entity = EntityType.request if kind == "request" else EntityType.response
    return load_payload_module(api_key, version, entity)


def kio_request(api_key: int, version: int, **fields: Any) -> Any:
    """The kio request of (api key, version) holding ``fields``."""
    name = API_BY_KEY[api_key].name + "Request"
    return getattr(kio_module(api_key, version), name)(**fields)


class KioConnection:
    """One TCP connection: ``call`` sends a kio request and returns the kio response.

    Resource handling: a context manager; the socket is closed on exit.
    Error handling: a closed connection or a mismatched correlation id raise AssertionError.
    """

    def __init__(self, address: str, timeout_s: float = 30.0) -> None:
        host, _, port = address.rpartition(":")
        self._sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        self._correlation_id = 0

    def __enter__(self) -> KioConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._sock.close()

    def call(self, request: Any) -> Any:
        api_key, version = int(request.__api_key__), int(request.__version__)
        self._correlation_id += 1
        body = io.BytesIO()
        entity_writer(type(request))(body, request)
        head = encode_request_header(
            RequestHeader(api_key, version, self._correlation_id, "kafka4-api-test")
        )
        data = head + body.getvalue()
        self._sock.sendall(len(data).to_bytes(4, "big") + data)
        frame = self._read(int.from_bytes(self._read(4), "big"))
        header, start = parse_response_header(frame, response_header_version(api_key, version))
        assert header.correlation_id == self._correlation_id
        name = API_BY_KEY[api_key].name + "Response"
        response_class = getattr(kio_module(api_key, version, "response"), name)
        response, size = entity_reader(response_class)(frame[start:], 0)
        assert size == len(frame) - start, f"{name}: {len(frame) - start - size} bytes left"
        return response

    def _read(self, size: int) -> bytes:
        data = bytearray()
        while len(data) < size:
            chunk = self._sock.recv(size - len(data))
            assert chunk, f"connection closed after {len(data)} of {size} bytes"
            data += chunk
        return bytes(data)
