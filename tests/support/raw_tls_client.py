# Strategy: the refusal and bad-input tests of issue 16 send exact frames (a SaslAuthenticate
# out of order, a half ClientHello, nothing at all) that no client library would send, and
# must see exactly what came back (an error code, an empty mechanism list, EOF). So they use a
# blocking socket (plain or wrapped in the standard ssl module) and the project's wire codec
# to build and read frames; no library hides a retry or a reconnect.
"""Raw Kafka frames over a plain or TLS socket, for the security tests."""

from __future__ import annotations

import socket
import ssl

from wire.apis import ApiKey, response_header_version
from wire.codec import decode_api_versions_response, decode_response, encode
from wire.headers import RequestHeader, encode_request_header, parse_response_header
from wire.messages import ApiVersionsRequest, ApiVersionsResponse, Message

__all__ = ["RawKafka", "closed_by_peer", "log_lines_about"]


class RawKafka:
    """One connection: send a request, read its response; ``None`` when the peer closed."""

    def __init__(self, sock: socket.socket | ssl.SSLSocket) -> None:
        self.sock = sock
        self._correlation_id = 0

    @property
    def local_port(self) -> int:
        port: int = self.sock.getsockname()[1]
        return port

    def send(self, api_key: int, version: int, request: Message) -> int:
        self._correlation_id += 1
        head = encode_request_header(
            RequestHeader(api_key, version, self._correlation_id, "raw-security-test")
        )
        body = head + encode(request, version)
        self.sock.sendall(len(body).to_bytes(4, "big") + body)
        return self._correlation_id

    def read_frame(self) -> bytes | None:
        size = self._read_exactly(4)
        if size is None:
            return None
        return self._read_exactly(int.from_bytes(size, "big"))

    def call(self, api_key: int, version: int, request: Message) -> Message | None:
        """Send ``request`` and decode its response; ``None`` if the connection closed."""
        correlation_id = self.send(api_key, version, request)
        frame = self.read_frame()
        if frame is None:
            return None
        header, start = parse_response_header(frame, response_header_version(api_key, version))
        assert header.correlation_id == correlation_id
        if api_key == ApiKey.API_VERSIONS:
            return decode_api_versions_response(frame[start:], version)[0]
        return decode_response(api_key, version, frame[start:])

    def api_versions(self) -> ApiVersionsResponse:
        answer = self.call(
            ApiKey.API_VERSIONS,
            3,
            ApiVersionsRequest(client_software_name="raw", client_software_version="1"),
        )
        assert isinstance(answer, ApiVersionsResponse), "connection closed on ApiVersions"
        return answer

    def _read_exactly(self, size: int) -> bytes | None:
        data = bytearray()
        while len(data) < size:
            try:
                chunk = self.sock.recv(size - len(data))
            except (ConnectionResetError, ssl.SSLError):
                return None
            if not chunk:
                return None
            data += chunk
        return bytes(data)


def closed_by_peer(sock: socket.socket | ssl.SSLSocket) -> bool:
    """True when the peer has closed (EOF, reset or a TLS alert), within the socket timeout."""
    try:
        return sock.recv(1) == b""
    except (ConnectionError, ssl.SSLError):
        return True


def log_lines_about(log: str, port: int) -> list[str]:
    """The log lines naming the client connection from 127.0.0.1:``port``."""
    return [line for line in log.splitlines() if f"127.0.0.1:{port}" in line]
