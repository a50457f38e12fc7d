# Strategy: the proxy itself talks to the cluster only to learn its brokers (for the per-broker
# listeners and readiness). It does so the way a client would: ApiVersions v0 to learn which
# Metadata version to speak, then one Metadata request for no topics, over a short-lived
# BrokerChannel (the same request path as the proxy's other own requests, TLS and SASL
# included). A refused authentication is reported as such (SaslAuthenticationFailed), so the
# server can tell operators why it is not ready. Forwarded client
# traffic never goes through here; each client connection owns its own upstream connection.
#
# `refresh_metadata_forever` is the task that keeps the broker directory current: every
# upstream.metadata_refresh_ms it learns the brokers (binding a listener for each new one) and
# keeps /readyz's "metadata" and "upstream_auth" causes up to date.
"""The proxy's own requests to the upstream cluster, and the metadata refresher."""

from __future__ import annotations

import logging
from typing import NoReturn

import trio

from proxy.address import Address
from proxy.errors import BrokerPortUnavailable, StartupError, UpstreamUnavailable
from proxy.observability.metrics import Metrics
from proxy.observability.readiness import Readiness
from proxy.routing.directory import BrokerDirectory
from proxy.security.secure_upstream import SaslAuthenticationFailed
from proxy.upstream.broker_channel import BrokerChannel
from proxy.upstream.dialer import Dialer
from wire.apis import ApiKey
from wire.errors import WireError
from wire.messages import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse

__all__ = ["fetch_cluster_metadata", "refresh_metadata_forever"]

log = logging.getLogger("purgatory_proxy.server")


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
    bootstrap: list[Address], timeout_s: float, dialer: Dialer
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
            channel = BrokerChannel(address, nursery, dialer=dialer)
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


async def refresh_metadata_forever(
    bootstrap: list[Address],
    timeout_s: float,
    dialer: Dialer,
    refresh_s: float,
    directory: BrokerDirectory,
    metrics: Metrics,
    readiness: Readiness,
) -> NoReturn:
    """Learn the cluster's brokers now and every ``refresh_s``.

    Error handling: an unreachable cluster is logged once per failure streak and retried
    with capped backoff; the proxy keeps serving whatever it already knows.
    """
    backoff_s = 0.1
    failing = learned = False
    while True:
        try:
            brokers = await fetch_cluster_metadata(bootstrap, timeout_s, dialer)
            directory.learn_brokers(brokers)
        except (UpstreamUnavailable, StartupError) as error:
            if isinstance(error, BrokerPortUnavailable) and not learned:
                raise  # at start-up, a port as configured is taken: exit 2 with this one line
            # StartupError: a new broker's listener cannot be bound now (out of descriptors,
            # port taken); the proxy keeps serving the brokers it has and tries again.
            if isinstance(error, SaslAuthenticationFailed):  # never holds the secret
                readiness.block("upstream_auth", f"cannot authenticate upstream: {error}")
            elif not learned and isinstance(error, UpstreamUnavailable):
                # Why it waits (a refused certificate, a refused connection), for /readyz.
                readiness.block("metadata", f"waiting for upstream metadata: {error}")
            metrics.metadata_refreshes.labels("failed").inc()
            if not failing:
                fetching = isinstance(error, UpstreamUnavailable)
                what = "fetch upstream metadata" if fetching else "serve a new broker yet"
                log.warning("cannot %s (will retry): %s", what, error, extra={"reason": str(error)})
            failing = True
            await trio.sleep(backoff_s)
            backoff_s = min(backoff_s * 2, 5.0)
            continue
        if failing:
            log.info("upstream metadata reachable again")
        failing, learned, backoff_s = False, True, 0.1
        metrics.metadata_refreshes.labels("ok").inc()
        readiness.clear("upstream_auth")
        readiness.clear("metadata")
        await trio.sleep(refresh_s)
