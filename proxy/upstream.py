# Strategy: the proxy itself talks to the cluster only to learn its brokers (for the per-broker
# listeners and readiness). It does so the way a client would: ApiVersions v0 to learn which
# Metadata version to speak, then one Metadata request for no topics, over a short-lived
# BrokerChannel (the same request path as the proxy's other own requests, TLS and SASL
# included). A refused authentication is reported as such (SaslAuthenticationFailed), so the
# server can tell operators why it is not ready. Forwarded client
# traffic never goes through here; each client connection owns its own upstream connection.
"""The proxy's own requests to the upstream cluster."""

from __future__ import annotations

import trio

from proxy.broker_channel import BrokerChannel
from proxy.errors import UpstreamUnavailable
from proxy.routing import Address
from proxy.secure_upstream import SaslAuthenticationFailed, UpstreamSecurity
from wire.apis import ApiKey
from wire.errors import WireError
from wire.messages import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse

__all__ = ["fetch_cluster_metadata"]


async def _brokers_of(channel: BrokerChannel) -> dict[int, Address]:
    versions = await channel.request(ApiVersionsRequest(), 0)
    assert isinstance(versions, ApiVersionsResponse)
    ours_low, ours_high = MetadataRequest.VERSIONS
    theirs = {entry.api_key: entry for entry in versions.api_keys}.get(ApiKey.METADATA)
    if theirs is None or theirs.max_version < max(ours_low, 1):
        raise UpstreamUnavailable(f"{channel.address} supports no Metadata version we speak")
    version = min(theirs.max_version, ours_high)
    request = MetadataRequest(topics=[], allow_auto_topic_creation=False)
    metadata = await channel.request(request, version)
    assert isinstance(metadata, MetadataResponse)
    return {broker.node_id: Address(broker.host, broker.port) for broker in metadata.brokers}


async def fetch_cluster_metadata(
    bootstrap: list[Address], timeout_s: float, security: UpstreamSecurity | None = None
) -> dict[int, Address]:
    """The cluster's brokers (node id -> upstream address), from the first bootstrap that answers.

    Raises:
        UpstreamUnavailable: no bootstrap server answered within ``timeout_s`` each; the
            message lists what went wrong with each.
        SaslAuthenticationFailed: as above, and at least one refused the proxy's credentials.
    """
    problems = []
    refused = False
    for address in bootstrap:
        async with trio.open_nursery() as nursery:
            channel = BrokerChannel(address, nursery, timeout_s, security)
            try:
                with trio.fail_after(timeout_s):
                    return await _brokers_of(channel)
            except trio.TooSlowError:
                problems.append(f"{address}: no answer within {timeout_s:g} s")
            except (WireError, UpstreamUnavailable) as error:
                refused = refused or isinstance(error, SaslAuthenticationFailed)
                problems.append(
                    f"{address}: {error}" if str(address) not in str(error) else str(error)
                )
            finally:
                await channel.aclose()
                nursery.cancel_scope.cancel()
    if refused:
        raise SaslAuthenticationFailed("; ".join(problems))
    raise UpstreamUnavailable("; ".join(problems) or "no upstream bootstrap servers configured")
