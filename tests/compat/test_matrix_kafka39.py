"""The basic round trip of every client through the proxy in front of Apache Kafka 3.9.2.

3.9 is the older line users run (MSK, Confluent and Strimzi still offer it). KIP-848's
consumer protocol and share groups are not generally available there, so only the round trip
runs on it. The trusted reader reads the 3.9.2 broker itself.

``test_a_newer_api_versions_than_the_broker_knows`` is Kroxylicious' issue 2450: franz-go
(and the Java 4.4 client) open with ApiVersions v5 (KIP-1242), which 3.9.2 does not know. The
broker answers with a v0 UNSUPPORTED_VERSION response listing its own range (KIP-511), and a
proxy that hands that answer on re-encoded at v5 gives the client bytes it cannot parse:
Kroxylicious did, and franz-go could not connect through it to Kafka 3.8. Kafka's request log
shows the v5 request reached 3.9.2 through the proxy; the round trip shows franz-go then
talked to it.
"""

from __future__ import annotations

import pytest
import trio

from testbed.kafka_cluster import KafkaCluster
from testbed.proxy_process import ProxyProcess, running_proxy
from tests.compat import CLIENTS, roundtrip_and_check


@pytest.mark.parametrize("client", CLIENTS)
async def test_roundtrip_through_proxy_to_kafka_39(
    kafka39: KafkaCluster, kafka39_proxy: ProxyProcess, client: str
) -> None:
    result, problems = await trio.to_thread.run_sync(
        roundtrip_and_check, client, kafka39_proxy.bootstrap, kafka39.bootstrap()
    )
    print(f"{client} via proxy to {kafka39.version}: {result.elapsed_s:.2f} s")
    assert problems == []
    assert len(result.report.consumed) == 1000
    assert kafka39_proxy.alive()


def _api_versions_requests(cluster: KafkaCluster) -> list[int]:
    return [
        entry["requestHeader"]["requestApiVersion"]
        for entry in cluster.requests(cluster.nodes[0].node_id)
        if entry["requestHeader"]["requestApiKeyName"] == "API_VERSIONS"
    ]


async def test_a_newer_api_versions_than_the_broker_knows(kafka39: KafkaCluster) -> None:
    """franz-go's ApiVersions v5 reaches 3.9.2 through a fresh proxy (nothing cached), the
    broker's v0 UNSUPPORTED_VERSION answer gets back to franz-go as v0, and franz-go retries
    at v4 and completes its round trip."""
    before = len(_api_versions_requests(kafka39))
    with running_proxy(kafka39.bootstrap()) as proxy:
        result, problems = await trio.to_thread.run_sync(
            roundtrip_and_check, "franz-go", proxy.bootstrap, kafka39.bootstrap(), 100
        )
        assert proxy.alive()
    assert problems == []
    assert len(result.report.consumed) == 100
    versions = _api_versions_requests(kafka39)[before:]
    assert 5 in versions, f"no ApiVersions v5 reached Kafka {kafka39.version}: {versions}"
    assert 4 in versions, f"no retry at v4 reached Kafka {kafka39.version}: {versions}"
