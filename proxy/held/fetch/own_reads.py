# Strategy: in passthrough every record a client receives is fetched with its own identity:
# a held fetch's reads go on the client's own upstream connection, as requests of the proxy's
# own after the client's. Each answer also says which partitions the cluster let it read
# (`known`): only for those may the proxy answer "nothing new" from what it knows.
"""A held fetch's reads on its client's own upstream connection (passthrough)."""

from __future__ import annotations

from collections.abc import Container
from uuid import UUID

from proxy.held.client_upstream import ClientUpstream
from wire.apis import ApiKey, response_header_version
from wire.codec import decode, encode
from wire.headers import parse_response_header
from wire.messages.fetch_request import FetchRequest
from wire.messages.fetch_response import FetchResponse

__all__ = ["OwnReads"]

_SIZE_BYTES = 4


class OwnReads:
    """HeldRequests' FetchReads for one held fetch of a passthrough client.

    Args:
        upstream: the client connection's upstream connection.
        client_id: the client id of the client's fetch.
        known: the connection's partitions (as the client names them) it has read itself;
            updated with every answer (see the module header).
    """

    __slots__ = ("_client_id", "_known", "_upstream")

    def __init__(
        self, upstream: ClientUpstream, client_id: str | None, known: set[tuple[object, int]]
    ) -> None:
        self._upstream = upstream
        self._client_id = client_id
        self._known = known

    async def fetch(self, request: FetchRequest, version: int) -> FetchResponse:
        frame = await self._upstream.own_request(
            ApiKey.FETCH, version, self._client_id, encode(request, version)
        )
        body = memoryview(frame)[_SIZE_BYTES:]
        _, start = parse_response_header(body, response_header_version(ApiKey.FETCH, version))
        response = decode(FetchResponse, body[start:], version)
        _follow(self._known, request, response)
        return response

    @property
    def known(self) -> Container[tuple[object, int]]:
        """The partitions the cluster last let this connection read."""
        return self._known


def _follow(known: set[tuple[object, int]], request: FetchRequest, response: FetchResponse) -> None:
    """Make ``known`` what the cluster's answer says about the partitions ``request`` asked
    for: readable without error (in), denied, failed or left out (out)."""
    readable: set[tuple[object, int]] = set()
    if not response.error_code:
        for topic in response.responses:
            name: str | UUID = topic.topic_id if topic.topic_id.int else topic.topic
            readable.update(
                (name, data.partition_index) for data in topic.partitions if not data.error_code
            )
    for wanted in request.topics:
        asked: str | UUID = wanted.topic_id if wanted.topic_id.int else wanted.topic
        for partition in wanted.partitions:
            key = (asked, partition.partition)
            if key in readable:
                known.add(key)
            else:
                known.discard(key)
