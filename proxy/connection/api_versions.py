# Strategy: every client opens with ApiVersions, and forwarding it opens an upstream
# connection nothing else may need (10,000 consumers: 20,000 descriptors for half a minute).
# With the proxy's identity the answer is the same for every client of a broker port, so the
# first is forwarded and kept, later ones answered from it for the metadata refresh period; a
# broker found dead or hung is forgotten at once. Not in passthrough.
"""The cluster's ApiVersions answer per broker port, kept to answer reconnecting clients."""

from __future__ import annotations

from dataclasses import replace

from wire.apis import ApiKey, response_header_version
from wire.codec import decode, encode
from wire.framing import frame
from wire.headers import RequestHeader, ResponseHeader, encode_response_header
from wire.messages import ApiVersionsResponse

__all__ = ["KnownApiVersions"]

_SIZE_AND_CORRELATION_ID_BYTES = 8


class KnownApiVersions:
    """ApiVersions answers by broker port (None: the bootstrap port), each for ``max_age_s``."""

    __slots__ = ("_answers", "_max_age_s")

    def __init__(self, max_age_s: float) -> None:
        self._max_age_s = max_age_s
        self._answers: dict[int | None, tuple[float, ApiVersionsResponse]] = {}

    def learn(self, node_id: int | None, response: ApiVersionsResponse, now_s: float) -> None:
        """Keep a successful answer as the proxy sent it to a client (throttle cleared)."""
        if response.error_code == 0:
            self._answers[node_id] = (now_s, replace(response, throttle_time_ms=0))

    def forget(self, node_id: int | None) -> None:
        """The broker behind this port is dead or hung: forward its next ApiVersions."""
        self._answers.pop(node_id, None)

    def keep(
        self, node_id: int | None, frame: bytes | bytearray, version: int, now_s: float
    ) -> None:
        """Keep a forwarded answer (the whole frame, as sent) unless a fresh one is kept.
        (Its response header is v0 at every version, KIP-511: the correlation id alone.)"""
        if self._fresh(node_id, now_s) is None:
            body = memoryview(frame)[_SIZE_AND_CORRELATION_ID_BYTES:]
            self.learn(node_id, decode(ApiVersionsResponse, body, version), now_s)

    def answer(self, node_id: int | None, header: RequestHeader, now_s: float) -> bytes | None:
        """The whole response frame for this ApiVersions request, or None: forward it (also
        when the cluster does not serve the request's version: its own UNSUPPORTED_VERSION
        answer, in v0, is what the client must get, KIP-511)."""
        known = self._fresh(node_id, now_s)
        if known is None:
            return None
        version = header.api_version
        if version > _served_max(known):
            return None
        head = encode_response_header(
            ResponseHeader(header.correlation_id),
            response_header_version(ApiKey.API_VERSIONS, version),
        )
        return frame(head, encode(known, version))

    def _fresh(self, node_id: int | None, now_s: float) -> ApiVersionsResponse | None:
        known = self._answers.get(node_id)
        if known is None or now_s - known[0] >= self._max_age_s:
            return None
        return known[1]


def _served_max(response: ApiVersionsResponse) -> int:
    """The newest ApiVersions version the cluster's answer says it serves (-1: none)."""
    for entry in response.api_keys:
        if entry.api_key == ApiKey.API_VERSIONS:
            return entry.max_version
    return -1
