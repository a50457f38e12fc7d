# Strategy: the proxy itself talks to the cluster only to learn its brokers (for the per-broker
# listeners and readiness). It does so the way a client would: ApiVersions v0 to learn which
# Metadata version to speak, then one Metadata request for no topics. Forwarded client traffic
# never goes through here; each client connection owns its own upstream connection.
"""The proxy's own requests to the upstream cluster."""

from __future__ import annotations

import trio

from proxy.errors import UpstreamUnavailable
from proxy.framed import PeerClosed, receive_exactly
from proxy.routing import Address
from wire.apis import ApiKey, response_header_version
from wire.codec import decode_api_versions_response, decode_response, encode
from wire.errors import WireError
from wire.framing import frame
from wire.headers import RequestHeader, encode_request_header, parse_response_header
from wire.messages import ApiVersionsRequest, MetadataRequest, MetadataResponse

__all__ = ["CLIENT_ID", "fetch_cluster_metadata"]

#: The client id of the proxy's own requests, so broker logs can tell them apart.
CLIENT_ID = "purgatory-proxy"


async def _exchange(
    stream: trio.SocketStream, api_key: int, version: int, correlation_id: int, body: bytes
) -> memoryview:
    """Send one request and return the body of its response (after the response header)."""
    header = RequestHeader(
        api_key=api_key, api_version=version, correlation_id=correlation_id, client_id=CLIENT_ID
    )
    await stream.send_all(frame(encode_request_header(header), body))
    size = int.from_bytes(await receive_exactly(stream, 4), "big")
    response = memoryview(await receive_exactly(stream, size))
    parsed, start = parse_response_header(response, response_header_version(api_key, version))
    if parsed.correlation_id != correlation_id:
        raise UpstreamUnavailable(
            f"answered correlation id {parsed.correlation_id}, expected {correlation_id}"
        )
    return response[start:]


async def _brokers_of(address: Address) -> dict[int, Address]:
    stream = await trio.open_tcp_stream(address.host, address.port)
    async with stream:
        body = await _exchange(stream, ApiKey.API_VERSIONS, 0, 1, encode(ApiVersionsRequest(), 0))
        versions, _ = decode_api_versions_response(body, 0)
        ours_low, ours_high = MetadataRequest.VERSIONS
        theirs = {entry.api_key: entry for entry in versions.api_keys}.get(ApiKey.METADATA)
        if theirs is None or theirs.max_version < max(ours_low, 1):
            raise UpstreamUnavailable(f"{address} supports no Metadata version the proxy speaks")
        version = min(theirs.max_version, ours_high)
        request = MetadataRequest(topics=[], allow_auto_topic_creation=False)
        body = await _exchange(stream, ApiKey.METADATA, version, 2, encode(request, version))
        metadata = decode_response(ApiKey.METADATA, version, body)
        assert isinstance(metadata, MetadataResponse)
        return {broker.node_id: Address(broker.host, broker.port) for broker in metadata.brokers}


async def fetch_cluster_metadata(bootstrap: list[Address], timeout_s: float) -> dict[int, Address]:
    """The cluster's brokers (node id -> upstream address), from the first bootstrap that answers.

    Raises:
        UpstreamUnavailable: no bootstrap server answered within ``timeout_s`` each; the
            message lists what went wrong with each.
    """
    problems = []
    for address in bootstrap:
        try:
            with trio.fail_after(timeout_s):
                return await _brokers_of(address)
        except (OSError, trio.TooSlowError, trio.BrokenResourceError, PeerClosed) as error:
            problems.append(f"{address}: {error or type(error).__name__}")
        except (WireError, UpstreamUnavailable) as error:
            problems.append(f"{address}: {error}")
    raise UpstreamUnavailable("; ".join(problems) or "no upstream bootstrap servers configured")
